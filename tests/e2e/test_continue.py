"""Continuing a finished run to a larger budget (`train --resume RUN --total-timesteps N`, Stable-Baselines3's
`learn(reset_num_timesteps=False)`): it trains on from its last checkpoint, its metrics rows follow the old ones,
its config.yaml takes the new budget and its provenance records the extension; a budget it has already trained, or
a finished run resumed without one, is refused with nothing touched."""

import csv
import json

import pytest
import yaml

import rlfoundry
from rlfoundry.config.errors import ConfigError

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=512",
        "eval.every_steps=256", "eval.episodes=1"]


def steps(run_dir) -> list[int]:
    with (run_dir / "metrics.csv").open() as handle:
        return [int(row["global_step"]) for row in csv.DictReader(handle)]


def test_a_finished_run_continues_to_a_larger_budget(tmp_path):
    run_dir, first = rlfoundry.train("CartPole-v1:ppo", [*TINY, f"logging.runs_root={tmp_path}"], tmp_path / "run")
    assert first["status"] == "finished" and first["total_steps"] == 512
    before = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "metrics.csv", "summary.json")}
    with pytest.raises(ConfigError, match="nothing to continue .add --total-timesteps N"):
        rlfoundry.train(resume=run_dir)
    with pytest.raises(ConfigError, match="has trained 512 steps already"):
        rlfoundry.train(resume=run_dir, total_timesteps=512)
    assert {name: (run_dir / name).read_bytes() for name in before} == before  # refused: nothing touched

    path, summary = rlfoundry.train(resume=run_dir, total_timesteps=1024)
    assert path == run_dir and summary["status"] == "finished" and summary["total_steps"] == 1024
    recorded = steps(run_dir)
    assert recorded[:len(steps_of(before))] == steps_of(before) and recorded[-1] == 1024
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["train"]["total_timesteps"] == 1024
    (extension,) = config["provenance"]["continued"]
    assert (extension["at_step"], extension["from_total"], extension["to_total"]) == (512, 512, 1024)
    assert json.loads((run_dir / "summary.json").read_text())["total_steps"] == 1024


def steps_of(files: dict[str, bytes]) -> list[int]:
    rows = csv.DictReader(files["metrics.csv"].decode().splitlines())
    return [int(row["global_step"]) for row in rows]
