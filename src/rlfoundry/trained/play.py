"""Watch a trained policy: episodes in a window, into mp4s, or as text (`rlfoundry play`).

Each episode runs in one env built with the run's preprocessing (`Policy.make_env`), reset with
`env_seed(seed + i)`; the policy acts with its frozen normalisation and carries its memory through the episode. An
ALE episode is a whole game (all lives).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import declared_render_modes, env_seed
from rlfoundry.run.video import DEFAULT_FPS, Mp4, offscreen, video_frame
from rlfoundry.trained.policy import Policy

RENDERS = ("human", "video", "ansi", "none")


def has_display() -> bool:
    """Whether a window can open: always on macOS and Windows, on Linux with an X or Wayland display."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def choose_render(env_id: str, asked: str | None) -> str:
    """`asked`, checked against what the env renders; without it: a window where a display exists, else mp4s, else
    text, else none (returns only)."""
    modes = declared_render_modes(env_id) or []
    offered = {"human": "human", "video": "rgb_array", "ansi": "ansi"}
    if asked is not None:
        if asked not in RENDERS:
            raise ConfigError(f"--render {asked}: allowed: {', '.join(RENDERS)}")
        if asked != "none" and offered[asked] not in modes:
            raise ConfigError(f"--render {asked}: {env_id} renders {modes or 'nothing'} (allowed here: "
                              f"{', '.join([k for k, v in offered.items() if v in modes] + ['none'])})")
        if asked == "human" and not has_display():
            raise ConfigError("--render human: no display here (DISPLAY is not set); use --render video")
        return asked
    for choice in ("human", "video", "ansi"):
        if offered[choice] in modes and (choice != "human" or has_display()):
            return choice
    return "none"


def play(policy: Policy, episodes: int, render: str, seed: int, video_dir: Path | None = None,
         deterministic: bool = True, max_steps: int = 100_000,
         report: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Play `episodes` episodes; returns one dict per episode ({"episode", "return", "length", "video"}), each also
    passed to `report` as it ends. `video` renders into `video_dir/play_step<step>_ep<i>.mp4`; `ansi` prints each
    frame; `human` opens the env's window."""
    results = []
    mode = {"human": "human", "video": "rgb_array", "ansi": "ansi", "none": None}[render]
    with offscreen() if render != "human" else contextlib.nullcontext():
        env = policy.make_env(render_mode=mode)
        try:
            for i in range(episodes):
                path = None
                if render == "video":
                    assert video_dir is not None, "render video writes into video_dir"
                    path = Path(video_dir) / f"play_step{policy.step}_ep{i}.mp4"
                result = _episode(policy, env, render, seed + i, path, deterministic, max_steps)
                result["episode"] = i
                results.append(result)
                if report is not None:
                    report(result)
        finally:
            env.close()
    return results


def _episode(policy: Policy, env: gym.Env, render: str, seed: int, path: Path | None, deterministic: bool,
             max_steps: int) -> dict[str, Any]:
    obs, _ = env.reset(seed=env_seed(seed))
    state, total, length = None, 0.0, 0
    video = Mp4(path, env.metadata.get("render_fps") or DEFAULT_FPS) if path is not None else None
    with video if video is not None else contextlib.nullcontext():
        while True:
            if video is not None:
                video.append(video_frame(env.render(), policy.cfg.env.id))
            elif render == "ansi":
                print(env.render(), flush=True)
            if length >= max_steps:
                break
            action, state = policy.act(obs, state, deterministic)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            length += 1
            if terminated or truncated:
                if video is not None:
                    video.append(video_frame(env.render(), policy.cfg.env.id))
                elif render == "ansi":
                    print(env.render(), flush=True)
                break
    return {"return": total, "length": length, "video": None if video is None else video.path,
            "complete": length < max_steps}
