"""A SPEC (`ENV_ID:VARIANT` or an experiment file) and overrides resolved into one validated experiment config.

Above the algorithms, because the `algo` section is each algorithm's own config class; the plain sections
below them live in `rlfoundry.config`."""
