"""The fenced blocks of the README and the documentation pages, read once for the tests that check and run them
(tests/unit/test_docs_examples.py parses every command; tests/e2e/test_docs_run.py runs them page by page).

A block a test cannot run says why on the line before its fence, `<!-- not run: the reason -->` (a GPU, a cluster,
an account, hours); a block that shows what the command before it printed says `<!-- output -->` there (`<!-- output, exit 2 -->`
where the command fails on purpose). The site
shows neither comment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!--\s*(?:not run:\s*(?P<reason>.*?)|(?P<output>output(?:, exit (?P<exit>\d+))?))\s*-->\s*\n)?"
                   r"```(?P<lang>\w*)\n(?P<text>.*?)```", re.S)
NAMED = re.compile(r"#\s*([\w.-]+\.ya?ml)\s*$")  # a YAML block that is a file: its first line is `# name.yaml`


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    not_run: str | None  # the reason a test does not run it, or None
    output: bool  # it shows what the command before it printed (`<!-- output -->`)
    exit: int = 0  # the exit status of that command (`<!-- output, exit 2 -->`)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def filename(self) -> str | None:
        """`name.yaml` for a YAML block that is a file the page's commands use."""
        first = self.text.splitlines()[0] if self.text.strip() else ""
        match = NAMED.match(first.strip())
        return match.group(1) if match else None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    text = page.read_text()
    return [Block(page, text.count("\n", 0, m.start("lang")) + 1, m.group("lang"), m.group("text"), m.group("reason"),
                  m.group("output") is not None, int(m.group("exit") or 0))
            for m in BLOCK.finditer(text)]


def blocks(lang: str) -> list[Block]:
    return [block for page in pages() for block in page_blocks(page) if block.lang == lang]


def shell_lines(block: Block) -> list[list[str]]:
    """The command lines of a shell block as words: continuations joined, comments dropped, `$(which rlfoundry)`
    read as `rlfoundry`."""
    lines = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line.replace("$(which rlfoundry)", "rlfoundry"), comments=True)
        if words:
            lines.append(words)
    return lines


def rlfoundry_args(words: list[str]) -> list[str] | None:
    """The arguments after `rlfoundry` (or `.venv/bin/rlfoundry`) in a command line, or None if it runs no
    rlfoundry command."""
    for i, word in enumerate(words):
        if word in ("rlfoundry", ".venv/bin/rlfoundry"):
            return words[i + 1:]
    return None


def output_after(blocks: list[Block], number: int) -> Block | None:
    """The output block right after `blocks[number]`, showing what its last command printed, or None."""
    after = blocks[number + 1] if number + 1 < len(blocks) else None
    return after if after is not None and after.output else None


def commands() -> list[tuple[str, list[str], int]]:
    """Every rlfoundry command of the shell blocks, run or not: (page:line, arguments after `rlfoundry`, the exit
    status the page shows for it: 0 unless an output block after it says otherwise)."""
    found = []
    for page in pages():
        shown = page_blocks(page)
        for number, block in enumerate(shown):
            if block.lang != "bash":
                continue
            after = output_after(shown, number)
            lines = shell_lines(block)
            for line, words in enumerate(lines):
                args = rlfoundry_args(words)
                if args is not None:
                    found.append((block.where, args, after.exit if after and line == len(lines) - 1 else 0))
    return found


def parse(args: list[str]):
    """(the command's name, e.g. `runs list`, its Click command, and its parameters parsed from `args`)."""
    import typer

    from rlfoundry.cli import app

    group, path = typer.main.get_command(app), []
    while args and hasattr(group, "commands") and args[0] in group.commands:
        group = group.commands[args[0]]
        path.append(args[0])
        args = args[1:]
    name = " ".join(path)
    params = {} if hasattr(group, "commands") else group.make_context(name, list(args)).params
    return name, group, params
