"""The environment family pages (docs/environments/): every family has a page and a row in the overview, each page's
generated half lists every key of the family's config section, and every preset lands on exactly one page."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from rlfoundry.cli.env_reference import PAGES, family_markdown, page_of, preset_ids, presets_rows
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import FAMILIES
from rlfoundry.experiment.load import load_presets
from tests.docpages import ROOT

DOCS = ROOT / "docs" / "environments"
GENERAL = {"index", "options"}  # the overview and the options of every family: not family pages


def index_rows() -> list[str]:
    return [line for line in (DOCS / "index.md").read_text().splitlines() if line.startswith("| ")]


def row_of(page: str) -> str:
    rows = [row for row in index_rows() if f"]({page}.md)" in row]
    assert len(rows) == 1, f"docs/environments/index.md: {len(rows)} overview rows link to {page}.md; expected one"
    return rows[0]


def test_every_optional_family_has_a_page_and_an_overview_row_naming_its_extra():
    for family in FAMILIES:
        pages = [page for page in PAGES if page.family is not None and page.family.name == family.name]
        assert len(pages) == 1, f"{family.name}: {len(pages)} pages in rlfoundry.cli.env_reference.PAGES"
        assert (DOCS / f"{pages[0].page}.md").is_file()
        assert f'"rlfoundry[{family.extra}]"' in row_of(pages[0].page), family.name


def test_every_page_has_a_file_and_a_row_and_every_file_a_page():
    assert len({page.page for page in PAGES}) == len(PAGES)
    for page in PAGES:
        assert (DOCS / f"{page.page}.md").is_file(), page.page
        row_of(page.page)
    files = {path.stem for path in DOCS.glob("*.md")} - GENERAL
    assert files == {page.page for page in PAGES}, "a page in docs/environments/ that PAGES does not list, or back"


def test_the_hand_written_pages_leave_the_generated_sections_to_the_build():
    """`docs/gen_env_pages.py` appends `## Config keys` and `## Presets`: a hand-written copy would show twice."""
    for page in PAGES:
        headings = re.findall(r"^## (.+)$", (DOCS / f"{page.page}.md").read_text(), re.M)
        generated = re.findall(r"^## (.+)$", family_markdown(page), re.M)
        assert not set(headings) & set(generated), f"{page.page}.md writes a generated section by hand"


def expected_keys(name: str) -> list[str]:
    """The dotted keys a page's `env.<name>` entry stands for: a section's fields (one level: the env sections are
    flat), or the key itself."""
    field = EnvConfig.model_fields[name.removeprefix("env.")]
    model = field.annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f"{name}.{key}" for key in model.model_fields]
    return [name]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.page)
def test_the_generated_section_lists_every_key_of_the_family_config(page):
    text = family_markdown(page)
    missing = [key for name in page.keys for key in expected_keys(name) if f"| `{key}` |" not in text]
    assert not missing, f"{page.page}: keys missing from the generated table: {missing}"


def test_every_family_section_of_the_env_config_has_a_page():
    sections = {name for name, field in EnvConfig.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}
    documented = {name.removeprefix("env.") for page in PAGES for name in page.keys}
    assert sections - {"pixels"} <= documented, sections - documented  # env.pixels is on the options page too


def test_every_preset_env_id_is_on_exactly_one_family_page():
    ids = sorted(load_presets())
    assert len(ids) >= 20
    shown = {page.page: {row.split("`")[1] for row in presets_rows(page)[2:]} for page in PAGES}
    for env_id in ids:
        owners = [page.page for page in PAGES if page.owns(env_id)]
        assert owners == [page_of(env_id).page], f"{env_id}: covered by {owners}"
        assert [name for name, rows in shown.items() if env_id in rows] == owners, env_id
    assert sorted(env_id for page in PAGES for env_id in preset_ids(page)) == ids


def test_a_family_without_presets_says_how_to_train_its_ids():
    retro = next(page for page in PAGES if page.page == "retro")
    assert not preset_ids(retro)
    assert "rlfoundry train ENV_ID:ALGO" in family_markdown(retro)


def test_an_id_of_no_family_is_an_error():
    with pytest.raises(ValueError, match="0 family pages"):
        page_of("NoSuchEnv-v0")
