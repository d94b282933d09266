"""`rlfoundry train SPEC --profile`: a trace that loads as JSON and a profile.md with the env/act/learn split and
the top ops, recorded after the warm-up (for DQN: after learning starts)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from rlfoundry.cli import app


@pytest.mark.parametrize("variant, extra", [
    ("ppo", ["--total-timesteps", "3072", "env.num_envs=4", "algo.num_steps=128", "algo.update_epochs=2"]),
    ("dqn", ["--total-timesteps", "2000", "algo.learning_starts=1000", "algo.train_freq=64", "algo.gradient_steps=16"]),
])
def test_profile_writes_a_trace_and_the_split(tmp_path, quiet, variant, extra):
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", f"CartPole-v1:{variant}", "--profile", "--run-dir", str(run_dir),
                                      *quiet, *extra, "eval.every_steps=0", "eval.episodes=2"])
    assert result.exit_code == 0, result.output
    trace = json.loads((run_dir / "profile.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "iteration" in names and any(str(name).startswith("aten::") for name in names)

    text = (run_dir / "profile.md").read_text()
    first = int(re.search(r"steps ([\d,]+) to", text).group(1).replace(",", ""))
    if variant == "dqn":
        assert first >= 1000  # recorded once learning was under way, not during the replay warm-up
    shares = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| (env|act|learn|trainer) \|.*\| (\d+)% \|$", text, re.M)}
    assert set(shares) == {"env", "act", "learn", "trainer"} and shares["learn"] > 0
    assert 95 <= sum(shares.values()) <= 105
    ops = re.findall(r"^\| `([^`]+)` \| (\d+) \|", text, re.M)
    assert len(ops) >= 5 and any(name.startswith("aten::") for name, _ in ops) and "iteration" not in dict(ops)
