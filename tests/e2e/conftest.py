from pathlib import Path

import pytest


@pytest.fixture
def slow_steps(monkeypatch) -> list[str]:
    """Overrides for a slow simulator's stand-in (slow_steps.py): each env step sleeps 1 ms, so that a run outlasts
    the time a pruner's or scheduler's decision takes to reach it on any machine without computing more; episodes end
    at 200 steps, so that the evaluations of good settings stay short. The runs find the wrapper through PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    return ["env.max_episode_steps=200", "env.vectorization=sync",
            "env.wrappers=[{id: 'tests.e2e.slow_steps:Sleep', kwargs: {seconds: 0.001}}]"]
