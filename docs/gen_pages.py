"""Writes the generated reference pages into the site as MkDocs builds it (the gen-files plugin runs this file):
configuration keys, commands and presets, from the code (`rlfoundry.cli.reference`)."""

import mkdocs_gen_files

from rlfoundry.cli.reference import cli_markdown, config_markdown, presets_markdown

for name, page in (("config", config_markdown), ("cli", cli_markdown), ("presets", presets_markdown)):
    with mkdocs_gen_files.open(f"reference/{name}.md", "w") as out:
        out.write(page())
