"""Experience storage and the functions that fill and read it."""
