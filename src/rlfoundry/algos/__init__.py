"""Algorithms, one file each. The registry is an explicit dict."""

from rlfoundry.algos.a2c import A2C
from rlfoundry.algos.base import Agent, Iteration
from rlfoundry.algos.dqn import DQN
from rlfoundry.algos.dreamer import Dreamer
from rlfoundry.algos.planet import PlaNet
from rlfoundry.algos.ppo import PPO
from rlfoundry.algos.reinforce import REINFORCE
from rlfoundry.algos.sac import SAC
from rlfoundry.algos.simple import Simple

ALGORITHMS: dict[str, type[Agent]] = {"ppo": PPO, "a2c": A2C, "reinforce": REINFORCE, "dqn": DQN, "sac": SAC,
                                     "simple": Simple, "dreamer": Dreamer,
                                     "planet": PlaNet}

__all__ = ["ALGORITHMS", "Agent", "Iteration"]
