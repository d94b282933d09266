"""`python -m rlfoundry.cli`: the same as the `rlfoundry` command."""

from rlfoundry.cli import main

main()
