"""record_video: mp4s of one episode from real tiny runs (discrete and continuous), frame handling, the envs
that cannot be filmed, and a failed write that leaves nothing under the final name."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import obs_stats
from rlfoundry.experiment.load import load_config
from rlfoundry.run.evaluate import evaluate
from rlfoundry.run.video import record_video, video_frame
from rlfoundry.trained.policy import from_run

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=2048",
        "eval.every_steps=1024", "eval.episodes=2"]
RUNS = {
    "CartPole-v1": ("CartPole-v1:ppo", []),
    # observation normalisation on, so the video must use the checkpoint's statistics to act like evaluation
    "Pendulum-v1": ("Pendulum-v1:ppo", ["algo.num_steps=256", "env.normalize_obs=true"]),
}


def read_video(path: Path) -> tuple[int, tuple[int, ...], float]:
    """(frame count, frame shape, fps) of an mp4, decoded frame by frame (a whole video may not fit in memory)."""
    with imageio.get_reader(path, format="FFMPEG") as reader:
        fps = reader.get_meta_data()["fps"]
        shapes = [frame.shape for frame in reader]
    assert len(set(shapes)) == 1
    return len(shapes), shapes[0], fps


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request, tmp_path_factory) -> tuple[str, Path]:
    spec, extra = RUNS[request.param]
    run_dir, _ = rlfoundry.train(spec, [*TINY, *extra], tmp_path_factory.mktemp("video") / "run")
    return request.param, run_dir


class Constant:
    """An agent that always takes the same action (for envs where what it does does not matter)."""

    def __init__(self, action):
        self.action = np.asarray(action)

    def predict(self, obs, deterministic=True, memory=None):
        return np.repeat(self.action[None], len(obs), axis=0)


class Balance:
    """Keeps CartPole up for the full 500 steps: push the cart towards where the pole falls."""

    def predict(self, obs, deterministic=True, memory=None):
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_video_of_a_trained_agent_is_the_episode_evaluation_sees(run, tmp_path):
    env_id, run_dir = run
    policy = from_run(run_dir, "last")
    envs = policy.vector_env(1)
    stats = obs_stats(envs)
    try:
        returns, lengths = evaluate(policy.agent, envs, 1, seed=7)
    finally:
        envs.close()
    assert (stats is not None) == policy.cfg.env.normalize_obs

    result = record_video(policy.agent, policy.cfg.env, stats, tmp_path / "videos" / "ep.mp4", seed=7)
    # one env reset with the same seed and the same frozen statistics: evaluate's first episode, exactly
    assert result["return"] == pytest.approx(returns[0])
    assert result["length"] == lengths[0]
    assert result["complete"] and result["frames"] == result["length"] + 1
    assert result["path"] == tmp_path / "videos" / "ep.mp4"
    count, shape, fps = read_video(result["path"])
    assert count == result["frames"]
    assert shape == {"CartPole-v1": (400, 600, 3), "Pendulum-v1": (500, 500, 3)}[env_id]
    assert fps == {"CartPole-v1": 50, "Pendulum-v1": 30}[env_id]  # the env's render_fps
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == ["ep.mp4"]  # no temporary file left


def test_full_cartpole_episode_and_the_max_steps_cut(tmp_path):
    env_cfg = load_config("CartPole-v1:ppo").env
    full = record_video(Balance(), env_cfg, None, tmp_path / "full.mp4", seed=0, fps=25)
    assert (full["return"], full["length"], full["frames"], full["complete"]) == (500.0, 500, 501, True)
    assert read_video(full["path"])[::2] == (501, 25)

    cut = record_video(Balance(), env_cfg, None, tmp_path / "cut.mp4", seed=0, max_steps=10)
    assert (cut["return"], cut["length"], cut["frames"], cut["complete"]) == (10.0, 10, 11, False)
    assert read_video(cut["path"])[0] == 11


def test_minigrid_video(tmp_path):
    pytest.importorskip("minigrid")
    env_cfg = load_config("MiniGrid-Empty-5x5-v0:ppo").env
    result = record_video(Constant(0), env_cfg, None, tmp_path / "grid.mp4", seed=0)  # turns left until time-out
    assert result["complete"] and result["return"] == 0.0
    count, shape, _ = read_video(result["path"])
    assert count == result["length"] + 1 and shape[2] == 3 and shape[0] % 2 == 0 and shape[1] % 2 == 0


def test_envs_without_rgb_frames_are_clear_errors(tmp_path):  # ALE ids: tests/envs/test_atari.py
    env_cfg = load_config("CartPole-v1:ppo").env
    with pytest.raises(ConfigError, match="Bandit-TwoArm-v0.*cannot record a video.*not 'rgb_array'"):
        record_video(Constant(0), env_cfg.model_copy(update={"id": "Bandit-TwoArm-v0"}), None, tmp_path / "b.mp4", 0)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_video_and_leaves_no_temporary_file(tmp_path):
    class Crashes(Balance):
        calls = 0

        def predict(self, obs, deterministic=True, memory=None):
            self.calls += 1
            if self.calls == 20:
                raise RuntimeError("boom")
            return super().predict(obs, deterministic)

    path = tmp_path / "ep.mp4"
    path.write_bytes(b"the previous video")
    with pytest.raises(RuntimeError, match="boom"):
        record_video(Crashes(), load_config("CartPole-v1:ppo").env, None, path, seed=0)
    assert path.read_bytes() == b"the previous video"
    assert [p.name for p in tmp_path.iterdir()] == ["ep.mp4"]


def test_video_frame_makes_uint8_rgb_with_even_sides():
    odd = np.full((5, 7, 3), 200, np.uint8)
    padded = video_frame(odd, "X")
    assert padded.shape == (6, 8, 3) and padded.dtype == np.uint8
    assert (padded[:5, :7] == 200).all() and (padded[5] == 0).all() and (padded[:, 7] == 0).all()
    assert video_frame(np.zeros((4, 6), np.uint8), "X").shape == (4, 6, 3)  # grey
    rgba = np.arange(4 * 6 * 4, dtype=np.uint8).reshape(4, 6, 4)
    assert (video_frame(rgba, "X") == rgba[:, :, :3]).all()
    assert video_frame(np.zeros((4, 6, 3), np.uint8), "X").shape == (4, 6, 3)
    for bad in (None, np.zeros((4, 6, 3), np.float32), np.zeros((4, 6, 2), np.uint8), np.zeros(4, np.uint8)):
        with pytest.raises(ConfigError, match="env.id = 'X'.*no video"):
            video_frame(bad, "X")
