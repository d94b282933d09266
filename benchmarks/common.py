"""Pieces the side-by-side benchmarks share."""

from __future__ import annotations

import sys


def sb3_missing(names: list[str]) -> bool:
    """True (after saying how to install it) when SB3 is wanted but not installed."""
    if "sb3" not in names:
        return False
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("Stable-Baselines3 is not installed; install the benchmark extra:  pip install -e .[bench]",
              file=sys.stderr)
        return True
    return False


def frameworks(only: str) -> list[str]:
    return ["rlfoundry", "sb3"] if only == "both" else [only]


def in_turn(names: list[str], seed: int) -> list[str]:
    """The frameworks in the order to run them for `seed`: alternating, so a slow drift of the machine
    does not favour one."""
    return names if seed % 2 else names[::-1]
