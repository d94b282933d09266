"""POPGym ids (`rlfoundry.envs.popgym`): the flat float32 observations (one-hot parts, the previous action, the
first-step flag), MultiDiscrete actions as one Discrete, seeding, terminations against truncations, episode statistics,
check_env, exact resume of every Easy id, and the refused ids and spaces."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, env_fn, make_kwargs, probe_spaces, register_optional_families

pytest.importorskip("popgym")

REPEAT = "popgym-RepeatPreviousEasy-v0"  # Discrete(4) suits in, Discrete(4) out; 51 steps, then the deck is out
CARTPOLE = "popgym-PositionOnlyCartPoleEasy-v0"  # Box(2) in, Discrete(2) out; truncated at 200 steps


def single(env_id: str, **cfg_kwargs) -> gym.Env:
    """The single env our family builds, as `env_fn` hands it to a vector env."""
    cfg = EnvConfig(id=env_id, **cfg_kwargs)
    return env_fn(cfg.id, make_kwargs(cfg), cfg)()


def easy_ids() -> list[str]:
    register_optional_families(REPEAT)
    return sorted(name for name in gym.registry if name.startswith("popgym-") and "Easy" in name)


@pytest.mark.parametrize(("env_id", "size", "actions"), [
    (REPEAT, 4 + 4 + 1, spaces.Discrete(4)),  # suit, previous answer, first-step flag
    ("popgym-CountRecallEasy-v0", 2 + 2 + 27 + 1, spaces.Discrete(27)),  # MultiDiscrete([2, 2]) one-hot per entry
    ("popgym-AutoencodeEasy-v0", 2 + 4 + 4 + 1, spaces.Discrete(4)),  # Tuple(mode, suit)
    (CARTPOLE, 2 + 2 + 1, spaces.Discrete(2)),
    ("popgym-PositionOnlyPendulumEasy-v0", 2 + 1 + 1, spaces.Box(-2.0, 2.0, (1,), np.float32)),
    ("popgym-BattleshipEasy-v0", 2 + 16 + 1, spaces.Discrete(64)),  # MultiDiscrete([8, 8]) actions flattened
])
def test_spaces_after_conversion(env_id, size, actions):
    observation_space, action_space = probe_spaces(env_id)
    assert isinstance(observation_space, spaces.Box) and observation_space.dtype == np.float32
    assert observation_space.shape == (size,)
    assert action_space == actions


def test_one_hot_observation_previous_action_and_first_step_flag():
    env = single(REPEAT)
    try:
        obs, _ = env.reset(seed=0)
        card = env.unwrapped.deck.suits_idx[env.unwrapped.deck["player"][-1]]
        expected = np.zeros(9, np.float32)
        expected[card] = 1.0
        expected[8] = 1.0  # first step; no previous action yet
        np.testing.assert_array_equal(obs, expected)
        obs, *_ = env.step(2)
        card = env.unwrapped.deck.suits_idx[env.unwrapped.deck["player"][-1]]
        expected = np.zeros(9, np.float32)
        expected[card] = 1.0
        expected[4 + 2] = 1.0  # the answer just given
        np.testing.assert_array_equal(obs, expected)
        assert env.observation_space.contains(obs)
    finally:
        env.close()


def test_multi_discrete_observations_one_hot_each_entry():
    env = single("popgym-CountRecallEasy-v0")
    try:
        env.reset(seed=1)
        for action in (0, 5, 26):
            obs, *_ = env.step(action)
            dealt, query = env.unwrapped.value, env.unwrapped.query
            assert obs[dealt] == 1 and obs[:2].sum() == 1
            assert obs[2 + query] == 1 and obs[2:4].sum() == 1
            assert obs[4 + action] == 1 and obs[4:31].sum() == 1 and obs[31] == 0
    finally:
        env.close()


def test_multi_discrete_actions_are_one_discrete_row_major():
    env = single("popgym-BattleshipEasy-v0")
    try:
        env.reset(seed=0)
        obs, *_ = env.step(8 * 3 + 5)  # row 3, column 5
        guesses = env.unwrapped.guesses  # popgym marks the cells it was told to shoot
        assert guesses[3, 5] == 1 and guesses.sum() == 1
        assert obs[2 + 3] == 1 and obs[2 + 8 + 5] == 1 and obs[2:18].sum() == 2  # the previous action: (3, 5)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", [REPEAT, "popgym-NoisyPositionOnlyCartPoleEasy-v0", "popgym-MineSweeperEasy-v0"])
def test_a_seed_gives_the_same_episode_and_another_seed_another(env_id):
    def play(seed: int) -> tuple[np.ndarray, list[float]]:
        env = single(env_id)
        try:
            obs, _ = env.reset(seed=seed)
            seen, rewards = [obs], []
            for action in [0, 1, 1, 0, 1, 0, 0, 1]:
                obs, reward, terminated, truncated, _ = env.step(action)
                seen.append(obs)
                rewards.append(reward)
                if terminated or truncated:
                    break
            return np.stack(seen), rewards
        finally:
            env.close()

    first, rewards = play(7)
    again, rewards_again = play(7)
    np.testing.assert_array_equal(first, again)
    assert rewards == rewards_again
    other, _ = play(8)
    assert not np.array_equal(first, other)


def test_the_deck_running_out_is_a_termination():
    env = single(REPEAT)
    try:
        env.reset(seed=0)
        for step in range(1, 100):  # noqa: B007 (the step the loop ends at is what the test checks)
            _, _, terminated, truncated, _ = env.step(0)
            if terminated or truncated:
                break
        assert (step, terminated, truncated) == (51, True, False)
    finally:
        env.close()


def test_the_episode_length_is_a_truncation_and_a_fall_on_it_a_termination():
    env = single(CARTPOLE)
    try:
        env.reset(seed=0)
        returned = 0.0
        for step in range(1, 300):  # noqa: B007
            cart = env.unwrapped.state  # [x, x_dot, theta, theta_dot]: push the way the pole leans
            _, reward, terminated, truncated, _ = env.step(int(cart[2] + 0.5 * cart[3] > 0))
            returned += reward
            if terminated or truncated:
                break
        assert (step, terminated, truncated) == (200, False, True)
        assert returned == pytest.approx(1.0)  # 1/200 a step
    finally:
        env.close()

    class FallAtTheLimit(gym.Wrapper):  # popgym reports both when the pole falls on the last step
        def step(self, action):
            obs, reward, _, _, info = self.env.step(action)
            return obs, reward, True, True, info

    from rlfoundry.envs.popgym import PopgymObservation

    register_optional_families(CARTPOLE)
    env = PopgymObservation(FallAtTheLimit(gym.make(CARTPOLE)))
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step(0)
    assert terminated and not truncated
    env.close()


def test_max_episode_steps_truncates_and_statistics_report_the_true_return():
    envs, _ = build(EnvConfig(id=REPEAT, num_envs=2, vectorization="sync", max_episode_steps=10))
    try:
        envs.reset(seed=3)
        returns = np.zeros(2)
        for _ in range(10):
            _, rewards, terminated, truncated, info = envs.step(np.array([0, 1]))
            returns += rewards
        assert truncated.all() and not terminated.any()
        np.testing.assert_array_equal(info["episode"]["l"], [10, 10])
        np.testing.assert_allclose(info["episode"]["r"], returns)
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", [REPEAT, "popgym-AutoencodeEasy-v0", "popgym-BattleshipEasy-v0",
                                    "popgym-NoisyPositionOnlyPendulumEasy-v0"])
def test_check_env_passes_on_the_single_env(env_id):
    env = single(env_id)
    try:
        check_env(env, skip_render_check=True)  # popgym's envs render text, when at all
        assert env.spec is not None and env.spec.id == env_id
    finally:
        env.close()


def test_every_easy_id_restores_exactly():
    """The attribute walk of rlfoundry.envs.state captures POPGym's decks (envs/test_env_state.py has two ids)."""
    from rlfoundry.envs.state import capture, restore

    for env_id in easy_ids():
        cfg = EnvConfig(id=env_id, num_envs=2, vectorization="sync")
        (a, _), (b, _) = build(cfg), build(cfg)
        try:
            a.reset(seed=5)
            a.action_space.seed(1)
            for _ in range(60):
                a.step(a.action_space.sample())
            state, arrays, why = capture(a)
            assert why is None, env_id
            restore(b, json.loads(json.dumps(state)), {k: np.array(v) for k, v in arrays.items()})
            for _ in range(80):
                action = a.action_space.sample()
                for x, y in zip(a.step(action)[:4], b.step(action)[:4]):
                    assert np.array_equal(x, y), env_id
        finally:
            a.close()
            b.close()


@pytest.mark.parametrize(("env_id", "expected"), [
    ("popgym-VelocityOnlyCartPoleEasy-v0", "popgym-VelocityOnlyCartpoleEasy-v0"),  # popgym spells it Cartpole
    ("popgym-RepeatPrevious-v0", "did you mean"),  # no difficulty: not registered
    ("popgym-LabyrinthEscapeEasy-v0", "mazelib"),
])
def test_unknown_ids_are_config_errors(env_id, expected):
    if env_id in gym.registry:
        pytest.skip(f"{env_id} is registered here (mazelib installed)")
    with pytest.raises(ConfigError, match=f"env.id = '{env_id}'.*{expected}"):
        probe_spaces(env_id)


def test_env_kwargs_the_env_does_not_take_are_a_config_error():
    with pytest.raises(ConfigError, match="cannot be created with env.kwargs"):
        probe_spaces(REPEAT, {"no_such_argument": 1})


def test_spaces_without_a_flat_encoding_are_config_errors(monkeypatch):
    from rlfoundry.envs import popgym as family

    class TextObservation(gym.Env):
        observation_space = spaces.Text(8)
        action_space = spaces.Discrete(2)

    class UnboundedActions(gym.Env):
        observation_space = spaces.Discrete(2)
        action_space = spaces.Box(-np.inf, np.inf, (1,))

    for env, expected in ((TextObservation(), "observation space Text"), (UnboundedActions(), "finite bounds")):
        monkeypatch.setattr(family.gym, "make", lambda env_id, env=env, **kwargs: env)
        with pytest.raises(ConfigError, match=f"env.id = '{REPEAT}'.*{expected}"):
            family.make_env(REPEAT, {}, EnvConfig(id=REPEAT))
