"""The recurrent replay (R2D2's sequences): windows, stored states, episode starts, n-step targets and priorities,
checked by hand on small streams; and a recurrent DQN whose stored states equal what its acting network had."""

import numpy as np
import pytest
import torch

import rlfoundry.envs as envs_lib
from rlfoundry.algos.base import Memory, Runtime
from rlfoundry.algos.registry import algorithm
from rlfoundry.buffers.recurrent import RecurrentReplay, StateLayout, reset_state
from rlfoundry.buffers.replay import collect, start_envs
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config
from rlfoundry.nets.cores import CORE_SETTINGS, CORES


class Settings:
    def __init__(self, **values):
        self.__dict__.update(CORE_SETTINGS, **values)


@pytest.mark.parametrize("core", ["lstm", "gru", "trxl", "mamba", "mamba2"])
def test_a_state_flattens_per_env_and_back(core):
    net = CORES[core](6, Settings(core_hidden=8, memory_length=4, num_heads=2, mamba2_head_dim=4))
    state = tuple(torch.randn_like(t) for t in net.initial_state(3))
    layout = StateLayout(net.initial_state(1))
    flat = layout.flatten(state)
    assert flat.shape == (3, layout.size)
    back = layout.unflatten(flat)
    assert all(torch.equal(a, b) for a, b in zip(back, state, strict=True))
    # row i is env i's state alone
    single = layout.flatten(tuple(t[:, 1:2] for t in state))
    assert torch.equal(single[0], flat[1])
    reset = reset_state(state, torch.tensor([False, True, False]))
    assert all(t[:, 1].abs().sum() == 0 and torch.equal(t[:, 0], s[:, 0]) for t, s in zip(reset, state, strict=True))


def stream(replay: RecurrentReplay, steps: int, ends: dict[int, str]):
    """Fill `replay` (2 envs) for `steps` steps: obs = 100·env + step, reward = step, state = 10·step + env; env 0's
    episodes end at the steps in `ends` ("term" or "trunc"), env 1's never."""
    obs = np.array([[0.0], [100.0]], np.float32)
    for t in range(steps):
        replay.note_state(np.array([[10.0 * t], [10.0 * t + 1]], np.float32))
        terminated = np.array([ends.get(t) == "term", False])
        truncated = np.array([ends.get(t) == "trunc", False])
        next_obs = np.array([[t + 1.0], [101.0 + t]], np.float32)
        replay.add(obs, np.array([t, t]), np.array([t, t], np.float32), terminated, truncated, next_obs)
        obs = next_obs


def test_windows_carry_their_start_state_episode_starts_and_n_step_targets():
    replay = RecurrentReplay(64, 2, (1,), np.float32, (), np.int64, state_size=1, length=4, burn_in=2, stride=2,
                             n_step=2, gamma=0.5)
    stream(replay, 20, {6: "term", 12: "trunc"})
    assert replay.window == 8 and len(replay) == 2 * (1 + (20 - 8) // 2)  # windows start at rows 0, 2, ..., 12
    batch = replay._windows(np.array([4, 4]), np.array([0, 1]), np.ones(2, np.float32))
    rows = np.arange(4, 12)
    assert batch.obs[:, 0, 0].tolist() == rows.tolist() and batch.obs[:, 1, 0].tolist() == (100 + rows).tolist()
    assert batch.states[:, 0].tolist() == [40.0, 41.0]  # the state noted when row 4 was the pending row
    # env 0: step 6 terminated, row 7 (its final observation) is a reset row, row 8 begins an episode
    assert batch.starts[:, 0].tolist() == [r == 8 for r in rows]
    assert not batch.starts[:, 1].any()
    trained = rows[2:6]  # rows 6..9 are trained, 10..11 only close their returns
    assert batch.mask[:, 0].tolist() == [float(r != 7) for r in trained]
    # row 6 terminates: its return is its reward alone and nothing is bootstrapped
    assert batch.returns[0, 0] == 6 and batch.discounts[0, 0] == 0
    # row 8: r8 + γ r9, bootstrapped from row 10 with γ²
    assert batch.returns[2, 0] == 8 + 0.5 * 9 and batch.discounts[2, 0] == 0.25 and batch.bootstrap[2, 0] == 6
    assert batch.bootstrap[:, 1].tolist() == [4, 5, 6, 7]


def test_a_truncation_bootstraps_from_the_final_observation():
    replay = RecurrentReplay(64, 2, (1,), np.float32, (), np.int64, state_size=1, length=4, burn_in=0, stride=4,
                             n_step=3, gamma=0.5)
    stream(replay, 20, {12: "trunc"})
    batch = replay._windows(np.array([12]), np.array([0]), np.ones(1, np.float32))
    assert batch.returns[0, 0] == 12 and batch.discounts[0, 0] == 0.5 and batch.bootstrap[0, 0] == 1
    assert batch.obs[1, 0, 0] == 13  # the final observation, which the core sees before the episode starts
    assert batch.starts[:, 0].tolist() == [False, False, True, False, False, False, False]


def test_only_stored_windows_are_sampled_and_old_states_are_overwritten_safely():
    replay = RecurrentReplay(40, 2, (1,), np.float32, (), np.int64, state_size=1, length=4, burn_in=2, stride=3)
    stream(replay, 100, {})
    rng = np.random.default_rng(0)
    batch = replay.sample(500, rng)
    first_rows = batch.obs[0, :, 0] % 100
    assert first_rows.min() >= 100 - 20 and first_rows.max() <= 100 - replay.window
    assert np.all(first_rows % 3 == 0)
    assert np.array_equal(batch.states[:, 0] // 10, first_rows)  # each window's own state, not a later lap's


def test_prioritized_windows_follow_their_td_errors():
    replay = RecurrentReplay(400, 1, (1,), np.float32, (), np.int64, state_size=1, length=4, burn_in=0, stride=4,
                             prioritized=True, alpha=1.0, eta=0.5)
    obs = np.zeros((1, 1), np.float32)
    for t in range(100):
        replay.note_state(np.full((1, 1), t, np.float32))
        replay.add(obs, np.array([0]), np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool), obs + t + 1)
        obs = obs + t + 1
    rng = np.random.default_rng(0)
    batch = replay.sample(8, rng)
    assert np.all(batch.weights == 1.0)  # all at the initial max priority
    errors = np.zeros((4, 8))
    errors[:, 0] = [0, 0, 0, 8.0]  # η·max + (1 − η)·mean = 4 + 1
    replay.update_priorities(batch.indices, errors, np.ones((4, 8), np.float32))
    assert replay.tree.leaves[batch.indices[0]] == pytest.approx(5.0 + 1e-6)
    favoured = replay.sample(400, rng)
    assert np.mean(favoured.indices == batch.indices[0]) > 0.1  # 5 against ~0 for the others updated, 1 for the rest
    weights = replay.sample(64, rng, beta=1.0).weights
    assert weights.max() == 1.0 and weights.min() < 1.0


SMALL = ["network.core_hidden=16", "network.hidden_sizes=[16]", "env.num_envs=2", "env.vectorization=sync",
         "algo.sequence_length=6", "algo.burn_in=3", "algo.learning_starts=100000", "algo.buffer_size=1000"]


SHARED = "algo.shared_memory=true"


@pytest.mark.parametrize("spec, core, shared", [("CartPole-v1:dqn", "lstm", ""), ("Pendulum-v1:sac", "gru", ""),
                                                ("CartPole-v1:sac", "lstm", ""), ("Pendulum-v1:td3", "lstm", ""),
                                                ("Pendulum-v1:sac", "gru", SHARED), ("Pendulum-v1:td3", "lstm", SHARED)])
def test_the_replay_stores_the_state_the_acting_networks_had(spec, core, shared):
    """No updates (learning never starts), so the networks are fixed: unrolling them from a fresh state over an env's
    stored stream reproduces, at every sequence start, the state the replay stored (for SAC and TD3 the actor's
    memory and the critics' own, or the one they share)."""
    cfg = load_config(spec, [f"network.core={core}", *SMALL, *filter(None, [shared])])
    envs, spec_info = envs_lib.build(cfg.env, gamma=0.99)
    agent = algorithm(cfg.algo.name)(cfg, spec_info, Runtime.of(cfg.train, "cpu"))
    replay = agent.replay
    assert isinstance(replay, RecurrentReplay)
    obs = start_envs(envs, replay, 1)
    steps = 220
    collect(envs, replay, obs, agent.explore, steps)
    envs.close()
    assert replay.reset_rows[:steps].any()  # episodes ended and began inside the stream
    nets = [agent.q] if cfg.algo.name == "dqn" else [agent.critic] if shared else [agent.actor, agent.critic]
    windows = np.arange(0, steps - replay.window, replay.stride)
    for env in range(2):
        frames = torch.as_tensor(replay.frames[:steps, env])
        starts = torch.zeros(steps, 1, dtype=torch.bool)
        starts[1:, 0] = torch.as_tensor(replay.reset_rows[:steps - 1, env])
        state = tuple(net.initial_state(1) for net in nets)
        with torch.no_grad():
            for t in range(steps):
                state = reset_state(state, starts[t])
                if t in windows:
                    stored = replay.states[(t // replay.stride) % replay.state_rows, env]
                    acting = state[0] if cfg.algo.name == "dqn" else state
                    np.testing.assert_allclose(agent.layout.flatten(acting)[0].numpy(), stored, atol=1e-5)
                state = tuple(net.features(frames[t:t + 1], s, None)[1] for net, s in zip(nets, state, strict=True))
        sample = replay._windows(windows, np.full(len(windows), env), np.ones(len(windows), np.float32))
        assert np.array_equal(sample.starts[1:], replay.reset_rows[windows[None] + np.arange(replay.window - 1)[:, None],
                                                                   env])


@pytest.mark.parametrize("spec, core, shared", [("Pendulum-v1:sac", "gru", ""), ("CartPole-v1:sac", "lstm", ""),
                                                ("Pendulum-v1:td3", "mamba", ""), ("Pendulum-v1:ddpg", "gru", ""),
                                                ("Pendulum-v1:sac", "gru", SHARED), ("CartPole-v1:sac", "lstm", SHARED),
                                                ("Pendulum-v1:td3", "gru", SHARED)])
def test_recurrent_actor_critics_update_from_sequences_and_act_from_memory(spec, core, shared):
    cfg = load_config(spec, [f"network.core={core}", *SMALL[:-2], "algo.learning_starts=0", "algo.batch_size=24",
                             *filter(None, [shared])])
    envs, spec_info = envs_lib.build(cfg.env, gamma=0.99)
    agent, other = (algorithm(cfg.algo.name)(cfg, spec_info, Runtime.of(cfg.train, "cpu")) for _ in range(2))
    agent.obs = start_envs(envs, agent.replay, 1)
    agent.obs = collect(envs, agent.replay, agent.obs, agent.explore, 60).obs
    envs.close()
    before = [p.detach().clone() for p in (*agent.actor.parameters(), *agent.critic.parameters())]
    stats = [agent.update(0.5) for _ in range(4)]  # TD3: the actor steps on every 2nd
    assert all(torch.isfinite(torch.as_tensor(float(v))) for s in stats for v in s.values())
    assert "loss/actor" in stats[1] and "loss/critic" in stats[0]
    after = [*agent.actor.parameters(), *agent.critic.parameters()]
    moved = [not torch.equal(a, b) for a, b in zip(before, after, strict=True)]
    assert all(moved), "every weight of the actor and the critics (their memories too) learns"
    if shared:  # one memory, the critics': the actor holds none and acting carries one state
        assert not any(name.startswith("core.") for name, _ in agent.actor.named_parameters())
        assert len(agent.acting_state) == 1
    other.load_state_dict(agent.state_dict())  # the acting state and the stored ones travel
    assert torch.equal(other.layout.flatten(other.acting_state), agent.layout.flatten(agent.acting_state))
    obs = np.random.default_rng(0).normal(size=(3, *spec_info.obs_shape)).astype(np.float32)
    memory = Memory()
    first = agent.predict(obs, True, memory)
    assert first.shape[0] == 3 and memory.state is not None
    exported = agent.acting_network()
    out = exported(torch.as_tensor(obs), *exported.initial_state(3))
    np.testing.assert_allclose(out[0].detach().numpy(), first, atol=1e-5)


def test_a_recurrent_dqn_state_dict_holds_the_acting_state_and_the_stored_states():
    """What the resume needs beyond the transitions: the acting network's state mid-episode and the states stored at
    sequence starts (an end-to-end resume: tests/e2e/test_resume_memory.py)."""
    cfg = load_config("CartPole-v1:dqn", ["network.core=gru", "network.core_hidden=8", "network.hidden_sizes=[8]",
                                          "algo.learning_starts=100000", "algo.prioritized=true"])
    envs, spec = envs_lib.build(cfg.env, gamma=0.99)
    agent, other = (algorithm("dqn")(cfg, spec, Runtime.of(cfg.train, "cpu")) for _ in range(2))
    agent.obs = start_envs(envs, agent.replay, 1)
    agent.obs = collect(envs, agent.replay, agent.obs, agent.explore, 37).obs
    envs.close()
    other.load_state_dict(agent.state_dict())
    assert torch.equal(other.layout.flatten(other.acting_state), agent.layout.flatten(agent.acting_state))
    assert agent.layout.flatten(agent.acting_state).abs().sum() > 0
    assert np.array_equal(other.replay.states, agent.replay.states) and agent.replay.states.any()
    assert np.array_equal(other.replay.tree.leaves, agent.replay.tree.leaves)
    np.testing.assert_array_equal(other.obs, agent.obs)


def test_a_recurrent_dqn_acts_from_its_memory_in_predict_and_in_its_exported_network():
    cfg = load_config("CartPole-v1:dqn", ["network.core=lstm", "network.core_hidden=8", "network.hidden_sizes=[8]"])
    envs, spec = envs_lib.build(cfg.env, gamma=0.99)
    envs.close()
    agent = algorithm("dqn")(cfg, spec, Runtime.of(cfg.train, "cpu"))
    obs = np.random.default_rng(0).normal(size=(5, 3, 4)).astype(np.float32)  # 5 steps of 3 envs
    memory = Memory()
    actions = [agent.predict(o, True, memory) for o in obs]
    with torch.no_grad():
        q, state = agent.q.unroll(torch.as_tensor(obs).flatten(0, 1), agent.q.initial_state(3), None, 5)
    assert np.array_equal(np.stack(actions), q.view(5, 3, -1).argmax(-1).numpy())
    assert torch.allclose(agent.layout.flatten(memory.state), agent.layout.flatten(state), atol=1e-5)
    exported = agent.acting_network()
    out = exported(torch.as_tensor(obs[0]), *exported.initial_state(3))
    assert np.array_equal(out[0].numpy(), actions[0]) and len(out) == 3  # actions, then the LSTM's h and c
    memory.ended(np.array([True, False, False]))
    memory.ended(np.array([False, False, False]))  # env 0's next observation begins an episode
    fresh = agent.predict(obs[0], True, memory)
    assert fresh[0] == actions[0][0]


def test_the_shared_memory_trains_by_the_critics_loss_only():
    """algo.shared_memory: the actor's loss reaches the actor's own layers, never the memory the critics own."""
    cfg = load_config("Pendulum-v1:sac", ["network.core=gru", *SMALL[:-2], "algo.learning_starts=0",
                                          "algo.batch_size=24", SHARED])
    envs, spec_info = envs_lib.build(cfg.env, gamma=0.99)
    agent = algorithm("sac")(cfg, spec_info, Runtime.of(cfg.train, "cpu"))
    agent.obs = start_envs(envs, agent.replay, 1)
    collect(envs, agent.replay, agent.obs, agent.explore, 60)
    envs.close()
    memory = [p for name, p in agent.critic.named_parameters() if name.startswith(("encoder", "core"))]
    seen = []
    steps = agent.critic_opt.update
    agent.critic_opt.update = lambda loss: (seen.append("critic"), steps(loss))[1]
    actor_steps = agent.actor_opt.update

    def actor_update(loss):  # the memory's weights have no gradient from the actor's loss
        grads = torch.autograd.grad(loss, memory, allow_unused=True, retain_graph=True)
        assert all(g is None for g in grads)
        seen.append("actor")
        return actor_steps(loss)

    agent.actor_opt.update = actor_update
    agent.update(0.5)
    assert seen == ["critic", "actor"]


def test_shared_memory_needs_a_memory_core():
    cfg = load_config("Pendulum-v1:sac", [SHARED])
    envs, spec_info = envs_lib.build(cfg.env, gamma=0.99)
    envs.close()
    with pytest.raises(ConfigError, match="algo.shared_memory = true"):
        algorithm("sac")(cfg, spec_info, Runtime.of(cfg.train, "cpu"))
