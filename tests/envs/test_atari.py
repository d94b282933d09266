"""Atari (`ALE/*-v5`) through `rlfoundry.envs.make`: spaces, seeding, `env.atari` options, and the episode
accounting of `AtariEpisodes` (clipped rewards and life-loss terminations for the learner, whole unclipped games
in the statistics).
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import vector as vw

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.schema import AtariConfig, EnvConfig
from rlfoundry.envs import find_wrapper, make, probe_spaces
from rlfoundry.envs.atari import AtariEpisodes

pytest.importorskip("ale_py")


@pytest.fixture
def build():
    """make() for an ALE id with `env.atari` options, closing every env the test built."""
    built = []

    def _build(env_id: str = "ALE/Breakout-v5", num_envs: int = 2, env_options: dict | None = None, **atari):
        envs, spec = make(EnvConfig(id=env_id, num_envs=num_envs, atari=atari, **(env_options or {})))
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()


def random_actions(envs, steps: int, seed: int):
    """Reset with `seed` and yield each step's results under uniformly random actions."""
    envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n = envs.single_action_space.n
    for _ in range(steps):
        yield envs.step(rng.integers(0, n, size=envs.num_envs))


# ---------------------------------------------------------------- spaces and the step contract


@pytest.mark.parametrize(("env_id", "num_actions"), [("ALE/Breakout-v5", 4), ("ALE/Pong-v5", 6)])
def test_builds_and_steps(build, env_id, num_actions):
    envs, spec = build(env_id, num_envs=3)
    assert spec.vectorization == "atari" and spec.num_envs == envs.num_envs == 3
    assert spec.observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert spec.action_space == spaces.Discrete(num_actions) and spec.discrete
    assert find_wrapper(envs, AtariEpisodes) is not None
    assert find_wrapper(envs, vw.RecordEpisodeStatistics) is None  # AtariEpisodes reports whole games itself
    obs, info = envs.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (3, 4, 84, 84)
    assert {"lives", "episode_frame_number"} <= info.keys()
    for obs, rewards, terminated, truncated, info in random_actions(envs, 20, seed=0):
        assert obs.dtype == np.uint8 and obs.shape == (3, 4, 84, 84)
        assert rewards.dtype == np.float32 and rewards.shape == (3,)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and terminated.shape == (3,)
    assert obs.any()  # real frames, not the zero padding of a fresh stack


def test_probe_spaces_match_make(build):
    _, spec = build("ALE/Pong-v5")
    assert probe_spaces("ALE/Pong-v5") == (spec.observation_space, spec.action_space)
    cfg = EnvConfig(id="ALE/Pong-v5", atari={"frame_stack": 2, "full_action_space": True})
    assert probe_spaces("ALE/Pong-v5", env_cfg=cfg) == (spaces.Box(0, 255, (2, 84, 84), np.uint8), spaces.Discrete(18))


# ---------------------------------------------------------------- seeding


def test_same_seed_same_observations(build):
    def frames(seed: int) -> np.ndarray:
        envs, _ = build()  # sticky actions (0.25) draw from the seeded emulator RNG
        return np.stack([obs for obs, *_ in random_actions(envs, 60, seed=seed)])

    a, b = frames(3), frames(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(frames(4), a)


# ---------------------------------------------------------------- env.atari options


def test_frame_stack_img_size_and_action_space(build):
    envs, spec = build(frame_stack=2, img_size=64, full_action_space=True)
    assert spec.obs_shape == (2, 64, 64) and spec.action_space == spaces.Discrete(18)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 2, 64, 64) and obs.dtype == np.uint8


def test_colour_frames_are_channel_first(build):
    from ale_py.vector_env import AtariVectorEnv

    envs, spec = build("ALE/Pong-v5", grayscale=False, frame_stack=2)
    assert spec.observation_space == spaces.Box(0, 255, (6, 84, 84), np.uint8)  # [frame_stack * RGB, H, W]
    raw = AtariVectorEnv("pong", 2, grayscale=False, stack_num=2, repeat_action_probability=0.25)
    ours, _ = envs.reset(seed=5)
    theirs, _ = raw.reset(seed=5)  # [N, frame_stack, H, W, RGB]
    raw.close()
    assert ours.dtype == np.uint8 and ours.flags.c_contiguous
    for frame in range(2):
        for colour in range(3):
            np.testing.assert_array_equal(ours[:, 3 * frame + colour], theirs[:, frame, :, :, colour])


def test_time_limit_counts_emulator_frames(build):
    envs, _ = build("ALE/Pong-v5", max_episode_frames=400)  # 100 steps at frame_skip 4
    truncated_at = [t for t, (*_, truncated, _) in enumerate(random_actions(envs, 110, seed=0)) if truncated.all()]
    assert truncated_at == [99]


def test_reset_action_is_fire_when_the_game_has_it(build):
    assert find_wrapper(build("ALE/Breakout-v5")[0], AtariEpisodes).reset_action == 1  # FIRE
    assert find_wrapper(build("ALE/Breakout-v5", fire_reset=False)[0], AtariEpisodes).reset_action == 0  # NOOP
    assert find_wrapper(build("ALE/MsPacman-v5")[0], AtariEpisodes).reset_action == 0  # no FIRE in MsPacman


# ---------------------------------------------------------------- episode accounting on real games


def play(envs, steps: int, seed: int) -> tuple[list[tuple[float, int, int, float]], int, set[float]]:
    """Random play, checking each reported game against what the learner saw.

    A game covers the steps from the one after its reset (ALE's reset step after the previous game, or
    `reset()`) to the step that reports it. Every done step is followed by a reset row (reward 0, no done
    flag) for the learner, including life losses, whose reset row still belongs to the game.
    Returns the games as (score, length, terminations, learner return), all terminations, and the learner's
    reward values.
    """
    n = envs.num_envs
    steps_in_game = np.zeros(n, dtype=int)
    terms_in_game = np.zeros(n, dtype=int)
    learner_return = np.zeros(n)
    reset_row = np.zeros(n, dtype=bool)
    game_reset = np.zeros(n, dtype=bool)
    games, terminations, rewards_seen = [], 0, set()
    for _, rewards, terminated, truncated, info in random_actions(envs, steps, seed=seed):
        assert np.all(rewards[reset_row] == 0.0) and not (terminated | truncated)[reset_row].any()
        rewards_seen.update(np.unique(rewards).tolist())
        steps_in_game += ~game_reset
        learner_return += rewards
        terms_in_game += terminated
        terminations += int(terminated.sum())
        ended = info.get("_episode", np.zeros(n, dtype=bool))
        assert not ended[~(terminated | truncated)].any()  # a game ends on a done step (no late reports here)
        for i in np.flatnonzero(ended):
            assert info["episode"]["l"][i] == steps_in_game[i]
            assert info["episode"]["t"][i] >= 0.0
            score = float(info["episode"]["r"][i])
            games.append((score, int(steps_in_game[i]), int(terms_in_game[i]), float(learner_return[i])))
        steps_in_game[ended], terms_in_game[ended], learner_return[ended] = 0, 0, 0.0
        reset_row, game_reset = terminated | truncated, ended
    return games, terminations, rewards_seen


def test_life_loss_is_not_an_episode_end(build):
    envs, _ = build("ALE/Breakout-v5", num_envs=4)  # 5 lives; random play loses one every ~20 steps
    games, terminations, _ = play(envs, 300, seed=1)
    assert len(games) >= 4
    assert all(terms == 5 for _, _, terms, _ in games)  # 4 life losses and the game over, one game
    assert terminations >= 5 * len(games)


def test_without_episodic_life_terminations_are_games(build):
    envs, _ = build("ALE/Breakout-v5", num_envs=4, episodic_life=False, reward_clipping=False)
    games, terminations, _ = play(envs, 300, seed=1)
    assert len(games) >= 4 and terminations == len(games)  # only game over terminates
    for score, _, _, learner_return in games:
        assert score == learner_return  # nothing clipped or zeroed: the learner saw the whole score


def test_learner_rewards_are_clipped_and_scores_are_not(build):
    # SpaceInvaders scores 5-30 points per alien, so the learner's clipped rewards undercount the score.
    envs, _ = build("ALE/SpaceInvaders-v5", num_envs=4)
    games, _, rewards_seen = play(envs, 600, seed=0)
    assert rewards_seen == {0.0, 1.0}
    assert len(games) >= 2 and all(score % 5 == 0 for score, *_ in games)
    assert all(score >= learner_return for score, _, _, learner_return in games)
    assert any(score > learner_return + 10 for score, _, _, learner_return in games)


# ---------------------------------------------------------------- AtariEpisodes against a scripted ALE


class ScriptedALE(VectorEnv):
    """Replays AtariVectorEnv outputs from a script of (score, terminated, truncated, lives, episode frame) rows
    per sub-env, and records the actions it was given."""

    def __init__(self, script: list[list[tuple]], start: list[tuple[int, int]]):
        self.script, self.start = script, start
        self.num_envs = len(start)
        self.single_observation_space = spaces.Box(0, 255, (1, 2, 2), np.uint8)
        self.single_action_space = spaces.Discrete(4)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        lives, frames = (np.array(column, dtype=np.int32) for column in zip(*self.start))
        return np.zeros((self.num_envs, 1, 2, 2), np.uint8), {"lives": lives, "episode_frame_number": frames}

    def step(self, actions):
        self.actions.append(np.array(actions))
        rows = self.script[len(self.actions) - 1]
        score, terminated, truncated, lives, frames = (np.array(column) for column in zip(*rows))
        info = {"lives": lives.astype(np.int32), "episode_frame_number": frames.astype(np.int32)}
        obs = np.zeros((self.num_envs, 1, 2, 2), np.uint8)
        return obs, score.astype(np.int32), terminated.astype(bool), truncated.astype(bool), info


# Sub-env 0 plays through every case; sub-env 1 only scores -12 once.
# Rows: (score, terminated, truncated, lives, episode frame number).
SCRIPT = [
    [(5, 0, 0, 3, 14), (-12, 0, 0, 3, 14)],
    [(0, 1, 0, 2, 18), (0, 0, 0, 3, 18)],  # 0: life loss → a termination for the learner only
    [(7, 0, 0, 2, 22), (0, 0, 0, 3, 22)],  # 0: our reset step: action replaced, learner reward 0, score counts
    [(2, 0, 0, 2, 26), (0, 0, 0, 3, 26)],
    [(0, 1, 0, 0, 30), (0, 0, 0, 3, 30)],  # 0: game over → game (14, 5 steps)
    [(0, 0, 0, 3, 12), (0, 0, 0, 3, 34)],  # 0: ALE's reset step, part of no game
    [(3, 0, 0, 3, 16), (0, 0, 0, 3, 38)],
    [(0, 1, 0, 2, 20), (0, 0, 0, 3, 42)],  # 0: looks like a life loss ...
    [(0, 0, 0, 3, 11), (0, 0, 0, 3, 46)],  # 0: ... but ALE reset (frame number fell) → game (3, 2 steps), late
    [(1, 0, 1, 3, 15), (0, 0, 0, 3, 50)],  # 0: time limit → game (1, 1 step)
    [(0, 0, 0, 3, 9), (0, 0, 0, 3, 54)],
]


def test_atari_episodes_accounting_on_a_script():
    base = ScriptedALE(SCRIPT, start=[(3, 10), (3, 10)])
    envs = AtariEpisodes(base, episodic_life=True, reward_clipping=True, reset_action=1)
    envs.reset(seed=0)
    rewards, reported = [], []
    for t in range(len(SCRIPT)):
        _, reward, terminated, _, info = envs.step(np.array([2, 3]))
        rewards.append(reward)
        if "_episode" in info:
            assert info["_episode"].dtype == np.bool_
            for i in np.flatnonzero(info["_episode"]):
                reported.append((t, i, info["episode"]["r"][i], info["episode"]["l"][i]))
        np.testing.assert_array_equal(terminated, [SCRIPT[t][0][1], 0])  # terminations pass through
    np.testing.assert_array_equal(np.array(rewards)[:, 0], [1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(np.array(rewards)[:, 1], [-1] + [0] * 10)
    assert reported == [(4, 0, 14.0, 5), (8, 0, 3.0, 2), (9, 0, 1.0, 1)]
    actions = np.array(base.actions)
    np.testing.assert_array_equal(actions[:, 0], [2, 2, 1, 2, 2, 2, 2, 2, 1, 2, 2])  # FIRE after each life loss
    np.testing.assert_array_equal(actions[:, 1], 3)


# ---------------------------------------------------------------- config errors


def test_unknown_ale_id_is_a_config_error():
    with pytest.raises(ConfigError, match="not an ALE id.*ALE/Breakout-v5"):
        make(EnvConfig(id="ALE/Breakot-v5"))
    with pytest.raises(ConfigError, match="not an ALE id"):
        probe_spaces("ALE/NoSuchGame-v5")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"vectorization": "sync"}, "env.vectorization"),
        ({"kwargs": {"frameskip": 2}}, "env.kwargs"),
        ({"max_episode_steps": 1000}, "max_episode_frames"),
        ({"normalize_obs": True}, "env.normalize_obs"),
    ],
)
def test_options_that_do_not_apply_to_atari_are_errors(options, match):
    with pytest.raises(ConfigError, match=match):
        make(EnvConfig(id="ALE/Pong-v5", num_envs=1, **options))


def test_atari_section_on_another_id_is_an_error():
    with pytest.raises(ConfigError, match="env.atari"):
        make(EnvConfig(id="CartPole-v1", num_envs=1, atari={"frame_stack": 2}))


def test_atari_options_load_from_overrides():
    from rlfoundry.config.load import load_config

    cfg = load_config("ALE/Breakout-v5:ppo", ["env.atari.frame_stack=2", "env.atari.episodic_life=false"])
    assert cfg.env.atari.frame_stack == 2 and cfg.env.atari.episodic_life is False
    with pytest.raises(ConfigError, match="did you mean 'frame_stack'"):
        load_config("ALE/Breakout-v5:ppo", ["env.atari.frame_stak=2"])
    with pytest.raises(ConfigError, match="max_episode_frames"):
        load_config("ALE/Breakout-v5:ppo", ["env.max_episode_steps=1000"])


def test_atari_config_checks_values():
    with pytest.raises(ValueError, match="repeat_action_probability"):
        AtariConfig(repeat_action_probability=1.5)
    with pytest.raises(ValueError, match="frame_stak"):
        AtariConfig(frame_stak=2)
