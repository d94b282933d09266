"""Writes the generated parts of the documentation site as MkDocs builds it (the gen-files plugin runs this file), from
the code (`rlfoundry.cli.reference`): the configuration keys, commands and presets pages, and the end of each
algorithm page (`docs/algorithms/<module>.md`: its settings, presets and benchmark rows), appended to the
hand-written page in the site, never to the file."""

from pathlib import Path

import mkdocs_gen_files

from rlfoundry.cli.reference import (
    algorithm_page_markdown,
    algorithm_pages,
    cli_markdown,
    config_markdown,
    presets_markdown,
    shipped_variants,
)

shipped_variants.cache_clear()  # `mkdocs serve` runs this again in the same process: read the edited presets

for name, render in (("config", config_markdown), ("cli", cli_markdown), ("presets", presets_markdown)):
    with mkdocs_gen_files.open(f"reference/{name}.md", "w") as out:
        out.write(render())

docs = Path(mkdocs_gen_files.config.docs_dir)
for page in algorithm_pages():
    # "a" on a page of docs/: gen-files copies the hand-written page into the build and appends there
    with mkdocs_gen_files.open(f"algorithms/{page}.md", "a") as out:
        out.write(algorithm_page_markdown(page, docs))
