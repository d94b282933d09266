"""One episode of a trained policy, step by step, with what its networks said at each step: the table behind the
episode inspector page (`rlfoundry inspect`) and its CSV and mp4 exports.

Step t: observation o_t, action a_t = `policy.act(o_t, state, deterministic=True)` (as `play` acts), reward r_t,
and the agent's own `step_outputs` on o_t as its networks take it (`policy.normalize`). return_to_go[t] =
Σ_{i≥t} γ^(i−t) r_i over this episode alone (γ = `Agent.gamma`, 1 for PlaNet; no bootstrap where the episode was
cut short); advantage[t] = return_to_go[t] − value[t] (Monte Carlo). Each algorithm's outputs, what is kept, an
example: docs/guide/trained-agents.md, "Inspecting episodes in the browser".
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlfoundry.buffers.rollout import discounted_scan
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import check_renders, env_seed
from rlfoundry.run.video import DEFAULT_FPS, Mp4, offscreen, video_frame
from rlfoundry.trained.policy import Policy

# Gymnasium's documented observation entries, for the page's table (ids not here get obs[0], obs[1], ...).
OBS_NAMES = {
    "CartPole": ("cart position", "cart velocity", "pole angle", "pole angular velocity"),
    "Pendulum": ("cos θ", "sin θ", "angular velocity"),
    "MountainCar": ("position", "velocity"),
    "MountainCarContinuous": ("position", "velocity"),
    "Acrobot": ("cos θ1", "sin θ1", "cos θ2", "sin θ2", "angular velocity 1", "angular velocity 2"),
    "LunarLander": ("x", "y", "x velocity", "y velocity", "angle", "angular velocity", "left leg contact",
                    "right leg contact"),
    "LunarLanderContinuous": ("x", "y", "x velocity", "y velocity", "angle", "angular velocity", "left leg contact",
                              "right leg contact"),
}


@dataclass
class Outputs:
    """One step's network outputs; None where the agent has no such output."""

    probs: np.ndarray | None = None  # π(·|o) [A] over Discrete actions
    mean: np.ndarray | None = None  # the Gaussian's mean [A]
    std: np.ndarray | None = None  # and its standard deviation [A]
    q: np.ndarray | None = None  # Q(o, ·) [A] (DQN)
    value: float | None = None
    memory_norm: float | None = None


@dataclass
class Episode:
    """A recorded episode of T steps (see the module docstring for what each field holds at step t)."""

    env_id: str
    source: str  # the policy's origin and checkpoint step, or the CSV it was read from
    seed: int | None
    gamma: float
    observations: np.ndarray | None  # [T, D] vectors as the env gave them (not normalised); None for images
    actions: np.ndarray  # [T] Discrete or [T, A]
    rewards: np.ndarray  # [T]
    returns: np.ndarray  # [T] return-to-go
    values: np.ndarray | None = None  # [T]
    advantages: np.ndarray | None = None  # [T] returns − values
    probs: np.ndarray | None = None  # [T, A]
    means: np.ndarray | None = None  # [T, A]
    stds: np.ndarray | None = None  # [T, A]
    q_values: np.ndarray | None = None  # [T, A]
    memory_norms: np.ndarray | None = None  # [T]
    frames: list[bytes] | None = None  # T + 1 PNG images: the reset frame, then the frame after each step
    fps: float = DEFAULT_FPS
    ended: bool = True  # the env ended the episode (terminated or truncated); False: max_steps cut it

    @property
    def length(self) -> int:
        return len(self.rewards)

    def frame(self, t: int) -> np.ndarray | None:
        """The frame showing o_t, uint8 [H, W, 3], or None without frames."""
        if self.frames is None:
            return None
        import cv2

        decoded = cv2.imdecode(np.frombuffer(self.frames[t], np.uint8), cv2.IMREAD_COLOR)
        assert decoded is not None, "frames are the PNGs `png` wrote"
        return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)

    def obs_labels(self) -> list[str]:
        """Labels of a vector observation's entries: obs[i], with the env's name for it where known."""
        size = 0 if self.observations is None else self.observations.shape[1]
        names = OBS_NAMES.get(self.env_id.rsplit("-v", 1)[0])
        if names is None or len(names) != size:
            return [f"obs[{i}]" for i in range(size)]
        return [f"obs[{i}] {name}" for i, name in enumerate(names)]


def return_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Σ_{i≥t} γ^(i−t) r_i for every t (float64)."""
    x = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
    return discounted_scan(x, torch.full_like(x, gamma)).numpy()


# ---------------------------------------------------------------- recording


def renders_frames(env_id: str) -> bool:
    try:
        check_renders(env_id)
    except ConfigError:
        return False
    return True


def png(frame: np.ndarray) -> bytes:
    import cv2

    ok, data = cv2.imencode(".png", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise ValueError(f"cannot encode a frame of shape {list(frame.shape)} as PNG")
    return data.tobytes()


def record_episode(policy: Policy, seed: int = 0, max_steps: int = 10_000, frames: bool = True) -> Episode:
    """Play one episode with `policy` (greedy: `act(..., deterministic=True)`) in the run's env, reset with
    `env_seed(seed)` as `rlfoundry play` resets its first episode, for at most `max_steps` steps, and record every
    step (see the module docstring). Frames are kept when `frames` and the env renders rgb_array."""
    cfg, agent = policy.cfg, policy.agent
    env_id = cfg.env.id
    render = frames and renders_frames(env_id)
    observations: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    rewards: list[float] = []
    outputs: list[Outputs] = []
    pictures: list[bytes] | None = [] if render else None
    ended = False
    with offscreen():
        env = policy.make_env("rgb_array" if render else None)
        try:
            obs, _ = env.reset(seed=env_seed(seed))
            if pictures is not None:
                pictures.append(png(video_frame(env.render(), env_id)))
            state: Any = None  # the agent's memory, its own
            while len(rewards) < max_steps and not ended:
                before = state
                action, state = policy.act(obs, state, deterministic=True)
                net_obs = np.asarray(policy.normalize(np.asarray(obs)[None]), dtype=policy.spec.obs_dtype)
                tensor = torch.as_tensor(net_obs, device=agent.device)
                outputs.append(Outputs(**agent.step_outputs(tensor, action, before, state)))
                if np.ndim(obs) == 1:  # images are the frames' business: 10,000 Atari stacks would be 280 MB
                    observations.append(np.array(obs))
                actions.append(np.array(action))
                obs, reward, terminated, truncated, _ = env.step(action)
                rewards.append(float(reward))
                ended = bool(terminated or truncated)
                if pictures is not None:
                    pictures.append(png(video_frame(env.render(), env_id)))
            fps = env.metadata.get("render_fps") or DEFAULT_FPS
        finally:
            env.close()
    gamma = agent.gamma
    rewards_array = np.asarray(rewards, dtype=np.float64)
    returns = return_to_go(rewards_array, gamma)
    values = stacked(outputs, "value")
    return Episode(
        env_id=env_id, source=f"{policy.source} (step {policy.step:,})", seed=seed, gamma=gamma,
        observations=np.stack(observations) if observations else None, actions=np.stack(actions), rewards=rewards_array, returns=returns,
        values=values, advantages=None if values is None else returns - values, probs=stacked(outputs, "probs"),
        means=stacked(outputs, "mean"), stds=stacked(outputs, "std"), q_values=stacked(outputs, "q"),
        memory_norms=stacked(outputs, "memory_norm"), frames=pictures, fps=float(fps), ended=ended,
    )


def stacked(outputs: list[Outputs], name: str) -> np.ndarray | None:
    """One field of every step's outputs as an array [T, ...] (float64), or None where the agent has none."""
    if not outputs or getattr(outputs[0], name) is None:
        return None
    return np.stack([np.asarray(getattr(out, name), dtype=np.float64) for out in outputs])


# ---------------------------------------------------------------- exports

# CSV columns: (prefix, Episode field); a per-entry field gets one column per entry, `prefix_i`.
PER_ENTRY = (("prob", "probs"), ("mean", "means"), ("std", "stds"), ("q", "q_values"))
SCALARS = (("value", "values"), ("reward", "rewards"), ("return_to_go", "returns"), ("advantage", "advantages"),
           ("memory_norm", "memory_norms"))


def write_csv(episode: Episode, path: str | Path) -> Path:
    """One row per step: `step`, the observation (`obs_i`, vector observations only), the action (`action`, or
    `action_i` for a vector), the distribution (`prob_i`, or `mean_i` and `std_i`, or `q_i`), `value`, `reward`,
    `return_to_go`, `advantage`, `memory_norm`; columns the agent has no output for are left out. Floats are
    written exactly (Python's shortest repr)."""
    columns: list[tuple[str, np.ndarray]] = [("step", np.arange(episode.length))]
    if episode.observations is not None:
        columns += [(f"obs_{i}", episode.observations[:, i]) for i in range(episode.observations.shape[1])]
    if episode.actions.ndim == 1:
        columns.append(("action", episode.actions))
    else:
        columns += [(f"action_{i}", episode.actions[:, i]) for i in range(episode.actions.shape[1])]
    for prefix, name in PER_ENTRY:
        table = getattr(episode, name)
        if table is not None:
            columns += [(f"{prefix}_{i}", table[:, i]) for i in range(table.shape[1])]
    columns += [(prefix, getattr(episode, name)) for prefix, name in SCALARS if getattr(episode, name) is not None]
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([name for name, _ in columns])
        for t in range(episode.length):
            writer.writerow([cell(values[t]) for _, values in columns])
    return path


def cell(value) -> str:
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return repr(float(value))


def read_csv(path: str | Path, env_id: str = "", gamma: float = float("nan")) -> Episode:
    """An episode from a CSV that `write_csv` wrote (no frames); ValueError when it is not one."""
    path = Path(path)
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "step" not in rows[0] or "reward" not in rows[0] or "return_to_go" not in rows[0] or len(rows) < 2:
        raise ValueError(f"{path.name}: not an episode CSV written by rlfoundry (need a header with step, reward and "
                         "return_to_go, and at least one row)")
    header = rows[0]
    try:
        table = np.array([[float(x) for x in row] for row in rows[1:]], dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path.name}: a cell is not a number ({exc})") from None
    if table.shape[1] != len(header):
        raise ValueError(f"{path.name}: rows of {table.shape[1]} cells under a header of {len(header)}")

    def group(prefix: str) -> np.ndarray | None:
        indices = [i for i, name in enumerate(header) if name.startswith(prefix + "_") and name[len(prefix) + 1:].isdigit()]
        return table[:, indices] if indices else None

    def column(name: str) -> np.ndarray | None:
        return table[:, header.index(name)] if name in header else None

    actions = column("action")
    actions = actions.astype(np.int64) if actions is not None else group("action")
    observations = group("obs")
    fields: dict[str, Any] = {name: group(prefix) for prefix, name in PER_ENTRY}  # Episode's optional arrays
    fields.update({name: column(prefix) for prefix, name in SCALARS})
    return Episode(env_id=env_id, source=path.name, seed=None, gamma=gamma,
                   observations=observations,
                   actions=actions if actions is not None else np.zeros((len(table), 0)), **fields)


def write_mp4(episode: Episode, path: str | Path) -> Path:
    """The episode's frames as an mp4 (`rlfoundry.run.video.Mp4`: written to a temporary file, renamed into place)."""
    if episode.frames is None:
        raise ValueError(f"{episode.env_id}: this episode has no frames (the env does not render rgb_array)")
    with Mp4(Path(path), episode.fps) as video:
        for t in range(len(episode.frames)):
            video.append(video_frame(episode.frame(t), episode.env_id))
    return Path(path)
