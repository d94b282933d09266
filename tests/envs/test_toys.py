"""The toy pixel games of `rlfoundry.envs.toys`: Catch's rules read off its frames, its frame layout and seeding,
and the id through `rlfoundry.envs.make` and `rlfoundry train`."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, is_image_space, probe_spaces, register_optional_families
from rlfoundry.envs.toys import BALL, PADDLE, RENDER_SCALE, CatchEnv

CATCH = "rlfoundry/Catch-v0"
LEFT, STAY, RIGHT = 0, 1, 2


def catch(**kwargs) -> gym.Env:
    register_optional_families()
    return gym.make(CATCH, disable_env_checker=True, **kwargs).unwrapped


def latest(obs: np.ndarray) -> np.ndarray:
    """The newest frame of an observation, [H, W, RGB]."""
    return obs[-3:].transpose(1, 2, 0)


def ball(obs: np.ndarray) -> tuple[int, int]:
    """(row, column) of the ball in the newest frame: exactly one pixel has its colour."""
    (row, col), = np.argwhere((latest(obs) == BALL).all(-1))
    return int(row), int(col)


def paddle_centre(obs: np.ndarray) -> float:
    return float(np.flatnonzero((latest(obs)[-1] == PADDLE).all(-1)).mean())


def play(env: gym.Env, policy, seed: int) -> tuple[float, list[tuple]]:
    """One episode; returns its return and, per step, (observation, reward, terminated)."""
    obs, _ = env.reset(seed=seed)
    steps, total, terminated = [], 0.0, False
    while not terminated:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        assert not truncated
        steps.append((obs, reward, terminated))
        total += reward
    return total, steps


def random_policy(seed: int):
    rng = np.random.default_rng(seed)
    return lambda obs: int(rng.integers(0, 3))


def track(obs: np.ndarray) -> int:
    """Move the paddle's centre towards the ball's column."""
    return int(np.sign(ball(obs)[1] - paddle_centre(obs))) + 1


def test_gymnasium_env_checker_passes():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(catch(render_mode="rgb_array"))
        check_env(catch())
        check_env(catch(height=6, width=4, frame_stack=1, balls=2))
    assert not [str(w.message) for w in caught]


def test_frames_are_rgb_channel_first_oldest_first_with_blank_padding():
    env = catch(render_mode="rgb_array")
    assert env.observation_space == spaces.Box(0, 255, (12, 20, 16), np.uint8)
    assert env.action_space == spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (12, 20, 16)
    assert not obs[:9].any()  # three blank frames before the reset frame
    row, col = ball(obs)
    assert row == 0 and obs[9:12, 0, col].tolist() == BALL.tolist()  # frame-major, then R, G, B
    assert np.array_equal(np.flatnonzero(obs[9:12, -1].any(0)), [6, 7, 8])  # the paddle, centred
    after = env.step(STAY)[0]
    assert np.array_equal(after[6:9], obs[9:12]) and not after[:6].any()  # the stack moved one frame on
    assert ball(after) == (1, col)
    frame = env.render()
    assert frame.shape == (20 * RENDER_SCALE, 16 * RENDER_SCALE, 3) and frame.dtype == np.uint8
    assert np.array_equal(frame[::RENDER_SCALE, ::RENDER_SCALE], latest(after))


@pytest.mark.parametrize("seed", range(3))
def test_reward_is_plus_one_exactly_when_the_paddle_is_under_the_ball(seed):
    """A random policy's whole episode, read from the frames: the ball falls one row per step; a landing (the ball
    in the bottom row) pays +1 when the ball covers a paddle pixel (3 lit pixels in that row) and -1 when it does
    not (4: paddle and ball); every other step pays 0; a new ball starts at the top after each landing."""
    env = catch()
    _, steps = play(env, random_policy(seed), seed)
    assert len(steps) == 10 * 20 - 1 and [t for t, (*_, done) in enumerate(steps) if done] == [len(steps) - 1]
    landings, row = 0, 0
    for obs, reward, _ in steps:
        new_row, _ = ball(obs)
        assert new_row == (row + 1 if row < 19 else 0)
        row = new_row
        if row == 19:
            landings += 1
            lit = int(latest(obs)[-1].any(-1).sum())
            assert (lit, reward) in ((3, 1.0), (4, -1.0))
        else:
            assert reward == 0.0
    assert landings == 10


def test_tracking_the_ball_catches_every_ball():
    env = catch()
    for seed in range(5):
        assert play(env, track, seed)[0] == 10.0
    small = catch(height=8, width=10, balls=5)  # 7 moves per ball: just enough to cross from wall to wall
    assert all(play(small, track, seed)[0] == 5.0 for seed in range(5))


def test_always_moving_left_catches_only_balls_in_the_three_left_columns():
    """The paddle reaches the left wall (columns 0-2) after 6 moves, before the first landing (step 19): each ball
    pays +1 if it falls in one of those 3 of 16 columns, else -1, so a return of 10 * (2 * 3/16 - 1) = -6.25 is
    expected."""
    env = catch()
    returns = []
    for seed in range(20):
        total, steps = play(env, lambda obs: LEFT, seed)
        columns = [ball(obs)[1] for obs, *_ in steps if ball(obs)[0] == 19]
        assert total == sum(1.0 if col < 3 else -1.0 for col in columns)
        returns.append(total)
    assert max(returns) < 10 and np.mean(returns) <= -4.0


def test_same_seed_same_episode():
    def observations(seed: int) -> np.ndarray:
        env = catch()
        return np.stack([obs for obs, *_ in play(env, random_policy(0), seed)[1]])

    a = observations(7)
    np.testing.assert_array_equal(a, observations(7))
    assert not np.array_equal(a, observations(8))


def test_invalid_arguments_are_errors():
    for kwargs in ({"height": 1}, {"width": 2}, {"frame_stack": 0}, {"balls": 0}, {"render_mode": "human"}):
        with pytest.raises(ValueError):
            CatchEnv(**kwargs)


def test_make_builds_it_as_an_image_env():
    observation_space, action_space = probe_spaces(CATCH)
    assert is_image_space(observation_space) and action_space == spaces.Discrete(3)
    envs, spec = build(EnvConfig(id=CATCH, num_envs=3))
    try:
        assert spec.vectorization == "sync" and envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert spec.observation_space == observation_space and spec.obs_dtype == np.uint8
        envs.reset(seed=0)
        for _ in range(199):
            obs, rewards, terminated, truncated, info = envs.step(np.ones(3, dtype=np.int64))
        assert obs.shape == (3, 12, 20, 16) and terminated.all()
        assert info["_episode"].all() and (info["episode"]["l"] == 199).all()
        assert (info["episode"]["r"] < 10).all()  # a still paddle (columns 6-8) misses some of the 30 balls
    finally:
        envs.close()


def test_state_restores_exactly():
    """The whole state is plain attributes (the frame stack, positions, counters) and `np_random`, which
    `rlfoundry.envs.state` captures for an exact resume."""
    from rlfoundry.envs.state import capture, restore

    envs, _ = build(EnvConfig(id=CATCH, num_envs=2))
    try:
        envs.reset(seed=3)
        actions = np.random.default_rng(0).integers(0, 3, size=(450, 2))  # past two episode ends: new balls drawn
        for a in actions[:150]:
            envs.step(a)
        state, arrays, why = capture(envs)
        assert why is None
        first = [envs.step(a) for a in actions[150:]]
        restore(envs, state, arrays)
        for (oa, ra, ta, *_), (ob, rb, tb, *_) in zip(first, [envs.step(a) for a in actions[150:]]):
            assert np.array_equal(oa, ob) and np.array_equal(ra, rb) and np.array_equal(ta, tb)
    finally:
        envs.close()


def test_cli_trains_ppo_on_catch_without_a_preset(tmp_path, quiet):
    """The generic defaults for image observations, with one change: their Nature CNN needs frames of at least
    36x36 (8x8 stride 4, then 4x4 stride 2), so the 20x16 frames take the IMPALA CNN."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rlfoundry.cli", "train", f"{CATCH}:ppo", "--total-timesteps", "512",
         "network.encoder=impala_cnn", "eval.episodes=2", "train.torch_threads=1", *quiet,
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["env_id"] == CATCH and summary["total_steps"] >= 512


def test_grayscale_catch_is_the_colour_game_in_luminance():
    """`grayscale=True`: one channel a frame, ball 255 and paddle 128 where the colour game draws them, the same
    balls from the same seed, and check_env's expectations."""
    colour, grey = catch(frame_stack=2), catch(frame_stack=2, grayscale=True)
    assert grey.observation_space.shape == (2, 20, 16)
    check_env(gym.make(CATCH, grayscale=True, disable_env_checker=True).unwrapped)
    rng = np.random.default_rng(0)
    obs_c, _ = colour.reset(seed=5)
    obs_g, _ = grey.reset(seed=5)
    for _ in range(60):
        frame_c, frame_g = latest(obs_c), obs_g[-1]
        assert np.array_equal(frame_g == 255, (frame_c == BALL).all(-1))
        assert np.array_equal(frame_g == 128, (frame_c == PADDLE).all(-1))
        assert set(np.unique(frame_g)) <= {0, 128, 255}
        action = int(rng.integers(0, 3))
        obs_c, reward_c, *_ = colour.step(action)
        obs_g, reward_g, *_ = grey.step(action)
        assert reward_c == reward_g
    rendered = catch(grayscale=True, render_mode="rgb_array")
    obs, _ = rendered.reset(seed=5)
    image = rendered.render()
    assert image.shape == (20 * RENDER_SCALE, 16 * RENDER_SCALE, 3)
    assert np.array_equal(image[::RENDER_SCALE, ::RENDER_SCALE], np.repeat(obs[-1][..., None], 3, axis=-1))


def test_reach_pays_the_distance_and_its_best_return_is_that_of_the_greedy_policy():
    from rlfoundry.envs.toys import ReachEnv

    env = ReachEnv(steps=10, speed=0.2)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        best, total, done = env.best_return(*obs), 0.0, False
        while not done:
            gap = obs[1] - obs[0]
            obs, reward, terminated, truncated, _ = env.step(np.array([np.clip(gap / 0.2, -1, 1)], np.float32))
            assert reward == pytest.approx(-abs(obs[1] - obs[0]), abs=1e-6)  # obs are float32
            assert not terminated
            total, done = total + reward, truncated
        assert total == pytest.approx(best, abs=1e-5)
        assert env.t == 10
