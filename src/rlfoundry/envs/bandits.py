"""Multi-armed bandits as small Gymnasium envs, registered as `Bandit-*` ids: the quickest check that a policy learns to
prefer the better action and, with arm means redrawn at every reset, a memory task for meta-RL (Duan et al. 2016,
arXiv:1611.02779; Wang et al. 2016, arXiv:1611.05763). The observation is a constant [1.0] (no state); `info` names
the optimal arm and each pull's expected regret, so tests can check learning free of reward noise.
docs/environments/toys.md lists the ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DISTRIBUTIONS = ("bernoulli", "gaussian")

# Fixed means of the registered stationary 10-armed bandits (best arm not first or last; a clear runner-up).
BERNOULLI10_MEANS = (0.5, 0.3, 0.8, 0.1, 0.6, 0.4, 0.9, 0.2, 0.7, 0.35)
GAUSSIAN10_MEANS = (0.2, -0.8, 1.5, 0.4, 1.2, -1.5, -0.1, -1.0, 0.8, -0.5)


class BanditEnv(gym.Env):
    """A k-armed bandit. `means` fixes the arm means; without it they are redrawn at every reset."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        arms: int | None = None,
        distribution: Literal["bernoulli", "gaussian"] = "bernoulli",
        means: Sequence[float] | None = None,
        horizon: int = 1,
    ):
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution = {distribution!r}: allowed: {', '.join(DISTRIBUTIONS)}")
        if means is not None:
            fixed = np.asarray(means, dtype=np.float64)
            if fixed.ndim != 1 or len(fixed) < 2:
                raise ValueError(f"means = {means!r}: need a list of at least 2 arm means")
            if arms is not None and arms != len(fixed):
                raise ValueError(f"arms = {arms} but means has {len(fixed)} entries")
            if distribution == "bernoulli" and not np.all((fixed >= 0) & (fixed <= 1)):
                raise ValueError(f"means = {means!r}: Bernoulli means must lie in [0, 1]")
            arms = len(fixed)
        if arms is None or arms < 2:
            raise ValueError(f"arms = {arms!r}: a bandit needs at least 2 arms (or means=[...])")
        if horizon < 1:
            raise ValueError(f"horizon = {horizon}: must be at least 1")
        self.arms, self.distribution, self.horizon = int(arms), distribution, int(horizon)
        self.fixed_means = None if means is None else fixed
        self.means = np.zeros(self.arms) if means is None else fixed.copy()
        self.action_space = spaces.Discrete(self.arms)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self._obs = np.ones(1, dtype=np.float32)
        self._pulls = 0

    @property
    def optimal_arm(self) -> int:
        return int(np.argmax(self.means))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.fixed_means is None:
            if self.distribution == "bernoulli":
                self.means = self.np_random.uniform(0.0, 1.0, self.arms)
            else:  # the 10-armed testbed of Sutton & Barto (2018), section 2.3
                self.means = self.np_random.normal(0.0, 1.0, self.arms)
        self._pulls = 0
        return self._obs.copy(), {"optimal_arm": self.optimal_arm}

    def step(self, action):
        arm = int(action)
        mean = self.means[arm]
        if self.distribution == "bernoulli":
            reward = float(self.np_random.random() < mean)
        else:
            reward = float(self.np_random.normal(mean, 1.0))
        self._pulls += 1
        info = {"optimal_arm": self.optimal_arm, "regret": float(self.means.max() - mean)}
        return self._obs.copy(), reward, self._pulls >= self.horizon, False, info


# id → (kwargs, reward_threshold). Thresholds (fixed means only): 0.9 × best mean × horizon, which is above the
# runner-up arm's mean, so reaching it means the best arm is the greedy choice.
BANDITS: dict[str, tuple[dict, float | None]] = {
    "Bandit-TwoArm-v0": ({"distribution": "bernoulli", "means": [0.2, 0.8]}, 0.72),
    "Bandit-Bernoulli10-v0": ({"distribution": "bernoulli", "means": list(BERNOULLI10_MEANS)}, 0.81),
    "Bandit-Gaussian10-v0": ({"distribution": "gaussian", "means": list(GAUSSIAN10_MEANS)}, 1.35),
    # A new bandit every episode: for policies with memory. Horizons from RL² (k=10, n=100) and Sutton & Barto's
    # testbed (1000 pulls per problem).
    "Bandit-Bernoulli10Random-v0": ({"distribution": "bernoulli", "arms": 10, "horizon": 100}, None),
    "Bandit-Gaussian10Random-v0": ({"distribution": "gaussian", "arms": 10, "horizon": 1000}, None),
}


def register_bandits() -> None:
    """Register the `Bandit-*` ids (once; later calls do nothing)."""
    for env_id, (kwargs, threshold) in BANDITS.items():
        if env_id not in gym.registry:
            gym.register(env_id, "rlfoundry.envs.bandits:BanditEnv", reward_threshold=threshold, kwargs=kwargs)
