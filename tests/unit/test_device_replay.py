"""Replays mirrored on the device (`train.device_replay`, `buffers.transfer.DeviceMirror`): a mirrored replay fed
the same stream gives the same samples as a host one, bit for bit, through ring wrap-around, frame stacks (zero and
first padding), n-step windows, prioritisation, sequences, a restart and a checkpoint round trip; and a run trains to
the same numbers with and without it. Here the "device" is the CPU (the torch path); the CUDA scripts run the same
tests on a GPU."""

import csv
import dataclasses

import numpy as np
import pytest
import torch

import rlfoundry
from rlfoundry.algos import Runtime
from rlfoundry.buffers.recurrent import RecurrentReplay
from rlfoundry.buffers.replay import PrioritizedReplayBuffer, ReplayBuffer
from rlfoundry.buffers.sequences import SequenceReplay
from rlfoundry.config.errors import ConfigError
from tests.conftest import is_timing
from tests.unit.test_replay import StackingEnvs, run_stacking

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def equal(mirrored, host) -> None:
    """A mirrored sample (tensors where mirrored) equals the host one, field by field, dtype included."""
    for name, got, want in zip(host._fields, mirrored, host):
        if isinstance(got, torch.Tensor):
            assert got.device.type == DEVICE.type, name
            got = got.cpu().numpy()
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def pair(make):
    host, mirrored = make(), make()
    mirrored.keep_on(DEVICE)
    return host, mirrored


def same_samples(host, mirrored, draws: int = 12, **kwargs) -> None:
    first, second = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(draws):
        equal(mirrored.sample(rng=second, **kwargs), host.sample(rng=first, **kwargs))


@pytest.mark.parametrize("padding", ["zero", "first"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_a_mirrored_replay_of_frame_stacks_samples_what_the_host_one_does(padding, prioritized, tmp_path):
    B, S, C = 3, 4, 2
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    host, mirrored = pair(lambda: kind(B * 30, B, (S * C, 3, 2), np.uint8, (), np.int64, n_step=3, gamma=0.9,
                                       frame_stack=S, frame_padding=padding))
    for replay in (host, mirrored):  # 120 steps through a ring of 30 rows: it wraps four times
        run_stacking(replay, StackingEnvs(B, S, C, padding, seed=1), 120, seed=5)
    same_samples(host, mirrored, batch_size=64)
    if prioritized:  # the same priorities from here on
        indices = host.sample(16, np.random.default_rng(1)).indices
        for replay in (host, mirrored):
            replay.update_priorities(indices, np.linspace(0.1, 5.0, 16))
        same_samples(host, mirrored, batch_size=64, beta=0.4)
    # a checkpoint loaded into a fresh mirrored replay, and a restart of its envs
    restored = kind(B * 30, B, (S * C, 3, 2), np.uint8, (), np.int64, n_step=3, gamma=0.9, frame_stack=S,
                    frame_padding=padding)
    restored.keep_on(DEVICE)
    restored.load_state_dict({k: np.array(v) for k, v in host.state_dict().items()})
    same_samples(host, restored, batch_size=64)
    fresh = StackingEnvs(B, S, C, padding, seed=9).obs()
    for replay in (host, restored):
        replay.restart(fresh)
        run_stacking(replay, StackingEnvs(B, S, C, padding, seed=2), 20, seed=6)
    same_samples(host, restored, batch_size=64)
    assert restored.mirror is not None
    np.testing.assert_array_equal(restored.mirror.tensors["frames"].cpu().numpy(), host.frames)


def test_a_mirrored_replay_of_vectors_samples_what_the_host_one_does():
    rng = np.random.default_rng(0)
    B, steps = 4, 90
    host, mirrored = pair(lambda: ReplayBuffer(B * 25, B, (3,), np.float32, (2,), np.float32, n_step=2, gamma=0.95))
    late = ReplayBuffer(B * 25, B, (3,), np.float32, (2,), np.float32, n_step=2, gamma=0.95)  # mirrored half-way
    obs = rng.normal(size=(B, 3)).astype(np.float32)
    for t in range(steps):
        actions, rewards = rng.normal(size=(B, 2)).astype(np.float32), rng.normal(size=B).astype(np.float32)
        ended, cut = rng.random(B) < 0.1, rng.random(B) < 0.05
        next_obs = rng.normal(size=(B, 3)).astype(np.float32)
        for replay in (host, mirrored, late):
            replay.add(obs, actions, rewards, ended, ~ended & cut, next_obs)
        obs = next_obs
        if t == steps - 5:  # most rows written before: `keep_on` copies them
            late.keep_on(DEVICE)
    same_samples(host, mirrored, batch_size=32)
    same_samples(host, late, batch_size=32)


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_mirrored_recurrent_replay_samples_the_same_windows(prioritized):
    B, S, C = 2, 2, 1
    host, mirrored = pair(lambda: RecurrentReplay(B * 40, B, (S * C, 3, 2), np.uint8, (), np.int64, state_size=3,
                                                  length=4, burn_in=2, stride=2, n_step=2, gamma=0.9, frame_stack=S,
                                                  prioritized=prioritized))
    starts = np.random.default_rng(1).random((70, B)) < 0.05
    for replay in (host, mirrored):
        envs = StackingEnvs(B, S, C, "zero", seed=4)
        for t in range(70):
            if replay.wants_state():
                replay.note_state(np.full((B, 3), t, np.float32))
            replay.add(envs.obs(), np.full(B, t), np.ones(B, np.float32), np.zeros(B, bool), np.zeros(B, bool),
                       envs.step(starts[t]))
    same_samples(host, mirrored, batch_size=6)


def test_a_mirrored_sequence_replay_samples_the_same_windows():
    rng = np.random.default_rng(2)
    B = 3
    host, mirrored = pair(lambda: SequenceReplay(B * 30, B, (2, 4, 4), np.uint8, (), np.int64, latent_size=2,
                                                 online_length=5))
    first = rng.integers(0, 255, (B, 2, 4, 4), np.uint8)
    for replay in (host, mirrored):
        replay.start(first)
    for _ in range(80):
        actions, frames = rng.integers(0, 3, B), rng.integers(0, 255, (B, 2, 4, 4), np.uint8)
        ended = rng.random(B) < 0.1
        for replay in (host, mirrored):
            replay.add(actions, None, frames, np.ones(B, np.float32), ended, np.zeros(B, bool))
    first_rng, second_rng = np.random.default_rng(4), np.random.default_rng(4)
    for length in (5, 5, 7):  # online windows first, then uniform ones
        equal(mirrored.sample(8, length, second_rng), host.sample(8, length, first_rng))


def test_auto_keeps_a_replay_on_the_host_off_cuda_and_true_refuses_one_that_does_not_fit():
    class Replay:
        mirrored_nbytes = 10
        kept = None

        def keep_on(self, device):
            self.kept = device

    replay = Replay()
    Runtime(torch.device("cpu"), device_replay="auto").keep_replay(replay)
    Runtime(torch.device("cpu"), device_replay=False).keep_replay(replay)
    assert replay.kept is None
    Runtime(torch.device("cpu"), device_replay=True).keep_replay(replay)
    assert replay.kept == torch.device("cpu")

    class Huge(Replay):
        mirrored_nbytes = 2**40

        def keep_on(self, device):
            raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(ConfigError, match=r"train.device_replay = true: the replay's copy \(1024.0 GiB\)"):
        dataclasses.replace(Runtime(torch.device("cpu")), device_replay=True).keep_replay(Huge())


@pytest.mark.parametrize("spec, options", [
    ("CartPole-v1:dqn", ["algo.prioritized=true", "algo.n_step=3", "algo.learning_starts=200"]),
    ("Pendulum-v1:sac", ["algo.learning_starts=200"]),
    ("MountainCarContinuous-v0:dreamer", [  # a tiny model
        "algo.model.rssm.deter=32", "algo.model.rssm.hidden=16", "algo.model.rssm.blocks=4", "algo.model.units=32",
        "algo.units=32", "algo.batch_size=4", "algo.batch_length=8", "algo.train_ratio=16", "algo.collect_steps=8",
        "env.max_episode_steps=100"]),
])
def test_a_run_with_its_replay_on_the_device_trains_to_the_same_numbers(tmp_path, quiet, spec, options):
    rows = {}
    for setting in ("false", "true"):
        run_dir, summary = rlfoundry.train(spec, [*quiet, *options, f"train.device_replay={setting}",
                                                  "train.total_timesteps=400", "train.torch_threads=1",
                                                  "eval.every_steps=0", "checkpoint.every_steps=0",
                                                  "logging.every_steps=0"], tmp_path / setting)
        assert summary["status"] == "finished"
        with (run_dir / "metrics.csv").open() as handle:
            rows[setting] = [{k: v for k, v in row.items() if not is_timing(k)} for row in csv.DictReader(handle)]
    learned = [row for row in rows["true"] if any(k.startswith("loss/") and v for k, v in row.items())]
    assert len(learned) >= 2 and rows["true"] == rows["false"]
