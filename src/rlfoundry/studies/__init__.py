"""Experiments over many runs: sets of seeds and specs, their statistics and their reports."""
