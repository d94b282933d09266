"""`rlfoundry.evaluate(...)`: a trained policy's evaluation return from Python, the numbers `rlfoundry eval` prints
(Stable-Baselines3's `evaluate_policy`, for a run directory, a model folder, `hf://` or a loaded Policy)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import MAX_SEED
from rlfoundry.hub import load_policy
from rlfoundry.run.evaluate import evaluate as run_episodes
from rlfoundry.trained.policy import Policy


@dataclass(frozen=True)
class Evaluation:
    """Each episode's return and length, in the order the envs finished them, and what was evaluated."""

    returns: list[float]
    lengths: list[int]
    seed: int
    checkpoint: str  # last, best, a step directory, or the one a model folder holds
    step: int  # the env step the checkpoint was saved at
    env_id: str

    @property
    def mean(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def std(self) -> float:
        """The population standard deviation, as numpy's (and `rlfoundry eval`'s) default."""
        return statistics.pstdev(self.returns)


def evaluate(policy: Policy | str | Path = "@last", env_id: str | None = None, episodes: int = 10,
             seed: int | None = None, deterministic: bool = True, num_envs: int | None = None,
             checkpoint: str | None = "last") -> Evaluation:
    """Evaluate `policy` (a Policy, or a RUN as `rlfoundry eval` takes it, loaded at `checkpoint`) for `episodes`
    episodes on its run's evaluation envs, or on `env_id` with the run's env settings; `seed` defaults to the run's
    train.seed + eval.seed_offset. Same arguments, same returns as `rlfoundry eval`. ConfigError for bad input."""
    if episodes < 1:
        raise ConfigError(f"episodes = {episodes}: must be at least 1")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed = {seed}: allowed: 0 to {MAX_SEED}")
    if num_envs is not None and num_envs < 1:
        raise ConfigError(f"num_envs = {num_envs}: must be at least 1")
    if not isinstance(policy, Policy):
        policy = load_policy(policy, checkpoint)
    cfg = policy.cfg
    seed = cfg.train.seed + cfg.eval.seed_offset if seed is None else seed
    envs = policy.vector_env(num_envs or min(episodes, 16), env_id=env_id)
    torch.manual_seed(seed)  # sampled actions (deterministic=False) are seeded too: the same seed, the same episodes
    try:
        returns, lengths = run_episodes(policy.agent, envs, episodes, seed, deterministic=deterministic)
    finally:
        envs.close()
    return Evaluation(returns, lengths, seed, policy.checkpoint, policy.step, env_id or cfg.env.id)
