"""One episode of an agent as an mp4: what `rlfoundry eval --video` and evaluation during training write.

The episode runs in its own one-env evaluation vector env (`rlfoundry.envs.build` with `render_mode="rgb_array"`),
so it gets the same wrappers as evaluation: the observation statistics are set and frozen, rewards are the true
ones. Frames are streamed to ffmpeg (libx264, yuv420p) as they are rendered, never held in memory, into a
temporary file beside the target that is renamed into place at the end: a killed write leaves no broken mp4
under the final name.

ALE ids are recorded on the single Atari backend whatever backend the run trained on (ale_py's AtariVectorEnv does
not render; see `rlfoundry.envs.atari`), and the episode is a whole game, all lives: a life loss ends the learner's
episode, not the video. After training on the vector backend, the video's game is not one that `evaluate` played.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlfoundry import envs as envs_lib
from rlfoundry.algos.base import Memory
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import atari, check_renders, env_seed

if TYPE_CHECKING:
    from gymnasium.vector import VectorEnv
    from imageio.core.format import Format

DEFAULT_FPS = 30


def video_frame(frame: Any, env_id: str) -> np.ndarray:
    """A rendered frame as uint8 [H, W, 3] with even H and W (libx264 with yuv420p needs both even): grey frames
    become RGB, an alpha channel is dropped, an odd edge is padded by one black row or column."""
    frame = None if frame is None else np.asarray(frame)
    if frame is None or frame.dtype != np.uint8 or frame.ndim not in (2, 3):
        shown = "None" if frame is None else f"{frame.dtype} {list(frame.shape)}"
        raise ConfigError(f"env.id = '{env_id}': render() gave {shown}, not a uint8 image, so no video")
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    elif frame.shape[2] in (1, 4):
        frame = np.repeat(frame, 3, axis=2) if frame.shape[2] == 1 else frame[:, :, :3]
    elif frame.shape[2] != 3:
        raise ConfigError(f"env.id = '{env_id}': render() gave {frame.shape[2]} channels, so no video")
    height, width = frame.shape[:2]
    if height % 2 or width % 2:
        frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)))
    return frame


class Mp4:
    """An mp4 written frame by frame (libx264, yuv420p) into a temporary file beside `path`, renamed into place when
    the `with` block ends without an error and removed when it fails: no broken mp4 ever has the final name."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps, self.frames = Path(path), fps, 0
        self.tmp = self.path.with_name(f".tmp-{self.path.stem}-{os.getpid()}.mp4")  # ffmpeg reads the suffix
        self.writer: Format.Writer | None = None

    def __enter__(self) -> Mp4:
        import imageio.v2 as imageio  # imports ffmpeg plumbing: only when a video is written

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = imageio.get_writer(self.tmp, format="FFMPEG", mode="I", fps=self.fps, codec="libx264",
                                         pixelformat="yuv420p", macro_block_size=1,  # video_frame makes sizes even
                                         ffmpeg_log_level="error")
        return self

    def _open(self) -> Format.Writer:
        assert self.writer is not None, "Mp4 is written inside its `with` block"
        return self.writer

    def append(self, frame: np.ndarray) -> None:
        self._open().append_data(frame)
        self.frames += 1

    def __exit__(self, kind, value, traceback) -> None:
        try:
            if kind is None:
                self._open().close()
                os.replace(self.tmp, self.path)
            else:
                with contextlib.suppress(Exception):
                    self._open().close()
        finally:
            self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def offscreen() -> Iterator[None]:
    """pygame-rendered envs (classic control, Box2D) initialise an SDL display even for rgb_array frames; on a
    machine without one, SDL prints "error: XDG_RUNTIME_DIR is invalid" to the terminal. The dummy video driver
    draws off-screen and says nothing. A driver the user chose is kept."""
    if "SDL_VIDEODRIVER" in os.environ:
        yield
        return
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    try:
        yield
    finally:
        os.environ.pop("SDL_VIDEODRIVER", None)


def _first_frame(envs: VectorEnv) -> Any:
    """The first env's rendered frame (`video_frame` checks it)."""
    frames = envs.render()
    assert frames is not None, "a vector env made with render_mode rgb_array renders"
    return frames[0]


def record_video(agent, env_cfg, obs_stats: tuple[np.ndarray, np.ndarray, float] | None, path: Path, seed: int,
                 deterministic: bool = True, max_steps: int = 10_000, fps: int | None = None) -> dict[str, Any]:
    """Play one episode of `agent` in the env of `env_cfg` (an `EnvConfig`) and write it to `path` as an mp4.

    `obs_stats` is the (mean, var, count) of observation normalisation (`rlfoundry.envs.obs_stats` of the
    training envs, or a checkpoint's); leave it None when observations are not normalised. The env is reset with
    `env_seed(seed)` as `evaluate(..., seed)` resets its envs, so the video shows the episode a one-env
    `evaluate` with the same seed counts (the first sub-env's, for sync and async vector envs). The episode stops early after `max_steps`
    steps. `fps` defaults to the env's `render_fps`, else 30.

    Returns {"path", "return", "length", "frames", "complete"}: `frames` is `length + 1` (the reset frame, then
    one per step), `complete` is False when `max_steps` cut the episode short.
    """
    check_renders(env_cfg.id)
    with offscreen():
        # one env needs no worker process: an `async` config is built in-process here
        envs, _ = envs_lib.build(env_cfg, 1, evaluation=True, render_mode="rgb_array",
                                vectorization="sync" if env_cfg.vectorization == "async" else None)
        try:
            if obs_stats is not None:
                envs_lib.set_obs_stats(envs, *obs_stats)
            obs, _ = envs.reset(seed=env_seed(seed))
            first = video_frame(_first_frame(envs), env_cfg.id)
            with Mp4(path, fps or envs.metadata.get("render_fps") or DEFAULT_FPS) as video:
                video.append(first)
                length, total, complete = 0, 0.0, False
                memory = Memory()
                while length < max_steps:
                    obs, reward, terminated, truncated, info = envs.step(agent.predict(obs, deterministic, memory))
                    memory.ended(terminated | truncated)
                    length += 1
                    total += float(reward[0])
                    video.append(video_frame(_first_frame(envs), env_cfg.id))
                    ended = terminated[0] or truncated[0]
                    if atari.is_atari(env_cfg.id):  # the game, not the learner's episode (one life)
                        ended = "_episode" in info and info["_episode"][0]
                    if ended:
                        complete = True
                        if "_episode" in info and info["_episode"][0]:  # the true return where it is recorded
                            total = float(info["episode"]["r"][0])
                        break
        finally:
            envs.close()
    return {"path": video.path, "return": total, "length": length, "frames": video.frames, "complete": complete}
