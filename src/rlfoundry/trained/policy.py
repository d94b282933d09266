"""A trained policy for use outside training: what `rlfoundry.load_policy` returns and `play`, `inspect` and
`export` use.

    policy = rlfoundry.load_policy("runs/...", checkpoint="best")
    env = policy.make_env()                        # the run's preprocessing (frame stacks, Atari games, masks)
    obs, _ = env.reset(seed=0)
    action, state = policy.act(obs)                # frozen normalisation inside; memory passed back by the caller
    obs, reward, terminated, truncated, _ = env.step(action)
    action, state = policy.act(obs, state)

How it differs from Stable-Baselines3's `Model.load(...).predict(obs, state, episode_start, deterministic)`: SB3's
`predict` takes observations already normalised by a VecNormalize that the user loads and applies separately; here
`act` takes the env's own observations and applies the run's frozen statistics itself (and never updates them).
`deterministic` defaults to True (SB3: False). Memory cores carry their state through `state` as in SB3; an episode
that starts inside a batch is marked with `episode_start` (a new episode in a single env: pass `state=None`).

Only the networks are loaded (the checkpoint's safetensors weights and its observation statistics); optimizers,
replay buffers and random streams stay behind, and nothing is executed from the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.utils import rescale_box

from rlfoundry import envs as envs_lib
from rlfoundry.algos.base import Memory
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run import hardware

EPSILON = 1e-8  # Gymnasium's NormalizeObservation: (obs − mean) / sqrt(var + ε)


@dataclass
class Policy:
    cfg: ExperimentConfig  # the run's resolved config
    agent: Any  # an rlfoundry.algos Agent with the checkpoint's weights, only ever asked to predict
    spec: envs_lib.EnvInfo  # the agent's view: normalised observations
    obs_stats: tuple[np.ndarray, np.ndarray, float] | None  # (mean, var, count) of the run's normalisation
    step: int  # the env step the checkpoint was saved at
    source: str  # where it came from, for messages (a run directory, a model folder, hf://ORG/NAME)
    run_dir: Path | None = None  # the run directory it was loaded from; None for a model folder
    checkpoint: str = "last"  # which: last, best or a step directory (a model folder's: the one it was built from)

    def make_env(self, render_mode: str | None = None) -> gym.Env:
        """One env with the run's preprocessing (`rlfoundry.envs.make_single`): its observations go to `act`."""
        return envs_lib.make_single(self.cfg.env, render_mode)

    def vector_env(self, num_envs: int, render_mode: str | None = None, env_id: str | None = None):
        """Evaluation vector envs of the run (`rlfoundry.envs.make(..., evaluation=True)`), or of another id with the
        run's env settings, with the policy's statistics frozen in: what `agent.predict` takes directly
        (`rlfoundry eval`)."""
        env_cfg = self.cfg.env if env_id in (None, self.cfg.env.id) else self.cfg.env.model_copy(update={"id": env_id})
        envs, _ = envs_lib.make(env_cfg, num_envs, evaluation=True, render_mode=render_mode)
        if self.obs_stats is not None:
            envs_lib.set_obs_stats(envs, *self.obs_stats)
        return envs

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Observations [B, ...] as the network takes them: the run's frozen statistics, clipped as in training, or
        the static rescaling of the space's bounds to [-1, 1]."""
        env_cfg = self.cfg.env
        obs = np.asarray(obs)
        if env_cfg.normalize_obs == "static":
            return self._rescale(obs)
        if env_cfg.normalize_obs and self.obs_stats is not None:
            mean, var, _ = self.obs_stats
            scaled = ((obs - mean) / np.sqrt(var + EPSILON)).astype(np.float32)
            return np.clip(scaled, -env_cfg.clip_obs, env_cfg.clip_obs)
        return obs

    @cached_property
    def observation_space(self) -> gym.spaces.Space:
        """The space of the observations `act` takes: the env's, after `mask_obs`, before normalisation."""
        return envs_lib.probe_spaces(self.cfg.env.id, envs_lib.make_kwargs(self.cfg.env), self.cfg.env)[0]

    @cached_property
    def _rescale(self):
        """Gymnasium's own map of the space's bounds to [-1, 1], as `RescaleObservation` applies it."""
        space = self.observation_space
        assert isinstance(space, gym.spaces.Box), "normalize_obs static rescales a Box's bounds"
        return rescale_box(space, np.float32(-1.0), np.float32(1.0))[1]

    def rescale_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """(gradient, intercept) of the static rescaling `gradient * obs + intercept`: the very arrays Gymnasium's
        function holds (read from its closure), so an exported graph computes the same numbers."""
        cells = dict(zip(self._rescale.__code__.co_freevars, self._rescale.__closure__))
        return cells["gradient"].cell_contents, cells["intercept"].cell_contents

    def act(self, obs: np.ndarray, state: Any = None, deterministic: bool = True,
            episode_start: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """(action, new state) for one observation, or (actions [B], new state) for a batch [B, ...] of them.

        `state` is what the previous call returned (None: a fresh episode, or a feed-forward policy, which returns
        None); `episode_start` [B] marks the batch entries whose observation begins a new episode (their memory
        is reset)."""
        obs = np.asarray(obs)
        single = obs.shape == self.spec.obs_shape
        batch = obs[None] if single else obs
        if batch.shape[1:] != self.spec.obs_shape:
            raise ValueError(f"act: observations of shape {list(obs.shape)}; this policy takes "
                             f"{list(self.spec.obs_shape)} or a batch [B, {', '.join(map(str, self.spec.obs_shape))}]")
        memory = Memory()
        memory.state = state
        if episode_start is not None:
            memory.starts = np.asarray(episode_start, dtype=bool).reshape(len(batch))
        actions = self.agent.predict(self.normalize(batch), deterministic, memory)
        return (actions[0] if single else actions), memory.state


def checkpoint_name(run_dir: Path, which: str | None) -> str:
    """The checkpoint `which` names (last, best, a step directory, or a step number: 5120 is step_000000005120), or
    with None the best where one was saved, else the last."""
    if which is None:
        return "best" if (Path(run_dir) / "checkpoints" / "best.json").is_file() else "last"
    if which.isdigit():
        return ckpt.step_dir_name(int(which))
    if which in ("", ".", "..") or Path(which).name != which:
        raise ckpt.CheckpointError(f"checkpoint {which!r}: allowed: last, best, a step (5120) or a step directory "
                                   f"name in {Path(run_dir) / 'checkpoints'}")
    return which


def checkpoint_dir(run_dir: Path, which: str | None) -> Path:
    """A run's checkpoint directory (`checkpoint_name`)."""
    return ckpt.resolve(run_dir, checkpoint_name(run_dir, which))


def from_run(run_dir: str | Path, checkpoint: str | None = None, device: str = "cpu") -> Policy:
    """The policy of a run directory's checkpoint (see `checkpoint_name`)."""
    from rlfoundry.run.restore import run_config

    name = checkpoint_name(Path(run_dir), checkpoint)
    path = ckpt.resolve(Path(run_dir), name)
    saved = ckpt.load(path)
    stats = None
    if "obs_rms_mean" in saved.arrays:
        stats = (saved.arrays["obs_rms_mean"], saved.arrays["obs_rms_var"], float(saved.state["obs_rms_count"]))
    policy = build(run_config(Path(run_dir)), saved.weights, stats, int(saved.state["step"]), str(run_dir), device)
    policy.run_dir, policy.checkpoint = Path(run_dir), name
    return policy


def build(cfg: ExperimentConfig, weights: dict[str, torch.Tensor], obs_stats, step: int, source: str,
          device: str = "cpu") -> Policy:
    """A Policy from a run's config, its checkpoint's weights and observation statistics (CheckpointError when the
    weights do not fit the config's networks)."""
    from rlfoundry.algos import Runtime, algorithm

    precision: str = cfg.train.precision
    if precision == "auto":  # what this machine runs natively, as a new run here would
        precision, _ = hardware.resolve_precision("auto", torch.device(device), cfg.network, hardware.detect())
    train = cfg.train.model_copy(update={"precision": precision, "compile": False})
    cfg = cfg.model_copy(update={"train": train})
    envs, spec = envs_lib.make(cfg.env, 1, evaluation=True)  # the agent's spaces, exactly as in training
    envs.close()
    agent = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train, device))
    load_weights(agent, weights, source)
    return Policy(cfg, agent, spec, obs_stats, step, source)


def load_weights(agent, weights: dict[str, torch.Tensor], source: str) -> None:
    """Give a freshly built agent the networks of `weights` (a checkpoint's flat names) and keep the rest of its
    fresh state (optimizers, empty buffers). Every tensor of the agent's networks must be there; tensors of parts
    a fresh agent does not have (a collector's last observations) are run state and are left out."""
    state = agent.state_dict()
    ours = network_weights(agent, weights, source)
    for flat_name, tensor in ours.items():
        part, _, name = flat_name.partition(".")
        state[part][name] = tensor
    try:
        agent.load_state_dict(state)
    except (KeyError, RuntimeError, ValueError) as exc:  # shapes that do not fit this config
        raise ckpt.CheckpointError(f"{source}: the weights do not fit the run's networks ({exc})") from None


def network_weights(agent, weights: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """The tensors of `weights` that a freshly built `agent`'s networks hold (CheckpointError when one is missing, or
    a network holds a name the agent does not know)."""
    expected, _, _ = ckpt.split_agent_state(agent.state_dict())
    parts = {name.partition(".")[0] for name in expected}
    given = {name for name in weights if name.partition(".")[0] in parts}
    missing, unexpected = sorted(set(expected) - given), sorted(given - set(expected))
    if missing or unexpected:
        raise ckpt.CheckpointError(f"{source}: the weights do not fit the run's networks (missing: {missing[:5]}, "
                                   f"unexpected: {unexpected[:5]})")
    return {name: weights[name] for name in expected}
