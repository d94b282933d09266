"""Running experiments: the trainer and everything around the algorithm (seeding, evaluation, run dir)."""
