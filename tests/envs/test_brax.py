"""Brax ids (`rlfoundry.envs.brax`): registration, spaces, the NEXT_STEP step contract, the time limit, seeding,
zero-copy observations, no recompilation, exact state capture, episode statistics through `make`, PPO end to end.

Kept cheap: JAX compiles one step function per (env, number of sub-envs), seconds for a physics env on a CPU. Most
tests use Brax's unit-test env `fast` (no physics; compiles in about a second, never terminates); the physics tests
share one compiled `inverted_pendulum` of 2 envs (it terminates when the pole passes 0.2 rad).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

pytest.importorskip("brax")

import jax  # noqa: E402
from rollouts import rollout  # noqa: E402  (tests/envs/rollouts.py)

from rlfoundry.config.errors import ConfigError  # noqa: E402
from rlfoundry.config.sections import EnvConfig  # noqa: E402
from rlfoundry.envs import brax as brax_envs  # noqa: E402  (registers the ids)
from rlfoundry.envs import build, choose_vectorization, make_single, probe_spaces  # noqa: E402
from rlfoundry.envs import state as envs_state  # noqa: E402

FAST = "brax/fast-v0"
PENDULUM = "brax/inverted_pendulum-v0"
NUM_ENVS = 2


def vector(env_id: str, num_envs: int = NUM_ENVS, **kwargs):
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


@pytest.fixture(scope="module")
def pendulum():
    envs = vector(PENDULUM)
    yield envs
    envs.close()


def test_every_brax_env_is_registered():
    import brax.envs

    for name in brax.envs._envs:
        spec = gym.spec(f"brax/{name}-v0")
        assert spec.vector_entry_point == "rlfoundry.envs.brax:BraxVectorEnv"
        assert spec.entry_point == "rlfoundry.envs.brax:BraxEnv"
        assert spec.max_episode_steps == 1000 and spec.kwargs == {"name": name}
    assert {"brax/ant-v0", "brax/halfcheetah-v0", "brax/inverted_pendulum-v0"} <= set(gym.registry)


def test_spaces():
    observation_space, action_space = probe_spaces(PENDULUM)  # builds one env, compiles nothing
    assert observation_space == gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)  # as MuJoCo's InvertedPendulum-v5
    assert action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)  # Brax's range (MuJoCo's twin: ±3)
    envs = vector(FAST, 3)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    assert envs.observation_space.shape == (3, 2) and envs.action_space.shape == (3, 1)
    assert envs.action_space.dtype == np.float32 and envs.observation_space.dtype == np.float32


def test_single_env_passes_check_env():
    env = gym.make(FAST)
    try:
        check_env(env, skip_render_check=True)
        assert env.spec.id == FAST and env.spec.max_episode_steps == 1000
    finally:
        env.close()


def test_make_single_builds_one_brax_env():
    """`make_single` (`load_policy(...).make_env()`, `play`): one `BraxEnv` in the id's time limit, which starts as
    sub-env i of the batched env when reset with seed + i."""
    env = make_single(EnvConfig(id=FAST, max_episode_steps=3))
    batched = vector(FAST, 2)
    try:
        assert isinstance(env.unwrapped, brax_envs.BraxEnv) and env.spec.max_episode_steps == 3
        assert env.observation_space == batched.single_observation_space
        starts, _ = batched.reset(seed=20)
        np.testing.assert_array_equal(env.reset(seed=21)[0], starts[1])
        ends = [env.step(np.ones(1, np.float32))[2:4] for _ in range(3)]
        assert ends == [(False, False), (False, False), (False, True)]
    finally:
        env.close()
        batched.close()


def test_truncation_at_max_episode_steps_then_a_reset_step():
    envs = vector(FAST, max_episode_steps=3)
    obs, info = envs.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (NUM_ENVS, 2) and info == {}
    actions = np.ones((NUM_ENVS, 1), np.float32)  # `fast` moves right while the action is positive
    for step in (1, 2, 3):
        obs, rewards, terminated, truncated, info = envs.step(actions)
        assert rewards.dtype == np.float32 and terminated.dtype == np.bool_ and truncated.dtype == np.bool_
        assert not terminated.any() and truncated.all() == (step == 3) and truncated.any() == (step == 3)
        assert np.all(rewards > 0) and np.all(obs[:, 0] > 0)
    final_obs = obs.copy()
    obs, rewards, terminated, truncated, _ = envs.step(actions)  # NEXT_STEP: the reset step
    assert np.all(rewards == 0) and not terminated.any() and not truncated.any()
    assert np.all(obs == 0) and np.all(final_obs != 0)  # `fast` starts at rest at 0
    obs, rewards, _, truncated, _ = envs.step(actions)  # a new episode's first step
    assert np.all(rewards > 0) and not truncated.any()
    envs.close()


def test_termination_returns_the_final_observation_then_resets(pendulum):
    pendulum.reset(seed=3)
    push = np.ones((NUM_ENVS, 1), np.float32)  # full force one way: the pole falls within some tens of steps
    for _ in range(200):
        obs, rewards, terminated, truncated, _ = pendulum.step(push)
        assert not truncated.any()
        if terminated.any():
            break
    assert terminated.any(), "the pendulum never fell"
    ended = np.flatnonzero(terminated)
    assert np.all(np.abs(obs[ended, 1]) > 0.2)  # the true final observation: the pole past Brax's 0.2 rad limit
    assert np.all(rewards[ended] == 1.0)
    obs, rewards, terminated, truncated, _ = pendulum.step(push)
    assert np.all(rewards[ended] == 0.0) and not terminated[ended].any() and not truncated[ended].any()
    assert np.all(np.abs(obs[ended]) <= 0.01)  # a fresh episode: Brax resets q and qd within ±0.01


def test_seeding_reproducible_and_seed_plus_i(pendulum):
    first = rollout(pendulum, seed=11, steps=30)
    again = rollout(pendulum, seed=11, steps=30)
    other = rollout(pendulum, seed=12, steps=30, action_seed=11)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(first[0, 1], other[0, 0])  # sub-env 1 of seed 11 starts as sub-env 0 of seed 12
    for seed, i in ((11, 0), (11, 1), (2**32 - 1, 1)):  # the keys are JAX's PRNGKey(seed + i), mod 2**32
        expected = jax.random.PRNGKey(np.uint32((seed + i) % 2**32))
        np.testing.assert_array_equal(brax_envs.seed_keys(seed, 2)[i], np.asarray(expected))
    single = gym.make(PENDULUM)
    obs, _ = single.reset(seed=12)
    np.testing.assert_array_equal(obs, first[0, 1])  # the single env with seed + i starts as sub-env i
    single.close()


def test_observations_reach_torch_without_a_copy():
    envs = vector(FAST)
    envs.reset(seed=0)
    physics = envs.unwrapped.physics
    carry, (obs, rewards, *_) = physics.step_many(envs.unwrapped._carry, np.zeros((NUM_ENVS, 1), np.float32),
                                                  np.int32(10))
    for array in (obs, rewards):
        view = np.asarray(array)
        assert view.ctypes.data == array.unsafe_buffer_pointer()  # numpy shares JAX's buffer
        with warnings.catch_warnings():  # torch warns (once) that the view is read-only, as JAX's buffers are
            warnings.simplefilter("ignore", UserWarning)
            assert torch.as_tensor(view).data_ptr() == array.unsafe_buffer_pointer()  # and so does torch
    obs, rewards, *_ = envs.step(np.zeros((NUM_ENVS, 1), np.float32))
    assert not obs.flags.owndata and not obs.flags.writeable  # a view of an (immutable) JAX buffer
    envs.close()


@pytest.fixture
def compilations():
    """The XLA compilations made during the test, counted through JAX's monitoring events."""
    seen = []

    def listen(event: str, seconds: float, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            seen.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)


def test_no_recompilation_across_steps_resets_and_envs(compilations):
    envs = vector(FAST, 5)  # a size no other test compiles
    rollout(envs, seed=0, steps=5)
    assert len(compilations) == 1  # reset is a step in which every sub-env restarts: one function
    envs.reset()  # unseeded: goes on from the current keys
    envs.step(envs.action_space.sample().astype(np.float64))  # cast, not compiled again for float64
    evaluation = vector(FAST, 5)  # evaluation envs of the same size reuse the compiled step
    rollout(evaluation, seed=5, steps=5)
    assert len(compilations) == 1
    assert evaluation.unwrapped.physics is envs.unwrapped.physics
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros((4, 1), np.float32))
    envs.close()
    evaluation.close()


def test_capture_and_restore_continue_exactly(pendulum, tmp_path):
    pendulum.reset(seed=4)
    pendulum.action_space.seed(4)
    for _ in range(15):
        pendulum.step(pendulum.action_space.sample())
    saved = pendulum.unwrapped.capture_state()
    assert all(isinstance(array, np.ndarray) for array in saved.values())
    assert {"keys", "steps", "needs_reset", "state.obs"} <= set(saved)
    actions = [pendulum.action_space.sample() for _ in range(40)]  # long enough to cross resets
    expected = [pendulum.step(a)[:4] for a in actions]
    assert any(terminated.any() for _, _, terminated, _ in expected)
    np.savez(tmp_path / "arrays.npz", **saved)  # as a checkpoint stores them
    with np.load(tmp_path / "arrays.npz", allow_pickle=False) as data:
        loaded = {name: data[name] for name in data.files}
    restored = vector(PENDULUM)  # never reset: restore alone makes it steppable
    restored.unwrapped.restore_state(loaded)
    for a, want in zip(actions, expected):
        for got, value in zip(restored.step(a)[:4], want):
            np.testing.assert_array_equal(got, value)
    with pytest.raises(ValueError, match="does not fit"):
        vector(PENDULUM, 3).unwrapped.restore_state(saved)
    restored.close()


def test_resume_through_the_env_state_module(pendulum):
    config = EnvConfig(id=PENDULUM, num_envs=NUM_ENVS, normalize_obs=True, normalize_reward=True)
    envs, _ = build(config)  # the pendulum fixture's size: nothing to compile
    envs.reset(seed=5)
    rng = np.random.default_rng(5)
    actions = [rng.uniform(-1, 1, (NUM_ENVS, 1)).astype(np.float32) for _ in range(60)]
    for a in actions[:20]:
        envs.step(a)
    values, arrays, why = envs_state.capture(envs)
    assert why is None
    expected = [envs.step(a) for a in actions[20:]]
    resumed, _ = build(config)
    envs_state.restore(resumed, values, arrays)
    for a, want in zip(actions[20:], expected):
        got = resumed.step(a)
        for x, y in zip(got[:4], want[:4]):
            np.testing.assert_array_equal(x, y)
        if "episode" in want[4]:
            np.testing.assert_array_equal(got[4]["episode"]["r"], want[4]["episode"]["r"])


def test_make_gives_episode_statistics_through_the_vector_entry_point():
    batched = EnvConfig(id=PENDULUM, kwargs={"backend": "positional"})
    assert choose_vectorization(batched, 8) == "vector_entry_point"  # env.kwargs reach the batched env too
    envs, spec = build(EnvConfig(id=FAST, num_envs=NUM_ENVS, max_episode_steps=4, normalize_obs=True))
    assert spec.vectorization == "vector_entry_point" and spec.obs_shape == (2,) and not spec.discrete
    envs.reset(seed=0)
    total = np.zeros(NUM_ENVS)
    for _step in range(4):
        _, rewards, terminated, truncated, info = envs.step(np.ones((NUM_ENVS, 1), np.float32))
        total += rewards
    assert truncated.all() and not terminated.any()
    assert info["_episode"].all()
    np.testing.assert_array_equal(info["episode"]["l"], [4, 4])
    np.testing.assert_allclose(info["episode"]["r"], total, rtol=1e-6)
    envs.close()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"backend": "warp"}, r"env.kwargs.backend = 'warp'.*allowed: generalized, positional, spring, mjx"),
    ({"no_such_option": 1}, r"env.kwargs = \{'no_such_option': 1\}.*cannot be built"),
])
def test_bad_kwargs_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        probe_spaces(PENDULUM, kwargs)
    with pytest.raises(ConfigError, match=match):
        vector(PENDULUM, **kwargs)
