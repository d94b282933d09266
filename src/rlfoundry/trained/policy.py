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
from rlfoundry.run import hardware
from rlfoundry.run import weights as weights_lib

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
        """Evaluation vector envs of the run (`rlfoundry.envs.build(..., evaluation=True)`), or of another id with the
        run's env settings, with the policy's statistics frozen in: what `agent.predict` takes directly
        (`rlfoundry eval`)."""
        env_cfg = self.cfg.env if env_id in (None, self.cfg.env.id) else self.cfg.env.model_copy(update={"id": env_id})
        envs, _ = envs_lib.build(env_cfg, num_envs, evaluation=True, render_mode=render_mode)
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


def from_saved(saved: weights_lib.Saved, source: str, device: str = "cpu") -> Policy:
    """The policy of networks read with `rlfoundry.run.weights.read` (a run's checkpoint or a model folder)."""
    from rlfoundry.run.restore import run_config

    policy = build(run_config(saved.path), saved.weights, saved.obs_stats, saved.step, source, device)
    policy.run_dir, policy.checkpoint = saved.run_dir, saved.checkpoint
    return policy


def from_run(run_dir: str | Path, checkpoint: str | None = None, device: str = "cpu") -> Policy:
    """The policy of a run directory's checkpoint (see `rlfoundry.run.weights.checkpoint_name`)."""
    return from_saved(weights_lib.read(Path(run_dir), checkpoint, str(run_dir)), str(run_dir), device)


def build(cfg: ExperimentConfig, weights: dict[str, torch.Tensor], obs_stats, step: int, source: str,
          device: str = "cpu") -> Policy:
    """A Policy from a run's config, its checkpoint's weights and observation statistics (CheckpointError when the
    weights do not fit the config's networks)."""
    from rlfoundry.algos import Runtime, algorithm

    precision: str = cfg.train.precision
    if precision == "auto":  # what this machine runs natively, as a new run here would
        precision, _ = hardware.resolve_precision("auto", torch.device(device), cfg.network, hardware.detect())
    train = cfg.train.model_copy(update={"precision": precision, "compile": False, "device_replay": False})
    cfg = cfg.model_copy(update={"train": train})
    envs, spec = envs_lib.build(cfg.env, 1, evaluation=True)  # the agent's spaces, exactly as in training
    envs.close()
    agent = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train, device))
    weights_lib.load_weights(agent, weights, source)
    return Policy(cfg, agent, spec, obs_stats, step, source)
