"""`rlfoundry presets [FILTER | ENV_ID | ENV_ID:VARIANT]`: the shipped presets, one line each, or one in full;
`--smoke [FILTER]` trains every matching variant briefly and prints a pass/fail line each (`rlfoundry.run.smoke`)."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from rlfoundry.cli.common import fail, out
from rlfoundry.config.errors import ConfigError


def presets(
    query: Annotated[str | None, typer.Argument(
        metavar="[FILTER | ENV_ID | ENV_ID:VARIANT]",
        help="Text to filter env ids and variants by; an exact env id shows that preset's variants, thresholds and "
             "sources; ENV_ID:VARIANT prints the settings the variant sets.")] = None,
    smoke: Annotated[bool, typer.Option(
        "--smoke", help="Train every matching variant for one shrunk iteration and an evaluation episode; one "
                        "pass/fail line each with the reason (exit 1 if any fails).")] = False,
) -> None:
    """List presets, one line each (env id, solved-at threshold, variants); or show one preset in full."""
    from rlfoundry.experiment.load import load_presets, preset_layers

    if smoke:
        _smoke(query or "")
        return
    try:
        found = load_presets()
        by_id = {env_id.lower(): preset for env_id, preset in found.items()}
        env_id, sep, variant = (query or "").rpartition(":")
        if sep:
            preset = by_id.get(env_id.lower())
            if preset is None:
                raise ConfigError(f"no preset for '{env_id}'; presets: {', '.join(sorted(found))}")
            settings = preset_layers(preset, variant)
            out().print(f"# {preset.env_id}:{variant} ({preset.path}); unset keys take the defaults\n"
                        + yaml.safe_dump(settings, sort_keys=False), highlight=False, markup=False)
        elif query is not None and query.lower() in by_id:
            _show(by_id[query.lower()])
        else:
            _list(found, query or "")
    except ConfigError as exc:
        fail(str(exc))


def _smoke(needle: str) -> None:
    from rlfoundry.run.smoke import smoke_presets

    console = out()

    def report(result) -> None:
        mark = "[green]pass[/]" if result.ok else "[bold red]FAIL[/]"
        console.print(f"{mark} {escape(result.spec)} ({result.seconds:.1f} s): {escape(result.detail)}",
                      highlight=False)

    results = smoke_presets(needle, report)
    if not results:
        fail(f"no preset variant matches '{needle}'; `rlfoundry presets` lists them all")
    failed = [result.spec for result in results if not result.ok]
    console.print(f"{len(results) - len(failed)} of {len(results)} passed", style="dim", highlight=False, markup=False)
    if failed:
        raise typer.Exit(1)


def _list(found, needle: str) -> None:
    console = out()
    rows = [(env_id, preset) for env_id, preset in sorted(found.items())
            if not needle or needle.lower() in env_id.lower() or any(needle.lower() in v.lower() for v in preset.variants)]
    if not rows:
        console.print(f"no preset matches '{needle}'; `rlfoundry presets` lists them all", highlight=False, markup=False)
        return
    id_width = max(len("env id"), *(len(env_id) for env_id, _ in rows))
    console.print(f"{'env id':<{id_width}}  {'solved at':>9}  variants", style="bold", highlight=False, markup=False)
    for env_id, preset in rows:
        solved = (preset.solved or {}).get("return")
        head = f"{env_id:<{id_width}}  {'-' if solved is None else f'{solved:g}':>9}  "
        console.print(head + _fit(list(preset.variants), console.width - len(head)), highlight=False, markup=False)
    console.print(f"{len(rows)} preset{'s' if len(rows) > 1 else ''}; `rlfoundry presets ENV_ID` shows one in full",
                  style="dim", highlight=False, markup=False)


def _fit(names: list[str], width: int) -> str:
    """`a, b, c` in at most `width` characters, else as many as fit and `… +N` for the rest."""
    text = ", ".join(names)
    if len(text) <= width:
        return text
    for shown in range(len(names) - 1, 0, -1):
        text = ", ".join(names[:shown]) + f", … +{len(names) - shown}"
        if len(text) <= width:
            return text
    return f"{len(names)} variants"


def _show(preset) -> None:
    """The preset's file and threshold with its source, and a line per variant; a variant with its own threshold
    gets a footnote with that threshold's source."""
    from rlfoundry.experiment.load import preset_layers

    console = out()
    solved = preset.solved or {}
    console.print(f"[bold]{escape(preset.env_id)}[/]  {escape(str(preset.path))}", highlight=False)
    if solved:
        console.print(f"solved at {solved.get('return')}: {escape(str(solved.get('source', '-')))}", highlight=False,
                      soft_wrap=False)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("variant", "algo", "core", "solved at"):
        table.add_column(column, no_wrap=True)
    notes: dict[str, int] = {}  # a variant's own threshold source -> its footnote number
    for variant in preset.variants:
        layers = preset_layers(preset, variant)
        own = layers.get("solved") or {}
        threshold = str(own.get("return", "-"))
        if own and own != solved:
            threshold += f" [{notes.setdefault(str(own.get('source', '-')), len(notes) + 1)}]"
        table.add_row(escape(variant), escape(str((layers.get("algo") or {}).get("name", "ppo"))),
                      escape(str((layers.get("network") or {}).get("core", "identity"))), escape(threshold))
    console.print(table)
    for source, number in notes.items():
        console.print(f"\\[{number}] {escape(source)}", highlight=False, soft_wrap=False)
    console.print(f"`rlfoundry presets {escape(preset.env_id)}:VARIANT` prints the settings a variant sets",
                  style="dim", highlight=False, soft_wrap=False)
