"""Every example of the README and the documentation pages runs: page by page, in order, in an empty folder, the
shell blocks' `rlfoundry` commands through the command-line app and the Python blocks in one namespace, so a page's
later commands find the runs its earlier ones made. Training is cut to the smoke check's size (each algorithm's
`smoke` overrides, one evaluation episode), trials and benchmarks to BUDGET env steps and MAX_SEEDS seeds; `RUN_DIR`
and `RUN` stand for the page's newest run. YAML blocks that name a file (`# my_experiment.yaml`) are written into
the folder first. A block that cannot run here says why (`<!-- not run: ... -->`, tests/docpages.py); any other
line of a shell block that is not an rlfoundry command fails the test, so a page cannot show a command nobody ran.
A block marked `<!-- output -->` shows what the command before it printed: that command runs at the page's own
budget, and each line shown must be one it printed, numbers aside (`<!-- output, exit 2 -->`: it must fail so).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlfoundry.cli import app
from tests.docpages import ROOT, Block, output_after, page_blocks, pages, parse, rlfoundry_args, shell_lines

BUDGET = 512  # env steps of a training run no algorithm shrinks further (trials, bench)
MAX_SEEDS = 2
BUDGET_OPTIONS = {"--total-timesteps": str(BUDGET), "--steps": str(BUDGET), "--episodes": "2"}
PLACEHOLDERS = ("RUN_DIR", "RUN")
QUICK = ["eval.every_steps=0", "eval.episodes=1", "logging.progress=false"]


def runnable(page: Path) -> list[Block]:
    return [block for block in page_blocks(page) if block.not_run is None and
            (block.lang in ("bash", "python") or block.lang == "yaml" and block.filename or block.output)]


PAGES = [page for page in pages() if any(block.lang in ("bash", "python") for block in runnable(page))]


def newest_run() -> str:
    """The run directory the page made last (with a checkpoint), as `RUN_DIR` stands for it."""
    from rlfoundry.hub import local_path

    return str(local_path("@last"))


def shrunk(spec: str, overrides: list[str]) -> list[str]:
    """The overrides that cut a run of SPEC to the smoke check's size (`rlfoundry presets --smoke`: each algorithm's
    own, e.g. a SimPLe world model a few units wide), after the page's own."""
    from rlfoundry.experiment.load import load_config
    from rlfoundry.run.smoke import smoke_overrides

    cfg = load_config(spec, overrides) if isinstance(spec, str) else spec  # the Python API takes a config too
    return smoke_overrides(cfg)[0] + QUICK


def short(args: list[str], shrink: bool = True) -> list[str]:
    """`args` with the training budget cut: a `train` run to its smoke size, the budget options set to small
    values, `--seeds N` to at most MAX_SEEDS, placeholders replaced by the newest run."""
    out: list[str] = []
    words = iter(args)
    for word in words:
        name, eq, value = word.partition("=")
        if shrink and (name in BUDGET_OPTIONS or name == "--seeds"):
            value = value if eq else next(words)
            if name == "--seeds":
                seeds = value.split(",")
                value = ",".join(seeds[:MAX_SEEDS]) if len(seeds) > 1 else str(min(int(value), MAX_SEEDS))
            else:
                value = BUDGET_OPTIONS[name]
            out += [name, value]
        elif name.split("/")[0] in PLACEHOLDERS:
            out.append(newest_run() + word[len(name.split("/")[0]):])
        else:
            out.append(word)
    if not shrink:
        return out
    command, _, params = parse(out)
    if command == "train" and params.get("spec"):
        out += shrunk(params["spec"], list(params.get("overrides") or []))
    elif command == "trials":
        out += [*QUICK, "--total-timesteps", str(BUDGET)]
    return out


def run_shell(block: Block, monkeypatch: pytest.MonkeyPatch, shown: Block | None) -> str:
    """Runs the block's commands in order; returns what the last one printed (at the page's own budget if the page
    shows its output in the block `shown`, and with the exit status that block gives)."""
    printed = ""
    lines = shell_lines(block)
    for number, words in enumerate(lines):
        line = shlex.join(words)
        args = rlfoundry_args(words)
        assert args is not None, (f"{block.where}: `{line}` is not an rlfoundry command: a test runs every shell "
                                  "block, so mark the block `<!-- not run: the reason -->` or show it elsewhere")
        for assignment in words[:len(words) - len(args) - 1]:  # VAR=value rlfoundry ...
            key, _, value = assignment.partition("=")
            monkeypatch.setenv(key, value)
        last = shown is not None and number == len(lines) - 1
        args = short(args, shrink=not last)
        result = CliRunner().invoke(app, args)
        assert result.exit_code == (shown.exit if last else 0), f"{block.where}: `rlfoundry {shlex.join(args)}` exited " \
            f"{result.exit_code}:\n{result.output[-3000:]}\n{result.exception!r}"
        printed = result.output
    return printed


NUMBER = r"-?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"


def check_shown(block: Block, printed: str) -> None:
    """Each line an output block shows is a line the command printed, numbers aside (the page's come from a longer
    run, on another machine)."""
    lines = [line.strip() for line in printed.splitlines()]
    for shown in filter(None, (line.strip() for line in block.text.splitlines())):
        parts = re.split(NUMBER, shown)
        pattern = re.compile(NUMBER.join(re.escape(part) for part in parts))
        assert any(pattern.fullmatch(line) for line in lines), \
            f"{block.where}: the page shows `{shown}`, but the command printed:\n{printed[-3000:]}"


def run_python(block: Block, namespace: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlfoundry

    train = rlfoundry.train

    def budgeted(spec, overrides=(), *args, **kwargs):
        overrides = list(overrides or [])
        return train(spec, [*overrides, *shrunk(spec, overrides)], *args, **kwargs)

    monkeypatch.setattr(rlfoundry, "train", budgeted)
    exec(compile(block.text, block.where, "exec"), namespace)  # noqa: S102 - the page's own example


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_example_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    blocks = runnable(page)
    for block in blocks:
        if block.lang == "yaml":
            (tmp_path / block.filename).write_text(block.text)
    namespace: dict = {"__name__": "__main__"}
    printed = ""
    for number, block in enumerate(blocks):
        if block.output:
            check_shown(block, printed)
        elif block.lang == "bash":
            printed = run_shell(block, monkeypatch, shown=output_after(blocks, number))
        elif block.lang == "python":
            run_python(block, namespace, monkeypatch)


def test_every_block_not_run_says_why():
    for page in pages():
        for block in page_blocks(page):
            assert block.not_run is None or len(block.not_run) > 8, f"{block.where}: say why it is not run"
