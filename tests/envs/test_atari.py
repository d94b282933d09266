"""Atari (`ALE/*-v5`) through `rlfoundry.envs.make`: spaces, seeding, `env.atari` options, and the episode
accounting of `AtariEpisodes` (clipped rewards and life-loss terminations for the learner, whole unclipped games
in the statistics), the same contract on both backends; the single backend's frames against the vector backend's,
its captured state, and its videos.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import vector as vw

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import AtariConfig, EnvConfig
from rlfoundry.envs import build, find_wrapper, probe_spaces
from rlfoundry.envs.atari import AtariEpisodes
from rlfoundry.envs.state import capture, restore

pytest.importorskip("ale_py")

BACKENDS = ["vector", "single"]


def random_actions(envs, steps: int, seed: int):
    """Reset with `seed` and yield each step's results under uniformly random actions."""
    envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n = envs.single_action_space.n
    for _ in range(steps):
        yield envs.step(rng.integers(0, n, size=envs.num_envs))


# ---------------------------------------------------------------- spaces and the step contract


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("env_id", "num_actions"), [("ALE/Breakout-v5", 4), ("ALE/Pong-v5", 6)])
def test_builds_and_steps(build, env_id, num_actions, backend):
    envs, spec = build(env_id, num_envs=3, backend=backend)
    assert spec.vectorization == "atari" and spec.num_envs == envs.num_envs == 3
    assert spec.observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert spec.action_space == spaces.Discrete(num_actions) and spec.discrete
    assert find_wrapper(envs, AtariEpisodes) is not None
    assert find_wrapper(envs, vw.RecordEpisodeStatistics) is None  # AtariEpisodes reports whole games itself
    obs, info = envs.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (3, 4, 84, 84)
    assert {"lives", "episode_frame_number"} <= info.keys()
    for obs, rewards, terminated, truncated, _ in random_actions(envs, 20, seed=0):
        assert obs.dtype == np.uint8 and obs.shape == (3, 4, 84, 84)
        assert rewards.dtype == np.float32 and rewards.shape == (3,)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and terminated.shape == (3,)
    assert obs.any()  # real frames, not the zero padding of a fresh stack


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_spaces_match_make(build, backend):
    _, spec = build("ALE/Pong-v5", backend=backend)
    assert probe_spaces("ALE/Pong-v5") == (spec.observation_space, spec.action_space)
    cfg = EnvConfig(id="ALE/Pong-v5", atari={"frame_stack": 2, "full_action_space": True, "backend": backend})
    assert probe_spaces("ALE/Pong-v5", env_cfg=cfg) == (spaces.Box(0, 255, (2, 84, 84), np.uint8), spaces.Discrete(18))


# ---------------------------------------------------------------- seeding


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_observations(build, backend):
    def frames(seed: int) -> np.ndarray:
        envs, _ = build(backend=backend)  # sticky actions (0.25) draw from the seeded emulator RNG
        return np.stack([obs for obs, *_ in random_actions(envs, 60, seed=seed)])

    a, b = frames(3), frames(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(frames(4), a)


# ---------------------------------------------------------------- env.atari options


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_stack_img_size_and_action_space(build, backend):
    envs, spec = build(frame_stack=2, img_size=64, full_action_space=True, backend=backend)
    assert spec.obs_shape == (2, 64, 64) and spec.action_space == spaces.Discrete(18)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 2, 64, 64) and obs.dtype == np.uint8


# SimPLe's observation (Kaiser et al. 2019, arXiv:1903.00374): 105x80 colour frames, 4 stacked, no max-pool
SIMPLE_FRAMES = {"grayscale": False, "img_size": [105, 80], "max_pool": False, "noop_max": 8,
                 "repeat_action_probability": 0.0, "episodic_life": False}


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_square_colour_frames(build, backend):
    envs, spec = build("ALE/Pong-v5", backend=backend, **SIMPLE_FRAMES)
    assert spec.observation_space == spaces.Box(0, 255, (12, 105, 80), np.uint8)  # [frame_stack * RGB, H, W]
    cfg = EnvConfig(id="ALE/Pong-v5", atari={**SIMPLE_FRAMES, "backend": backend})
    assert probe_spaces("ALE/Pong-v5", env_cfg=cfg)[0] == spec.observation_space
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 12, 105, 80) and obs.dtype == np.uint8
    for obs, *_ in random_actions(envs, 5, seed=0):
        assert obs.shape == (2, 12, 105, 80)
    assert obs[:, -3:].any()


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


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_counts_emulator_frames(build, backend):
    envs, _ = build("ALE/Pong-v5", max_episode_frames=400, backend=backend)  # 100 steps at frame_skip 4
    truncated_at = [t for t, (*_, truncated, _) in enumerate(random_actions(envs, 110, seed=0)) if truncated.all()]
    assert truncated_at == [99]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_action_is_fire_when_the_game_has_it(build, backend):
    assert find_wrapper(build("ALE/Breakout-v5", backend=backend)[0], AtariEpisodes).reset_action == 1  # FIRE
    no_fire = build("ALE/Breakout-v5", fire_reset=False, backend=backend)[0]
    assert find_wrapper(no_fire, AtariEpisodes).reset_action == 0  # NOOP
    pacman = build("ALE/MsPacman-v5", backend=backend)[0]
    assert find_wrapper(pacman, AtariEpisodes).reset_action == 0  # no FIRE in MsPacman


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


@pytest.mark.parametrize("backend", BACKENDS)
def test_life_loss_is_not_an_episode_end(build, backend):
    envs, _ = build("ALE/Breakout-v5", num_envs=4, backend=backend)  # 5 lives; random play loses one every ~20 steps
    games, terminations, _ = play(envs, 300, seed=1)
    assert len(games) >= 4
    assert all(terms == 5 for _, _, terms, _ in games)  # 4 life losses and the game over, one game
    assert terminations >= 5 * len(games)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_episodic_life_terminations_are_games(build, backend):
    envs, _ = build("ALE/Breakout-v5", num_envs=4, episodic_life=False, reward_clipping=False, backend=backend)
    games, terminations, _ = play(envs, 300, seed=1)
    assert len(games) >= 4 and terminations == len(games)  # only game over terminates
    for score, _, _, learner_return in games:
        assert score == learner_return  # nothing clipped or zeroed: the learner saw the whole score


@pytest.mark.parametrize("backend", BACKENDS)
def test_learner_rewards_are_clipped_and_scores_are_not(build, backend):
    # SpaceInvaders scores 5-30 points per alien, so the learner's clipped rewards undercount the score.
    envs, _ = build("ALE/SpaceInvaders-v5", num_envs=4, backend=backend)
    games, _, rewards_seen = play(envs, 600, seed=0)
    assert rewards_seen == {0.0, 1.0}
    assert len(games) >= 2 and all(score % 5 == 0 for score, *_ in games)
    assert all(score >= learner_return for score, _, _, learner_return in games)
    assert any(score > learner_return + 10 for score, _, _, learner_return in games)


# ---------------------------------------------------------------- the single backend


def trajectory(envs, steps: int, seed: int) -> list[tuple]:
    """Everything the rest of rlfoundry sees of `steps` random steps: observations, rewards, flags, games."""
    out = []
    for obs, rewards, terminated, truncated, info in random_actions(envs, steps, seed):
        games = (info["_episode"], info["episode"]["r"], info["episode"]["l"]) if "_episode" in info else ()
        out.append((obs.copy(), rewards, terminated, truncated, *games, info["lives"], info["episode_frame_number"]))
    return out


def assert_same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b)):
        assert len(x) == len(y), f"step {t}: a game ended in one only"
        for u, v in zip(x, y):
            assert np.array_equal(u, v) and np.asarray(u).dtype == np.asarray(v).dtype, f"step {t}"


@pytest.mark.parametrize(("env_id", "options"), [
    ("ALE/Breakout-v5", {}),  # life losses, game overs (FIRE reset), reset rows
    ("ALE/Pong-v5", {"grayscale": False, "max_episode_frames": 400}),  # colour, the time limit
    ("ALE/Breakout-v5", {"frame_skip": 3, "episodic_life": False, "reward_clipping": False, "img_size": 64}),
    ("ALE/Breakout-v5", {**SIMPLE_FRAMES, "noop_max": 0}),  # non-square colour frames, the last frame unpooled
])
def test_single_backend_matches_the_vector_backend_without_randomness(build, env_id, options):
    """The backends' RNG streams differ, so with no sticky actions and no no-ops both must give identical steps:
    the same frames (the same INTER_AREA resize), rewards, terminations, truncations and games."""
    options = {"repeat_action_probability": 0.0, "noop_max": 0, **options}
    vector, _ = build(env_id, **options)
    single, _ = build(env_id, backend="single", **options)
    a, b = trajectory(vector, 400, seed=2), trajectory(single, 400, seed=2)
    assert sum(len(x) > 6 for x in a) >= 2  # games ended (or were cut) within the steps
    assert_same(a, b)


def test_single_backend_state_restores_exactly(build):
    """Capture, step on, restore, step on with the same actions: the same steps again. Sticky actions (0.25) need
    the env's RNG and the action being repeated, no-ops after each game the RNG, the emulator its own state: all are
    in the captured state (the restore goes back in time, so nothing left over from the first pass may count)."""
    envs, _ = build("ALE/Breakout-v5", num_envs=3, backend="single")
    for _ in random_actions(envs, 100, seed=4):
        pass
    state, arrays, why = capture(envs)
    assert why is None
    rng = np.random.default_rng(9)
    actions = rng.integers(0, 4, size=(300, 3))
    first = [envs.step(a) for a in actions]
    restore(envs, state, arrays)
    again = [envs.step(a) for a in actions]
    games = 0
    for (oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib) in zip(first, again):
        for x, y in ((oa, ob), (ra, rb), (ta, tb), (ua, ub), (ia["lives"], ib["lives"])):
            assert np.array_equal(x, y)
        assert ("_episode" in ia) == ("_episode" in ib)
        if "_episode" in ia:
            games += int(ia["_episode"].sum())
            assert np.array_equal(ia["episode"]["r"], ib["episode"]["r"])
    assert games >= 2  # new games started after the capture, so their no-ops came from the restored RNG


class Noop:
    def predict(self, obs, *args):
        return np.zeros(len(obs), dtype=np.int64)


def test_videos_render_on_the_single_backend_and_show_whole_games(tmp_path):
    from rlfoundry.run.video import record_video

    envs, _ = build(EnvConfig(id="ALE/Breakout-v5", num_envs=1), render_mode="rgb_array")  # a vector-backend config
    try:
        envs.reset(seed=0)
        assert envs.render()[0].shape == (210, 160, 3)  # the single backend, which renders
    finally:
        envs.close()
    # Breakout without moving: FIRE starts each of the 5 lives, the paddle misses, and the video goes on to game over
    result = record_video(Noop(), EnvConfig(id="ALE/Breakout-v5", atari={"max_episode_frames": 20_000}), None,
                          tmp_path / "breakout.mp4", seed=0)
    assert result["complete"] and result["path"].stat().st_size > 0 and result["frames"] == result["length"] + 1
    assert result["length"] > 100  # all five lives, not the first


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
        build(EnvConfig(id="ALE/Breakot-v5"))
    with pytest.raises(ConfigError, match="not an ALE id"):
        probe_spaces("ALE/NoSuchGame-v5")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"vectorization": "sync"}, "env.vectorization"),
        ({"kwargs": {"frameskip": 2}}, "env.kwargs"),
        ({"max_episode_steps": 1000}, "max_episode_frames"),
        ({"normalize_obs": True}, "env.normalize_obs"),
        ({"atari": {"backend": "single", "num_threads": 2}}, "num_threads"),
    ],
)
def test_options_that_do_not_apply_to_atari_are_errors(options, match):
    with pytest.raises(ConfigError, match=match):
        build(EnvConfig(id="ALE/Pong-v5", num_envs=1, **options))


def test_atari_section_on_another_id_is_an_error():
    with pytest.raises(ConfigError, match="env.atari"):
        build(EnvConfig(id="CartPole-v1", num_envs=1, atari={"frame_stack": 2}))


def test_atari_options_load_from_overrides():
    from rlfoundry.experiment.load import load_config

    cfg = load_config("ALE/Breakout-v5:ppo", ["env.atari.frame_stack=2", "env.atari.episodic_life=false"])
    assert cfg.env.atari.frame_stack == 2 and cfg.env.atari.episodic_life is False
    assert load_config("ALE/Breakout-v5:ppo", ["env.atari.backend=single"]).env.atari.backend == "single"
    with pytest.raises(ConfigError, match="backend"):
        load_config("ALE/Breakout-v5:ppo", ["env.atari.backend=fast"])
    with pytest.raises(ConfigError, match="did you mean 'frame_stack'"):
        load_config("ALE/Breakout-v5:ppo", ["env.atari.frame_stak=2"])
    with pytest.raises(ConfigError, match="max_episode_frames"):
        load_config("ALE/Breakout-v5:ppo", ["env.max_episode_steps=1000"])


def test_atari_config_checks_values():
    with pytest.raises(ValueError, match="repeat_action_probability"):
        AtariConfig(repeat_action_probability=1.5)
    with pytest.raises(ValueError, match="frame_stak"):
        AtariConfig(frame_stak=2)


def test_img_size_is_square_or_height_and_width():
    assert AtariConfig().frame_size == (84, 84) and AtariConfig(img_size=64).frame_size == (64, 64)
    assert AtariConfig(img_size=[105, 80]).img_size == (105, 80) == AtariConfig(img_size=(105, 80)).frame_size


@pytest.mark.parametrize("img_size", [[105], [105, 80, 3], [105, 0], [-1, 80], 0, -84, [105.5, 80], "84", True])
def test_bad_img_size_is_an_error_naming_the_key(img_size):
    import json

    from pydantic import ValidationError

    from rlfoundry.experiment.load import load_config

    with pytest.raises(ValidationError, match="img_size"):
        AtariConfig(img_size=img_size)
    with pytest.raises(ConfigError, match=r"env\.atari\.img_size = .*\[height, width\]"):
        load_config("ALE/Breakout-v5:ppo", [f"env.atari.img_size={json.dumps(img_size)}"])


def test_non_square_img_size_round_trips_through_the_run_config(tmp_path):
    """A run writes its resolved config as YAML (lists, no tuples) and a resume reads it back: the same config."""
    from rlfoundry.experiment.load import load_config
    from rlfoundry.records.rundir import write_yaml
    from rlfoundry.run.restore import run_config

    cfg = load_config("ALE/Breakout-v5:ppo", ["env.atari.img_size=[105, 80]", "env.atari.grayscale=false"])
    assert cfg.env.atari.img_size == (105, 80)
    write_yaml(tmp_path / "config.yaml", cfg.model_dump(mode="json", by_alias=True))
    assert "img_size: [105, 80]" in (tmp_path / "config.yaml").read_text()
    again = run_config(tmp_path)
    assert again == cfg and again.env.atari.frame_size == (105, 80)


def test_single_backend_wrapper_passes_check_env_and_rebuilds_from_its_spec():
    """`AtariFrames` records its constructor arguments: `env.spec` works, Gymnasium's `check_env` passes, and
    `gym.make(env.spec)` rebuilds the same preprocessing."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    from rlfoundry.envs import register_optional_families
    from rlfoundry.envs.atari import AtariFrames

    register_optional_families()
    env = AtariFrames(gym.make("ALE/Pong-v5"), AtariConfig(img_size=[105, 80], grayscale=False))
    assert tuple(env.spec.additional_wrappers[-1].kwargs["atari_cfg"]["img_size"]) == (105, 80)
    with pytest.warns(UserWarning, match="different from the unwrapped"):  # checked as the wrapper it is
        check_env(env, skip_render_check=True)
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, AtariFrames) and rebuilt.observation_space == env.observation_space == \
        spaces.Box(0, 255, (4, 105, 80, 3), np.uint8)
    first, _ = env.reset(seed=4)
    again, _ = rebuilt.reset(seed=4)
    assert np.array_equal(first, again)


# ---------------------------------------------------------------- closing frees the emulators


@pytest.mark.parametrize("backend", BACKENDS)
def test_closing_frees_the_emulators(build, backend):
    """`close()` drops each ALEInterface / ALEVectorInterface at once, whoever still holds the env object."""
    envs, _ = build(num_envs=2, backend=backend)
    base = envs.unwrapped
    owners = [env.unwrapped for env in base.envs] if backend == "single" else [base]
    assert all("ale" in vars(owner) for owner in owners)
    envs.close()
    assert not any("ale" in vars(owner) for owner in owners)
    envs.close()  # a second close is harmless


def test_closing_one_game_frees_its_emulator():
    from rlfoundry.envs import make_single

    env = make_single(EnvConfig(id="ALE/Breakout-v5"))
    base = env.unwrapped
    env.reset(seed=0)
    env.close()
    assert "ale" not in vars(base)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_training_run_ends_without_nanobind_leak_messages(tmp_path, backend):
    """The `rlfoundry` command freezes the garbage collector on its way out, so envs that the agent's reference cycles
    hold are never collected: unless closing frees the emulators, ale_py's bindings print "nanobind: leaked N
    instances" (then the leaked types and functions, ~25 lines) at exit, for the training and evaluation envs."""
    import subprocess
    import sys

    overrides = [f"env.atari.backend={backend}", "env.num_envs=2", "algo.num_steps=16", "algo.minibatch_size=32",
                 "algo.update_epochs=1", "env.atari.img_size=36", "network.encoder=impala_cnn",
                 "network.impala_channels=[4]", "network.hidden_sizes=[16]", "eval.at_end=false", "eval.every_steps=0",
                 "eval.episodes=1", "logging.progress=false", "logging.tensorboard=false", "train.device=cpu"]
    proc = subprocess.run([sys.executable, "-m", "rlfoundry.cli", "train", "ALE/Pong-v5:ppo", "--total-timesteps", "32",
                           "--run-dir", str(tmp_path / "run"), *overrides],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "32 steps in" in proc.stdout  # trained, with its evaluation envs open beside the training envs
    assert "leaked" not in proc.stderr, proc.stderr
