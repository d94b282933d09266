"""The generated half of the environment family pages (docs/environments/<page>.md): each family's config keys, its
presets and, for rlfoundry's own envs, their constructor arguments, taken from the code so that the pages cannot
drift from it. `docs/gen_env_pages.py` appends them to the hand-written pages when the site is built; the rows come
from `rlfoundry.cli.reference`, which renders the configuration and presets references the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym

from rlfoundry.cli import reference
from rlfoundry.cli.reference import Key, _cell, _keys, keys_table, preset_variants
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import FAMILIES, Family, family_of, is_minigrid, register_optional_families
from rlfoundry.envs.atari import is_atari
from rlfoundry.envs.bandits import BANDITS
from rlfoundry.envs.toys import TOYS


def _optional(name: str) -> Family:
    """The (first) `rlfoundry.envs.FAMILIES` entry of an optional family, by name."""
    return next(family for family in FAMILIES if family.name == name)


def _entry_point(env_id: str) -> str:
    """The module path of a registered id's entry point ('' for ids not registered or registered with a callable)."""
    spec = gym.registry.get(env_id)
    return spec.entry_point if spec is not None and isinstance(spec.entry_point, str) else ""


def _own(env_id: str) -> bool:
    return env_id.startswith("rlfoundry/") or env_id in BANDITS


@dataclass(frozen=True)
class FamilyPage:
    """One family's page: `docs/environments/<page>.md`, the env config keys it documents (a sub-model such as
    `env.atari` stands for all its keys), which ids it covers and, for our own envs, the ids whose constructor
    arguments (`env.kwargs`) it lists."""

    page: str
    title: str
    keys: tuple[str, ...]
    match: Callable[[str], bool] | None = None  # the ids of a family that is not optional
    family: Family | None = None  # its (first) entry of `rlfoundry.envs.FAMILIES`, for the optional families
    kwargs_ids: tuple[str, ...] = ()

    def owns(self, env_id: str) -> bool:
        """Whether the page covers `env_id`: an optional family's ids by `family_of` (every entry of the family's
        name: one per prefix), the others' by `match`."""
        if self.family is not None:
            found = family_of(env_id)
            return found is not None and found.name == self.family.name
        return self.match is not None and self.match(env_id)


PAGES: tuple[FamilyPage, ...] = (
    FamilyPage("gymnasium", "Gymnasium built-ins", ("env.pixels", "env.mask_obs", "env.img_size", "env.wrappers"),
               lambda env_id: _entry_point(env_id).startswith("gymnasium.envs.")
               and not _entry_point(env_id).startswith("gymnasium.envs.mujoco")),
    FamilyPage("mujoco", "MuJoCo", ("env.pixels", "env.max_episode_steps"),
               lambda env_id: _entry_point(env_id).startswith("gymnasium.envs.mujoco")),
    FamilyPage("atari", "Atari (ALE)", ("env.atari",), is_atari),
    FamilyPage("minigrid", "MiniGrid", ("env.minigrid", "env.max_episode_steps"), is_minigrid),
    FamilyPage("dm-control", "DeepMind Control", ("env.dm_control", "env.action_repeat"),
               family=_optional("DeepMind Control")),
    FamilyPage("vizdoom", "ViZDoom", ("env.vizdoom", "env.kwargs", "env.max_episode_steps"),
               family=_optional("ViZDoom")),
    FamilyPage("retro", "Retro", ("env.retro", "env.kwargs", "env.max_episode_steps", "env.vectorization"),
               family=_optional("Retro")),
    FamilyPage("brax", "Brax", ("env.kwargs", "env.max_episode_steps", "env.vectorization"), family=_optional("Brax")),
    FamilyPage("popgym", "POPGym", ("env.kwargs", "env.max_episode_steps"), family=_optional("POPGym")),
    FamilyPage("robotics", "Gymnasium-Robotics", ("env.kwargs", "env.max_episode_steps"),
               family=_optional("Gymnasium-Robotics")),
    FamilyPage("toys", "rlfoundry's own envs", ("env.kwargs",), _own, kwargs_ids=(*TOYS, *BANDITS)),
)


def page_of(env_id: str) -> FamilyPage:
    """The one family page that covers `env_id`; ValueError when none does (or, a bug of `PAGES`, several do)."""
    register_optional_families()  # Atari's and MiniGrid's ids, ours: the entry points some pages tell ids by
    found = [page for page in PAGES if page.owns(env_id)]
    if len(found) != 1:
        raise ValueError(f"{env_id}: covered by {len(found)} family pages ({[page.page for page in found]}); "
                         "expected one")
    return found[0]


def config_keys(page: FamilyPage) -> list[Key]:
    """The `rlfoundry.cli.reference.Key`s of the env config keys a page documents, sub-models flattened."""
    every = list(_keys(EnvConfig, "env"))
    return [key for name in page.keys for key in every if key.path == name or key.path.startswith(name + ".")]


def keys_markdown(page: FamilyPage) -> str:
    lines = ["## Config keys", "",
             "The `env` keys this family reads, generated from the config models (`rlfoundry.cli.env_reference`); "
             "the [configuration reference](../reference/config.md) has every key.", "", *keys_table(config_keys(page))]
    return "\n".join(lines) + "\n"


def preset_ids(page: FamilyPage) -> list[str]:
    """The env ids of the presets on this family's page."""
    return [env_id for env_id in sorted({v.env_id for v in preset_variants()}) if page_of(env_id) is page]


def presets_rows(page: FamilyPage) -> list[str]:
    """The header and this family's rows of the presets table."""
    return reference.presets_rows(set(preset_ids(page)))


def presets_section(page: FamilyPage) -> str:
    lines = ["## Presets", ""]
    rows = presets_rows(page)
    if len(rows) > 2:
        lines += ["The presets of this family's ids, generated from the preset files; train one with "
                  "`rlfoundry train ENV_ID:VARIANT`.", "", *rows]
    else:
        lines.append("No presets yet: `rlfoundry train ENV_ID:ALGO` (`ppo`, `sac`, ...) trains an id with the "
                     "algorithm's defaults.")
    return "\n".join(lines) + "\n"


def kwargs_markdown(page: FamilyPage) -> str:
    """The constructor arguments of the page's own ids (what `env.kwargs` may set), with the defaults each id is
    registered with."""
    if not page.kwargs_ids:
        return ""
    register_optional_families()
    lines = ["## Constructor arguments", "",
             "What `env.kwargs` can set for each id, generated from the env classes and their registrations.", "",
             "| id | `env.kwargs` (default) |", "|---|---|"]
    for env_id in page.kwargs_ids:
        spec = gym.spec(env_id)
        assert isinstance(spec.entry_point, str)  # ours are registered by path
        creator = gym.envs.registration.load_env_creator(spec.entry_point)
        params = [p for p in inspect.signature(creator).parameters.values() if p.name != "render_mode"]
        shown = [f"`{p.name}` ({spec.kwargs.get(p.name, p.default)!r})" for p in params]
        lines.append(f"| `{env_id}` | {_cell(', '.join(shown))} |")
    return "\n".join(lines) + "\n"


def family_markdown(page: FamilyPage) -> str:
    """The generated sections appended to a family's page: its config keys, its presets, its ids' arguments."""
    parts = [keys_markdown(page), presets_section(page), kwargs_markdown(page)]
    return "\n".join(part for part in parts if part)
