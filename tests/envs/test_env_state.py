"""Env state for exact resume: captured to JSON + arrays, restored into fresh envs, the futures agree."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build
from rlfoundry.envs.state import capture, restore

CAPTURABLE = [
    ("CartPole-v1", "vector_entry_point", {}),
    ("Pendulum-v1", "sync", {"normalize_obs": True, "normalize_reward": True}),
    ("Acrobot-v1", "sync", {}),
    ("Hopper-v5", "sync", {"normalize_obs": True, "normalize_reward": True, "max_episode_steps": 100}),
    # sticky actions and no-ops (the env's RNG), the emulator (ALE's cloneState), the frame buffers
    ("ALE/Breakout-v5", "auto", {"atari": {"backend": "single"}}),
    # POPGym: a card game's Deck (order, cards left, hands: a dict of lists) and its mode (an IntEnum); CartPole's
    # noise drawn from the env's RNG
    ("popgym-AutoencodeEasy-v0", "sync", {}),
    ("popgym-NoisyPositionOnlyCartPoleEasy-v0", "sync", {}),
    # Gymnasium-Robotics' mazes: the goal in the maze env, the MuJoCo state in the point or ant env it holds
    ("PointMaze_UMaze-v3", "sync", {}),
    ("AntMaze_UMaze-v5", "sync", {"max_episode_steps": 100}),
]


def roundtrip(state, arrays):
    """Through the checkpoint's formats: JSON text and plain arrays."""
    return json.loads(json.dumps(state)), {k: np.array(v) for k, v in arrays.items()}


@pytest.mark.parametrize("env_id, vectorization, extra", CAPTURABLE, ids=[c[0] for c in CAPTURABLE])
def test_restored_envs_continue_exactly(tmp_path, monkeypatch, env_id, vectorization, extra):
    monkeypatch.chdir(tmp_path)
    cfg = EnvConfig(id=env_id, num_envs=3, vectorization=vectorization, **extra)
    (a, _), (b, _) = build(cfg, gamma=0.99), build(cfg, gamma=0.99)
    try:
        a.reset(seed=5)
        a.action_space.seed(1)
        for _ in range(137):  # long enough for episodes to end and autoreset mid-way
            a.step(a.action_space.sample())
        state, arrays, why = capture(a)
        assert why is None
        restore(b, *roundtrip(state, arrays))  # b was never reset: a fresh process resuming
        for _ in range(300):
            action = a.action_space.sample()
            (oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib) = a.step(action), b.step(action)
            for x, y in ((oa, ob), (ra, rb), (ta, tb), (ua, ub)):
                assert np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype
            if "episode" in ia:
                assert np.array_equal(ia["episode"]["r"], ib["episode"]["r"])
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("env_id, vectorization, reason", [
    ("LunarLander-v3", "sync", "Box2D"),
    ("Pendulum-v1", "async", "worker processes"),
    ("ALE/Pong-v5", "auto", "AtariVectorEnv keeps its emulators in C++ without a state API; set env.atari.backend"),
    ("VizdoomBasic-v1", "sync", "vizdoom keeps its game in C++"),
    ("MiniGrid-DoorKey-5x5-v0", "sync", "MiniGrid keeps its grid"),
    ("ALE/Pong-v5", "auto", "env.atari.obs_type = objects: OCAtari's object list"),
])
def test_uncapturable_families_say_why(tmp_path, monkeypatch, env_id, vectorization, reason):
    monkeypatch.chdir(tmp_path)  # vizdoom writes _vizdoom.ini here
    options = {"atari": {"obs_type": "objects"}} if "OCAtari" in reason else {}
    envs, _ = build(EnvConfig(id=env_id, num_envs=2, vectorization=vectorization, **options))
    try:
        envs.reset(seed=0)
        state, arrays, why = capture(envs)
        assert state is None and arrays == {} and reason in why
    finally:
        envs.close()
