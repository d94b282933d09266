"""Appends the generated half of each environment family page (its config keys and presets, from the code:
`rlfoundry.cli.env_reference`) to the hand-written page in docs/environments/ as MkDocs builds the site (the gen-files
plugin runs this file). The pages in the repository stay as written; the site's copies get the tables."""

import mkdocs_gen_files

from rlfoundry.cli.env_reference import PAGES, family_markdown

for page in PAGES:
    with mkdocs_gen_files.open(f"environments/{page.page}.md", "a") as out:
        out.write("\n" + family_markdown(page))
