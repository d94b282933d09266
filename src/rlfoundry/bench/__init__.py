"""What `rlfoundry bench` measures: env steps/s (`env`), training steps/s (`train`), memory cores side by side
(`arch`). The CLI only parses options and prints."""
