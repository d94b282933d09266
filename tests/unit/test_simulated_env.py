"""SimPLe's simulated vector env: Gymnasium's vector-env expectations, restarts from real frames, the episode end
(the port's done that never fired, docs/world-models/simple-mbarc.md §6 item 2), exact RNG state, and a PPO iteration on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfoundry.algos import Runtime
from rlfoundry.buffers.frames import FrameReplay
from rlfoundry.buffers.rollout import RolloutCollector, gae
from rlfoundry.world_models.next_frame import NextFrameConfig, NextFramePredictor
from rlfoundry.world_models.simulated_env import SimulatedEnv

FRAME, STACKING, NUM_ACTIONS, ENVS, LENGTH = (3, 20, 16), 4, 3, 5, 6


pytestmark = pytest.mark.usefixtures("one_thread")


def _replay(steps: int = 40, seed: int = 0) -> FrameReplay:
    """Random real transitions: episodes of 10 steps."""
    rng = np.random.default_rng(seed)
    replay = FrameReplay(steps, FRAME, NUM_ACTIONS, STACKING, max_episodes=steps)
    obs = rng.integers(0, 256, (STACKING * FRAME[0], *FRAME[1:]), dtype=np.uint8)
    for t in range(steps):
        frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
        next_obs = np.concatenate([obs[FRAME[0]:], frame])
        done = t % 10 == 9
        replay.add(obs, int(rng.integers(NUM_ACTIONS)), float(rng.integers(-1, 2)), next_obs, done)
        obs = rng.integers(0, 256, obs.shape, dtype=np.uint8) if done else next_obs
    return replay


def _env(add_value: bool = True, replay: FrameReplay | None = None) -> tuple[SimulatedEnv, FrameReplay]:
    torch.manual_seed(0)
    model = NextFramePredictor(NextFrameConfig.tiny(), NUM_ACTIONS, FRAME, STACKING)
    replay = replay or _replay()
    return SimulatedEnv(model, replay.restart_states, ENVS, episode_length=LENGTH, add_value=add_value), replay


def _stack_set(replay: FrameReplay) -> set[bytes]:
    usable = np.flatnonzero(~np.isnan(replay.values[: replay.num_steps]))
    return {stack.tobytes() for stack in replay.stack(usable)}


def test_spaces_dtypes_and_restarts_from_real_frames():
    env, replay = _env()
    assert env.single_observation_space.shape == (12, 20, 16) and env.single_observation_space.dtype == np.uint8
    assert env.observation_space.shape == (ENVS, 12, 20, 16)
    assert env.single_action_space.n == NUM_ACTIONS and env.action_space.shape == (ENVS,)
    obs, info = env.reset(seed=1)
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.uint8 and info == {}
    assert env.observation_space.contains(obs.numpy())
    real = _stack_set(replay)
    assert all(stack.numpy().tobytes() in real for stack in obs)  # every env starts from a real frame stack

    obs2, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert obs2.shape == obs.shape and obs2.dtype == torch.uint8 and env.observation_space.contains(obs2.numpy())
    assert torch.equal(obs2[:, :9], obs[:, 3:])  # the stack shifts by one frame
    assert reward.shape == (ENVS,) and reward.dtype == torch.float32
    assert set(reward.tolist()) <= {-1.0, 0.0, 1.0}  # no value added before the last step
    assert terminated.dtype == torch.bool and not terminated.any() and not truncated.any() and info == {}


@pytest.mark.parametrize("add_value", [True, False])
def test_episode_end_fires_once_then_autoresets(add_value):
    env, replay = _env(add_value)
    env.reset(seed=3)
    total = torch.zeros(ENVS)
    for t in range(LENGTH):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(ENVS, dtype=torch.long))
        total += reward
        last = t == LENGTH - 1
        # the port's done never fired (§6 item 2 of that page): here the last step ends every episode, once
        assert bool(terminated.all()) == (last and add_value) and bool(truncated.all()) == (last and not add_value)
        assert not (terminated & truncated).any()
        assert ("episode" in info) == last
    assert info["_episode"].all()
    assert torch.allclose(info["episode"]["r"], total) and (info["episode"]["l"] == LENGTH).all()
    # the value estimate is in the last reward only with add_value (then not a class -1, 0, +1 any more)
    assert all(r in (-1.0, 0.0, 1.0) for r in reward.tolist()) != add_value

    obs, reward, terminated, truncated, info = env.step(torch.ones(ENVS, dtype=torch.long))  # NEXT_STEP autoreset
    assert (reward == 0).all() and not terminated.any() and not truncated.any() and info == {}
    real = _stack_set(replay)
    assert all(stack.numpy().tobytes() in real for stack in obs)
    _, _, terminated, _, _ = env.step(torch.ones(ENVS, dtype=torch.long))
    assert not terminated.any()  # a new episode of LENGTH steps has begun


def test_same_seed_same_steps_and_state_dict_continues_exactly():
    def run(env, steps):
        return [env.step(torch.arange(ENVS) % NUM_ACTIONS)[:2] for _ in range(steps)]

    a, _ = _env()
    b, _ = _env()
    a.reset(seed=7)
    b.reset(seed=7)
    for (obs_a, r_a), (obs_b, r_b) in zip(run(a, LENGTH + 3), run(b, LENGTH + 3)):
        assert torch.equal(obs_a, obs_b) and torch.equal(r_a, r_b)

    a.reset(seed=8)
    state, stacks = a.state_dict(), a.stacks.clone()
    expected = run(a, 2 * LENGTH)
    c, _ = _env()
    c.reset(seed=99)
    c.load_state_dict(state)
    c.stacks, c.steps = stacks, 0
    for (obs_a, r_a), (obs_c, r_c) in zip(expected, run(c, 2 * LENGTH)):  # bits and restarts continue
        assert torch.equal(obs_a, obs_c) and torch.equal(r_a, r_c)


def test_bad_restarts_are_refused():
    env, _ = _env()
    env.restarts = lambda rng, n: np.zeros((n, 12, 20, 16), dtype=np.float32)
    with pytest.raises(ValueError, match="expected uint8"):
        env.reset(seed=0)


def test_a_ppo_iteration_runs_on_it_without_host_copies():
    from rlfoundry.algos.ppo import PPO
    from rlfoundry.envs import EnvInfo
    from rlfoundry.experiment.schema import ExperimentConfig

    env, _ = _env()
    cfg = ExperimentConfig.model_validate({
        "env": {"id": "ALE/Pong-v5", "num_envs": ENVS},
        "algo": {"name": "ppo", "num_steps": LENGTH, "minibatch_size": 10, "update_epochs": 2, "lr": 1e-4},
        "network": {"encoder": "impala_cnn", "hidden_sizes": [32], "shared": True},
    })
    spec = EnvInfo("simulated", ENVS, env.single_observation_space, env.single_action_space, "simulated")
    agent = PPO(cfg, spec, Runtime.of(cfg.train))
    agent.collector = RolloutCollector(env, spec, LENGTH, torch.device("cpu"), seed=0)
    assert agent.collector.on_device and isinstance(agent.collector.rewards, torch.Tensor)
    for _ in range(2):
        agent.collector.restart()
        iteration = agent.iterate(env, 0.0)
        assert iteration.steps == ENVS * LENGTH
        assert all(np.isfinite(v) for v in iteration.metrics.values())
        assert len(iteration.episode_returns) == ENVS  # the simulated episodes, reported as the env reports them
    # every row learned from (no reset rows), and the last step ends the episode: GAE does not bootstrap past it
    collector = agent.collector
    assert collector.valid.all() and (collector.terminated[-1] == 1).all() and not collector.terminated[:-1].any()
    values = torch.randn(LENGTH, ENVS)
    advantages = gae(collector.rewards, values, torch.randn(LENGTH, ENVS), collector.terminated,
                     collector.terminated, 0.99, 0.95)
    assert torch.allclose(advantages[-1], collector.rewards[-1] - values[-1])
