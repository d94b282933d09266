"""`rlfoundry algos` in any terminal width: an algorithm's name and the class it comes from are never cut."""

from __future__ import annotations

import pytest

from rlfoundry.algos import algorithms
from rlfoundry.cli.algos import algos


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_names_and_classes_are_whole_in_any_width(columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", columns)
    algos()
    rows = capsys.readouterr().out.splitlines()
    for name, cls in algorithms().items():
        assert any(row.startswith(f"{name} ") and row.rstrip().endswith(f"{cls.__module__}.{cls.__qualname__}")
                   for row in rows), (name, rows)
