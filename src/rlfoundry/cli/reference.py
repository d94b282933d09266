"""The references of the documentation site, generated from the code so that they cannot drift from it: every config
key (from the pydantic models of the config sections and of each algorithm), every command and option (from the
Typer app) and the presets table (from the preset files). `docs/gen_pages.py` writes them into the site when it is
built; a test fails when a key, a command or an option has no description.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import typer
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from rlfoundry.algos.base import AlgorithmConfig
from rlfoundry.config.schedule import Schedule

# Sections written by a run, not set by users (the run's record of where it came from).
RECORDED = ("provenance",)


@dataclass(frozen=True)
class Key:
    """One config key: its dotted path, type, default and description."""

    path: str
    type: str
    default: str
    description: str


def config_sections() -> dict[str, list[Key]]:
    """Every key users can set, by section: env, network, train, eval, logging, checkpoint, solved, then `algo`
    once per algorithm (`algo (ppo)`), nested models flattened into dotted paths."""
    from rlfoundry.algos.registry import algorithms
    from rlfoundry.experiment.schema import ExperimentConfig

    sections: dict[str, list[Key]] = {"(top level)": []}
    for name, field in ExperimentConfig.model_fields.items():
        if name in RECORDED or name == "algo":
            continue
        model = _model_of(field.annotation)
        if model is None:
            sections["(top level)"].append(_key(name, field))
        else:
            sections[name] = list(_keys(model, name))
    for name, agent in sorted(algorithms().items()):
        sections[f"algo ({name})"] = list(_keys(agent.config, "algo"))
    return sections


def _keys(model: type[BaseModel], prefix: str):
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}"
        nested = _model_of(field.annotation)
        if name == "name" and issubclass(model, AlgorithmConfig):  # Literal[its name]: picks the config class
            yield Key(path, type_name(field.annotation), _default(field), "The algorithm; it decides which other "
                      "algo keys exist (these).")
        elif nested is Schedule:  # a leaf with a shorthand
            yield Key(path, "float | \"lin_<start>\" | {kind, start, end}", _schedule(field),
                      field.description or "")
        elif nested is not None and not _is_open_dict(field):
            if field.description:  # a nested section says what it is for, then its own keys
                yield Key(path, "section", "", field.description)
            yield from _keys(nested, path)
        else:
            yield _key(path, field)


def _schedule(field: FieldInfo) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if not isinstance(value, Schedule):
        return _default(field)
    return f"{value.start:g}" if value.kind == "constant" else f"lin_{value.start:g}" + (
        f" to {value.end:g}" if value.end else "")


def _is_open_dict(field: FieldInfo) -> bool:
    return get_origin(field.annotation) is dict


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (`X`, `X | None`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (typing.Union, types.UnionType):
        models = [arg for arg in get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


def _key(path: str, field: FieldInfo) -> Key:
    return Key(path, type_name(field.annotation) + _bounds(field), _default(field), field.description or "")


def type_name(annotation: Any) -> str:
    """A readable type: `int`, `float | "auto"`, one of `"a" | "b"`, `list[int]`."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in get_args(annotation))
    if origin is typing.Annotated:
        return type_name(get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(type_name(arg) for arg in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(f'"{member.value}"' for member in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    """The numeric bounds a field declares (` ≥ 0`, ` in (0, 1]`), from its metadata and its annotation's."""
    marks = list(field.metadata)
    if get_origin(field.annotation) is typing.Annotated:
        marks += get_args(field.annotation)[1:]
    low = next((f"≥ {m.ge}" for m in marks if isinstance(m, Ge)), None) or \
        next((f"> {m.gt}" for m in marks if isinstance(m, Gt)), None)
    high = next((f"≤ {m.le}" for m in marks if isinstance(m, Le)), None) or \
        next((f"< {m.lt}" for m in marks if isinstance(m, Lt)), None)
    return "".join(f", {bound}" for bound in (low, high) if bound)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, enum.Enum):
        value = value.value
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def config_markdown() -> str:
    """The configuration reference page: one table per section."""
    lines = ["# Configuration reference", "",
             "Every key of an experiment config, generated from the code (`rlfoundry.cli.reference`). Set any of them "
             "in a YAML file or on the command line as `section.key=value`; `algo` keys depend on `algo.name`.", ""]
    for section, keys in config_sections().items():
        lines += [f"## {section}", "", *keys_table(keys), ""]
    return "\n".join(lines)


def keys_table(keys: list[Key]) -> list[str]:
    """A markdown table of config keys (the lines): key, type with its allowed values or bounds, default, meaning."""
    lines = ["| key | type (allowed values) | default | description |", "|---|---|---|---|"]
    return lines + [f"| `{k.path}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.description)} |" for k in keys]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


# ---------------------------------------------------------------- commands


@dataclass(frozen=True)
class Command:
    """One command (`runs verify`), its help and its parameters (name, kind, default, help)."""

    path: str
    help: str
    params: list[tuple[str, str, str, str]]


def commands() -> list[Command]:
    """Every command of the `rlfoundry` app, sub-commands included, in the order `--help` lists them."""
    from rlfoundry.cli import app

    root = typer.main.get_command(app)
    found: list[Command] = []

    def walk(command, path: str) -> None:
        if hasattr(command, "commands"):  # a group (Typer's own click types are not click's classes)
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
            if path:
                found.append(Command(path, (command.help or "").strip(), []))
            return
        params = [_param(param) for param in command.params if param.name != "help"]
        found.append(Command(path, (command.help or "").strip(), params))

    walk(root, "")
    return sorted(found, key=lambda c: c.path)


def _param(param) -> tuple[str, str, str, str]:
    """(name, kind, default, help) of a parameter of Typer's click (its own classes, not click's)."""
    text = (param.help or "").strip()
    if param.param_type_name == "argument":
        return (param.metavar or param.name.upper()), "argument", "", text
    name = ", ".join(param.opts + param.secondary_opts)
    if param.envvar:
        text += f" Environment variable: `{param.envvar}`."
    flag = getattr(param, "is_flag", False)
    default = "" if param.default is None or flag and param.default is False else str(param.default)
    return name, "flag" if flag else type_name(param.type_descriptor.annotation), default, text


def cli_markdown() -> str:
    """The command-line reference page: each command, its help and a table of its arguments and options."""
    lines = ["# Command-line reference", "",
             "Every `rlfoundry` command and option, generated from the code (`rlfoundry.cli.reference`); "
             "`rlfoundry COMMAND --help` prints the same.", ""]
    for command in commands():
        lines += [f"## `rlfoundry {command.path}`", "", command.help, ""]
        if command.params:
            lines += ["| argument or option | kind | default | description |", "|---|---|---|---|"]
            lines += [f"| `{name}` | {kind} | {_cell(default)} | {_cell(text)} |"
                      for name, kind, default, text in command.params]
            lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- presets


@dataclass(frozen=True)
class Variant:
    """One preset variant: its env id and name, the algorithm and memory core it trains, its budget (None: the
    defaults') and the return its preset counts as solved (None: none)."""

    env_id: str
    name: str
    algo: str
    core: str
    budget: int | None
    solved: float | None

    @property
    def spec(self) -> str:
        return f"{self.env_id}:{self.name}"


def preset_variants(algorithm: str | None = None) -> list[Variant]:
    """Every variant of the shipped presets, by env id then in the preset's order; with `algorithm`, those that train
    it."""
    return [v for v in shipped_variants() if algorithm in (None, v.algo)]


@functools.cache
def shipped_variants() -> tuple[Variant, ...]:
    """The shipped presets' variants, read once per process (the pages ask for them per algorithm and per row;
    `shipped_variants.cache_clear()` reads the preset files again)."""
    from rlfoundry.experiment.load import load_presets, preset_layers

    found = []
    for env_id, preset in sorted(load_presets().items()):
        for name in preset.variants:
            layers = preset_layers(preset, name)
            found.append(Variant(env_id, name, (layers.get("algo") or {}).get("name", "ppo"),
                                 (layers.get("network") or {}).get("core", "identity"),
                                 (layers.get("train") or {}).get("total_timesteps"),
                                 (layers.get("solved") or {}).get("return")))
    return tuple(found)


def presets_markdown() -> str:
    """The presets page: each env id, its solved-at return with its source, and its variants' algorithm and core."""
    lines = ["# Presets", "",
             "The tuned settings shipped for each env id, generated from the preset files (`rlfoundry presets` "
             "lists the same). Train one with `rlfoundry train ENV_ID:VARIANT`.", "", *presets_rows()]
    return "\n".join(lines) + "\n"


def presets_rows(env_ids: Collection[str] | None = None) -> list[str]:
    """The presets table (header, rule, one row per env id), of every shipped preset or of those of `env_ids`."""
    from rlfoundry.experiment.load import load_presets

    lines = ["| env id | solved at | source | variants (algorithm, core) |", "|---|---:|---|---|"]
    presets = load_presets()
    for env_id, variants in itertools.groupby(preset_variants(), key=lambda v: v.env_id):
        if env_ids is not None and env_id not in env_ids:
            continue
        solved = presets[env_id].solved or {}
        named = ", ".join(f"`{v.name}` ({v.algo}{'' if v.core == 'identity' else ', ' + v.core})" for v in variants)
        lines.append(f"| `{env_id}` | {solved.get('return', '-')} | {_cell(str(solved.get('source', '-')))} | "
                     f"{named} |")
    return lines


# ---------------------------------------------------------------- the algorithm pages

# The benchmark pages whose tables have a `spec` column (ENV_ID:VARIANT), relative to the docs folder.
BENCHMARK_PAGES = ("BENCHMARKS.md", "BENCHMARKS-full-budget.md", "BENCHMARKS-dreamer-pendulum.md")
_PIPE = re.compile(r"(?<!\\)\|")
_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def algorithm_pages() -> dict[str, list[str]]:
    """rlfoundry's own algorithms by the page that documents them, `docs/algorithms/<module>.md`: one page per module
    of `rlfoundry.algos`, so TD3 and DDPG (`td3.py`) share one. The page's namesake comes first; a plugin's
    algorithms have no page here."""
    from rlfoundry.algos.registry import algorithms

    pages: dict[str, list[str]] = {}
    for name, cls in algorithms().items():
        package, _, module = cls.__module__.rpartition(".")
        if package == "rlfoundry.algos":
            pages.setdefault(module, []).append(name)
    return {page: sorted(names, key=lambda name: (name != page, name)) for page, names in sorted(pages.items())}


def algorithm_markdown(name: str) -> str:
    """The settings of one algorithm: every `algo.*` key of its config, as a table (the configuration reference's)."""
    from rlfoundry.algos.registry import algorithm

    config = algorithm(name).config
    return "\n".join([f"Every `algo` key of `algo.name: {name}` (`{config.__name__}`), generated from the code. Set "
                      "them in an experiment file or as `algo.KEY=VALUE` after the spec on the command line.", "",
                      *keys_table(list(_keys(config, "algo")))]) + "\n"


def algorithm_presets_markdown(name: str) -> str:
    """The preset variants that train one algorithm: spec, memory core, budget (env steps) and solved-at return."""
    variants = preset_variants(name)
    if not variants:
        return f"No preset trains `{name}`; `ENV_ID:{name}` takes the defaults chosen from the env's spaces.\n"
    lines = [f"The preset variants that train `{name}`, generated from the preset files; `rlfoundry presets ENV_ID` "
             f"shows one in full. Any other env id takes `ENV_ID:{name}` with the defaults chosen from its spaces.", "",
             "| spec | memory core | budget (env steps) | solved at |", "|---|---|---:|---:|"]
    for v in variants:
        budget = "(default)" if v.budget is None else f"{v.budget:,}"
        lines.append(f"| `{v.spec}` | {v.core} | {budget} | {'-' if v.solved is None else v.solved} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class BenchmarkTable:
    """The rows of one benchmark page's table that train one algorithm, under the table's header."""

    page: str  # relative to the docs folder
    header: list[str]  # the header line and the rule under it
    rows: list[str]


def spec_algorithm(spec: str) -> str | None:
    """The algorithm a spec (`ENV_ID:VARIANT`) trains: its preset variant's, else the variant when it names one."""
    from rlfoundry.algos.registry import algorithms

    variant = next((v for v in preset_variants() if v.spec == spec), None)
    if variant is not None:
        return variant.algo
    name = spec.rpartition(":")[2]
    return name if name in algorithms() else None


def benchmark_rows(name: str, docs_dir: Path, pages: tuple[str, ...] = BENCHMARK_PAGES) -> list[BenchmarkTable]:
    """The rows of the benchmark pages' tables whose spec trains algorithm `name`, with their tables' headers. A table
    counts when a column is headed `spec`; its cells name the spec in backticks."""
    found = []
    for page in pages:
        lines = (docs_dir / page).read_text().splitlines()
        for start, end in _tables(lines):
            cells = _cells(lines[start])
            if "spec" not in cells:
                continue
            column = cells.index("spec")
            rows = []
            for line in lines[start + 2:end]:
                row = _cells(line)
                spec = re.search(r"`([^`]+)`", row[column]) if column < len(row) else None
                if spec and spec_algorithm(spec.group(1)) == name:
                    rows.append(line)
            if rows:
                found.append(BenchmarkTable(page, lines[start:start + 2], rows))
    return found


def _cells(line: str) -> list[str]:
    """The cells of a markdown table line (`| a | b |`)."""
    return [cell.strip() for cell in _PIPE.split(line.strip().strip("|"))]


def _tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first line, end) of each markdown table: a `|` line, a rule line under it, and the `|` lines after."""
    spans, i = [], 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and _RULE.match(lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            spans.append((i, end))
            i = end
        else:
            i += 1
    return spans


def algorithm_benchmarks_markdown(name: str, docs_dir: Path, link_prefix: str = "../") -> str:
    """One algorithm's rows of the benchmark pages, each under its table's header and a link to its page (which says
    how the rows ran and on which machines); `link_prefix` leads from the page the section goes on to the docs
    folder."""
    tables = benchmark_rows(name, docs_dir)
    if not tables:
        return (f"No benchmark page has a row for `{name}` yet ({', '.join(f'`docs/{p}`' for p in BENCHMARK_PAGES)}"
                "; [How the benchmarks run](" + link_prefix + "guide/benchmarks.md) says how to add one).\n")
    lines = [f"The rows for `{name}` of the benchmark pages, copied from them as the site is built; each page says "
             "how its rows ran, what the columns mean and on which machines."]
    for table in tables:
        lines += ["", f"From [`docs/{table.page}`]({link_prefix}{table.page}):", "", *table.header, *table.rows]
    return "\n".join(lines) + "\n"


def algorithm_page_markdown(page: str, docs_dir: Path) -> str:
    """The generated part of `docs/algorithms/<page>.md`: the settings, presets and benchmark rows of each algorithm
    the page documents (`algorithm_pages`)."""
    names = algorithm_pages()[page]
    sections = (("Settings", algorithm_markdown), ("Presets", algorithm_presets_markdown),
                ("Benchmark rows", lambda name: algorithm_benchmarks_markdown(name, docs_dir)))
    lines = ["", "<!-- The sections below are generated by docs/gen_pages.py (rlfoundry.cli.reference). -->", ""]
    for title, render in sections:
        lines += [f"## {title}", ""]
        for name in names:
            if len(names) > 1:
                lines += [f"### `{name}`", ""]
            lines += [render(name), ""]
    return "\n".join(lines)
