"""Algorithms, one file each: an `Agent` subclass (the contract, `base`) of a family (`families`), found by
`registry.algorithms()` with those that plugins register."""

from rlfoundry.algos.base import Agent, Iteration, Memory, Runtime
from rlfoundry.algos.families import LatentAgent, OffPolicyAgent, OnPolicyAgent
from rlfoundry.algos.registry import algorithm, algorithms

__all__ = ["Agent", "Iteration", "LatentAgent", "Memory", "OffPolicyAgent", "OnPolicyAgent", "Runtime", "algorithm",
           "algorithms"]
