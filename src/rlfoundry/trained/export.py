"""A trained policy's deterministic actor as a standalone file: ONNX or TorchScript (`rlfoundry export`).

The exported module takes the env's own observations (what `Policy.make_env()` gives, as `Policy.act` does) and
returns the actions `Policy.act(obs, deterministic=True)` returns: the run's frozen observation normalisation is
folded in (computed in float64 and clipped, as Gymnasium's NormalizeObservation and rlfoundry's clip do it), then the
network, then the greedy action (argmax) or the Gaussian mean clipped to the action bounds, or the squashed mean
scaled to them (SAC). Memory cores take their state as explicit inputs and return the new state:

    actions, *state = module(obs, *state)   # state: STATE_NAMES, zeros at an episode's start (their shapes are in
                                            # the ONNX inputs; batch size B)

The graph runs in float32 whatever precision the run trained in. Latent-model agents (DreamerV3, PlaNet) plan or
filter with their world model at every step and are not exported.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from torch import nn

from rlfoundry.algos import Agent, algorithms
from rlfoundry.config.errors import ConfigError
from rlfoundry.trained.policy import EPSILON, Policy

FORMATS = ("onnx", "torchscript")


class Normalize(nn.Module):
    """The policy's observation normalisation: running statistics (float64, then clipped), the static rescaling of
    the space's bounds, or nothing."""

    # buffers, registered by kind: running (mean, std) or static (gradient, intercept)
    mean: torch.Tensor
    std: torch.Tensor
    gradient: torch.Tensor
    intercept: torch.Tensor

    def __init__(self, policy: Policy):
        super().__init__()
        env_cfg, self.kind = policy.cfg.env, "none"
        if env_cfg.normalize_obs == "static":
            gradient, intercept = policy.rescale_terms()
            self.kind = "static"
            self.register_buffer("gradient", torch.as_tensor(gradient))
            self.register_buffer("intercept", torch.as_tensor(intercept))
        elif env_cfg.normalize_obs and policy.obs_stats is not None:
            mean, var, _ = policy.obs_stats
            self.kind, self.clip = "running", float(env_cfg.clip_obs)
            self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float64)))
            self.register_buffer("std", torch.as_tensor(np.sqrt(np.asarray(var, dtype=np.float64) + EPSILON)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "running":
            return ((obs.double() - self.mean) / self.std).float().clamp(-self.clip, self.clip)
        if self.kind == "static":
            return self.gradient * obs + self.intercept
        return obs


class Actor(nn.Module):
    """normalise → the agent's acting network (`Agent.acting_network`) → deterministic action, with the memory as
    explicit tensors."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.normalize = Normalize(policy)
        net = policy.agent.acting_network()
        if net is None:
            exported = [name for name, cls in algorithms().items() if cls.acting_network is not Agent.acting_network]
            raise ConfigError(f"algo.name = '{policy.cfg.algo.name}': its actions come from planning or filtering "
                              f"with a world model, not one network; export supports {', '.join(exported)}")
        self.net = net

    def initial_state(self, batch_size: int) -> list[torch.Tensor]:
        """The memory at an episode's start, flat (empty for a feed-forward policy)."""
        initial = getattr(self.net, "initial_state", None)
        return [] if initial is None else list(initial(batch_size) or ())

    def forward(self, obs: torch.Tensor, *state: torch.Tensor):
        return self.net(self.normalize(obs), *state)


def export(policy: Policy, path, fmt: str, batch_size: int = 1) -> dict:
    """Write the policy's actor to `path` as `fmt` (onnx or torchscript); returns {"inputs", "outputs"} (names and
    shapes, B the batch). The file is written to a temporary name and renamed into place."""
    import os
    from pathlib import Path

    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: allowed: {', '.join(FORMATS)}")
    actor = copy.deepcopy(Actor(policy)).eval().float().requires_grad_(False)  # the policy's own networks untouched
    obs = torch.as_tensor(np.zeros((batch_size, *policy.spec.obs_shape), dtype=policy.observation_space.dtype))
    state = actor.initial_state(batch_size)
    inputs = ["obs"] + [f"state_{i}" for i in range(len(state))]
    outputs = ["actions"] + [f"next_state_{i}" for i in range(len(state))]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # tracing records the one-step branches acting takes (a shape test in the cores): what is exported
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            if fmt == "torchscript":
                traced = torch.jit.trace(actor, (obs, *state), check_trace=False)
                traced.save(str(tmp))
            else:
                dynamic = {name: {0: "batch"} for name in inputs[:1]}
                dynamic.update({name: {1: "batch"} for name in inputs[1:]})
                torch.onnx.export(actor, (obs, *state), str(tmp), input_names=inputs, output_names=outputs,
                                  dynamic_axes={**dynamic, "actions": {0: "batch"}}, dynamo=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    shapes = {"obs": ["B", *policy.spec.obs_shape]}
    shapes.update({f"state_{i}": ["layers" if t.dim() == 3 else "", "B", *t.shape[2:]] for i, t in enumerate(state)})
    return {"inputs": inputs, "outputs": outputs, "shapes": shapes}
