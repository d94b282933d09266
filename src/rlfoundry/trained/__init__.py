"""Using a trained policy: loading it from a run (`Policy`, `rlfoundry.load_policy`), playing it, and exporting its
actor (`rlfoundry export`). Above the trainer, whose checkpoints it reads."""
