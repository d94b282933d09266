"""SimPLe's simulated environment (Kaiser et al. 2019, arXiv:1903.00374): a Gymnasium `VectorEnv` of `num_envs`
envs whose step is one batched forward pass of the world model, in this process, on the model's device.

    reset:  every env restarts from a real frame stack [S·C, H, W] uint8 drawn by `restarts(rng, n)`
    step:   next frame, reward class, value = model.simulate(stacks, actions)     (bits from the LSTM prior)
            stacks = stacks without their oldest frame + the next frame
            reward = class - 1 ∈ {-1, 0, 1};  after `episode_length` steps the episode ends for every env

Observations, rewards and flags are torch tensors on the model's device, never copied to the host: a policy on the
same device reads them directly (`rlfoundry.buffers.rollout.RolloutCollector` stores them as they come). Spaces are
Gymnasium's (uint8 observations, `Discrete` actions), with the NEXT_STEP autoreset of the rest of rlfoundry and
`info["episode"]` as `RecordEpisodeStatistics` writes it. All envs begin and end their episodes together (one host
counter), so knowing when one ends needs no device sync.

The episode's end (docs/world-models/simple-mbarc.md §3, §6 item 2): with `add_value` (default, MB) the last reward
includes the world model's value estimate for the last input stack and the episode TERMINATES, so PPO does not
bootstrap again (the port meant this, but its done flag never fired and the tail counted twice); with
`add_value=False` (MB `--discard-value`, and T2T) it is TRUNCATED and PPO bootstraps from its own critic.

Randomness: restarts draw from `np_random` (Gymnasium's, seeded by `reset(seed=...)`), the latent bits from a
torch generator on the device seeded from it; `state_dict` holds both, for exact resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlfoundry.world_models.next_frame import NextFramePredictor

Restarts = Callable[[np.random.Generator, int], np.ndarray]
Graphed = Callable[[Callable[..., dict[str, torch.Tensor]], tuple[torch.Generator, ...], bool],
                   Callable[..., dict[str, torch.Tensor]]]


class SimulatedEnv(VectorEnv):
    """`num_envs` envs stepped by `model` (see the module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
    single_observation_space: spaces.Box  # narrowed from VectorEnv's Space: set to a Box in __init__

    def __init__(self, model: NextFramePredictor, restarts: Restarts, num_envs: int, episode_length: int = 50,
                 add_value: bool = True, temperature: float = 1.0, graphed: Graphed | None = None):
        """`restarts(rng, n)`: n real frame stacks [n, S·C, H, W] uint8 to start episodes from. MB: 16 envs,
        episodes of 50 steps (the rollout length), the LSTM prior sampled at temperature 1 (§1, §2.2, §3 of that page).
        `graphed(step, generators, copies)` wraps the model's step (`advance`) in a CUDA graph: the agent's
        `Runtime.graphed`."""
        if episode_length < 1 or num_envs < 1:
            raise ValueError(f"num_envs and episode_length must be ≥ 1, got {num_envs}, {episode_length}")
        self.model, self.restarts = model, restarts
        self.num_envs, self.episode_length = num_envs, episode_length
        self.add_value, self.temperature = add_value, temperature
        self.device = next(model.parameters()).device
        channels, height, width = model.frame_shape
        self.frame_channels = channels
        self.single_observation_space = spaces.Box(0, 255, (model.stacking * channels, height, width), np.uint8)
        self.single_action_space = spaces.Discrete(model.num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.generator = torch.Generator(self.device)
        # copies: the stacks are fed back and the caller keeps what a step returns
        self._advance = graphed(self.advance, (self.generator,), True) if graphed is not None else self.advance
        self.stacks: torch.Tensor | None = None
        self.steps = 0  # of the current episodes
        self.returns = torch.zeros(num_envs, device=self.device)
        self.started = 0.0  # wall time the current episodes began (the statistics' "t")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)  # seeds np_random
        if seed is not None:
            self.generator.manual_seed(int(self.np_random.integers(2**63)))
        self._restart()
        return self.stacks, {}

    def _restart(self) -> None:
        stacks = np.asarray(self.restarts(self.np_random, self.num_envs))
        expected = (self.num_envs, *self.single_observation_space.shape)
        if stacks.shape != expected or stacks.dtype != np.uint8:
            raise ValueError(f"restarts gave {stacks.dtype} {stacks.shape}, expected uint8 {expected}")
        self.stacks = torch.from_numpy(stacks).to(self.device)  # the one host -> device copy, per episode
        self.steps = 0
        self.returns.zero_()
        self.started = time.perf_counter()

    def step(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self.stacks is None:
            raise RuntimeError("SimulatedEnv.step before reset")
        flags = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        if self.steps == self.episode_length:  # NEXT_STEP autoreset: this step only restarts
            self._restart()
            return self.stacks, torch.zeros(self.num_envs, device=self.device), flags, flags.clone(), {}
        out = self._advance(self.stacks, torch.as_tensor(actions, device=self.device).long(), self.temperature)
        self.stacks, reward = out["stacks"], out["reward"]
        self.steps += 1
        info: dict[str, Any] = {}
        ended = self.steps == self.episode_length
        if ended and self.add_value:
            reward = reward + out["values"]
        self.returns += reward
        if ended:
            lengths = torch.full((self.num_envs,), self.steps, dtype=torch.int32, device=self.device)
            elapsed = torch.full((self.num_envs,), time.perf_counter() - self.started, device=self.device)
            info = {"episode": {"r": self.returns.clone(), "l": lengths, "t": elapsed}, "_episode": ~flags}
        terminated = flags | (ended and self.add_value)
        truncated = flags | (ended and not self.add_value)
        return self.stacks, reward, terminated, truncated, info

    def advance(self, stacks: torch.Tensor, actions: torch.Tensor, temperature: float) -> dict[str, torch.Tensor]:
        """The model's step for every env, on the device: the next frame stacks, the rewards (class − 1) and the
        values (a CUDA graph with graphed runs: nothing read on the host)."""
        out = self.model.simulate(stacks, actions, temperature=temperature, generator=self.generator)
        return {"stacks": torch.cat([stacks[:, self.frame_channels:], out.next_frame], dim=1),
                "reward": (out.reward_class - 1).float(), "values": out.values.float()}

    def state_dict(self) -> dict[str, Any]:
        """The random streams (restarts, latent bits), for an exact resume; the envs' positions are not kept: the
        agent restarts them at every rollout."""
        return {"np_random": self.np_random.bit_generator.state, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.np_random.bit_generator.state = state["np_random"]
        self.generator.set_state(state["generator"])
