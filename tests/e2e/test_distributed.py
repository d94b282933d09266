"""One run across processes (`--nproc`, `rlfoundry.run.distributed`): the ranks keep identical parameters after every
update, rank 0 alone writes one run directory, two ranks solve CartPole, and the collectives the ranks share (the
merged normalisation statistics, the check that parameters agree) compute what they claim in a real gloo group.
Exact resume after a kill is in test_resume.py (case cartpole-2ranks); bad --nproc values in test_cli_errors.py."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gymnasium.wrappers.utils import RunningMeanStd
from safetensors.torch import load_file

import rlfoundry
from rlfoundry.algos import ranks
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config
from rlfoundry.run import distributed


def test_two_ranks_learn_in_lockstep_and_write_one_run(tmp_path, quiet):
    # Debug mode compares the ranks' parameters after every update and fails the run at the first difference.
    runs = tmp_path / "runs"
    path, summary = rlfoundry.train("CartPole-v1:ppo", [*quiet, f"logging.runs_root={runs}", "train.seed=4"],
                                    debug=True, nproc=2)
    assert summary["status"] == "finished"
    assert [p.name for p in runs.iterdir() if p.is_dir()] == [path.name]  # one run directory, rank 0's
    config = (path / "config.yaml").read_text()
    assert "processes: 2" in config
    with (path / "metrics.csv").open() as f:
        steps = [int(row["global_step"]) for row in csv.DictReader(f)]
    per_iteration = 2 * 8 * 32  # both ranks' envs (the preset's 8 each) × num_steps
    assert steps == [per_iteration * (i + 1) for i in range(len(steps))]
    last = json.loads((path / "checkpoints" / "last.json").read_text())["step_dir"]
    state = json.loads((path / "checkpoints" / last / "state.json").read_text())
    assert len(state["ranks"]) == 1 and state["ranks"][0]["envs"] is not None  # rank 1's envs, for resume
    with np.load(path / "checkpoints" / last / "arrays.npz") as arrays:
        assert {"rank1.torch_rng", "rank1.collector.next_obs"} <= set(arrays.files)
        rank1 = arrays["rank1.collector.next_obs"]
    rank0 = load_file(path / "checkpoints" / last / "weights.safetensors")["collector.next_obs"].numpy()
    assert rank1.shape == rank0.shape and not np.array_equal(rank1, rank0)  # each rank steps envs of its own


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_two_ranks_solve_cartpole(tmp_path, quiet, seed):
    _, summary = rlfoundry.train("CartPole-v1:ppo", [*quiet, f"train.seed={seed}", "train.total_timesteps=100000"],
                                 tmp_path / "run", nproc=2)
    assert summary["solved_at_step"] is not None and summary["best_eval_return"] >= 475, summary


def test_resume_keeps_the_process_count(tmp_path, quiet):
    path, _ = rlfoundry.train("CartPole-v1:ppo", [*quiet, "train.total_timesteps=1024", "eval.every_steps=0"],
                              tmp_path / "run", nproc=2)
    summary = json.loads((path / "summary.json").read_text())
    (path / "summary.json").write_text(json.dumps({**summary, "status": "running"}))  # as a killed run leaves it
    before = (path / "run.log").read_text()
    with pytest.raises(ConfigError, match="trained with 2 process"):
        rlfoundry.train(resume=path, nproc=3)
    assert (path / "run.log").read_text() == before  # nothing touched


def test_refused_configs():
    for spec, overrides, words in [("CartPole-v1:dqn", [], "replay buffer"), ("Pendulum-v1:sac", [], "replay buffer"),
                                   ("CartPole-v1:ppo", ["network.core=lstm"], "memory cores")]:
        with pytest.raises(ConfigError, match=words):
            distributed.check(load_config(spec, overrides), 2)
    distributed.check(load_config("CartPole-v1:a2c", []), 2)


# ---------------------------------------------------------------- the collectives, in a real two-process gloo group


def _in_group(rank: int, port: int, results, test) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        results.put((rank, test(rank)))
    finally:
        dist.destroy_process_group()


def _run_pair(test) -> dict[int, object]:
    context = mp.get_context("spawn")
    results = context.Queue()
    port = distributed.free_port()
    processes = [context.Process(target=_in_group, args=(rank, port, results, test)) for rank in range(2)]
    for process in processes:
        process.start()
    out = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    return out


SAMPLES = {0: np.random.default_rng(0).normal(3.0, 2.0, size=(300, 3)),
           1: np.random.default_rng(1).normal(-1.0, 0.5, size=(100, 3))}


def _merge_statistics(rank: int):
    stats = RunningMeanStd(shape=(3,))
    lockstep = distributed.Lockstep(distributed.Group(rank, 2, 2), [stats])
    first, second = np.array_split(SAMPLES[rank], 2)
    stats.update(first)
    lockstep._merge_statistics()  # a first iteration
    stats.update(second)
    lockstep._merge_statistics()  # and a second, from the merged statistics
    return stats.mean, stats.var, stats.count


def test_normalisation_statistics_become_those_of_all_samples():
    merged = _run_pair(_merge_statistics)
    everything = np.concatenate([SAMPLES[0], SAMPLES[1]])
    for mean, var, count in merged.values():
        assert count == pytest.approx(len(everything) + 1e-4)
        np.testing.assert_allclose(mean, everything.mean(0), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(var, everything.var(0), rtol=1e-5)
    np.testing.assert_array_equal(merged[0][0], merged[1][0])  # bit-identical on both ranks


def _gradients_and_differences(rank: int):
    grad = torch.full((4,), float(rank + 1))
    averaged = grad.clone()
    weighted = ranks.average_gradient(averaged, torch.zeros(5), weight=3.0 if rank == 0 else 1.0)
    nothing = grad.clone()
    stepped = ranks.average_gradient(nothing, torch.zeros(5), weight=0.0)  # no rank has a sample
    same = ranks.differing(torch.arange(4.0))
    apart = ranks.differing(torch.arange(4.0) + rank * torch.tensor([0.0, 0.0, 0.5, 0.0]))
    count = ranks.agreed_min(7 - rank)
    return weighted, averaged.tolist(), stepped, same, apart, count


def test_gradients_are_sample_weighted_and_differences_are_found():
    for _rank, (weighted, averaged, stepped, same, apart, count) in _run_pair(_gradients_and_differences).items():
        assert weighted and averaged == [1.25] * 4  # (3 × 1 + 1 × 2) / 4
        assert not stepped  # nobody steps
        assert same == 0.0 and apart == 0.5
        assert count == 6
