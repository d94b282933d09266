"""What runs leave behind and how they are found: the run directory's files, the registry of runs, the report, and
the tables `rlfoundry runs` prints and exports. Below the trainer, which writes them; above the sinks."""
