"""The recurrent state-space model shared by DreamerV3 and PlaNet (Hafner et al. 2019 §3, 2023 §2;
docs/world-models/dreamer-planet.md §1 and §7).

The state is a deterministic recurrent part h (`deter` units) and a stochastic part z:

    h_t       = core(h_{t-1}, z_{t-1}, a_{t-1})              with h, z and a zeroed where an episode starts
    prior     p(z_t | h_t)                                    imagination: the dynamics alone
    posterior q(z_t | h_t, embed(o_t))                        observation: the dynamics corrected by o_t
    features  = concat(h_t, z_t)                              what every head reads

Two forms, chosen by the config. DreamerV3's (reference code HEAD, `dreamerv3/rssm.py`; §1 lists its layers): z is
`stoch` categoricals of `classes` classes with 1% uniform mixing, sampled as straight-through one-hots, and the core
a block-diagonal GRU (`blocks` groups) with RMSNorm and SiLU; continuous actions enter divided by max(1, |a|), with no
gradient through the divisor. PlaNet's (`google-research/planet` `models/rssm.py`; §7): z is a `stoch`-dim diagonal
Gaussian with std = softplus + 0.1, and the core a ReLU layer on concat(z, a) into torch's `GRUCell`, without norms.
Discrete actions enter as one-hots in both, and both start from zeros (DreamerV3 HEAD learns no initial state).
`observe` loops over time once and computes the prior of every step afterwards in one batched call; `imagine_step`
advances every start state at once.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt
from torch import nn

from rlfoundry.config.base import StrictModel
from rlfoundry.world_models import dists
from rlfoundry.world_models.layers import ACTIVATIONS, BlockLinear, Dense, RMSNorm, mlp, output_layer


class RSSMConfig(StrictModel):
    deter: PositiveInt = Field(512, description="Units of the deterministic state h (DreamerV3 size1m: 512).")
    hidden: PositiveInt = Field(64, description="Units of the hidden layers inside the model (size1m: 64).")
    stoch: PositiveInt = Field(32, description="Categorical latent variables, or Gaussian latent dimensions.")
    classes: NonNegativeInt = Field(4, description="Classes per categorical latent (size1m: 4); 0: a diagonal "
                                                   "Gaussian latent (PlaNet).")
    blocks: NonNegativeInt = Field(8, description="Groups of DreamerV3's block GRU; 0: a plain GRU cell (PlaNet).")
    prior_layers: PositiveInt = Field(2, description="Hidden layers of the prior (DreamerV3 imglayers: 2).")
    posterior_layers: PositiveInt = Field(1, description="Hidden layers of the posterior (DreamerV3 obslayers: 1).")
    unimix: NonNegativeFloat = Field(0.01, le=1, description="Uniform mixing of the categorical latents.")
    min_std: NonNegativeFloat = Field(0.1, description="Gaussian latents: std = softplus(x) + min_std (PlaNet 0.1).")
    norm: bool = Field(True, description="RMSNorm after each hidden layer (DreamerV3); PlaNet has none.")
    act: Literal["silu", "relu"] = Field("silu", description="Hidden activation: DreamerV3 SiLU, PlaNet ReLU.")


class State(NamedTuple):
    deter: torch.Tensor  # [..., deter]
    stoch: torch.Tensor  # [..., stoch · classes] flattened one-hots, or [..., stoch] Gaussian samples


class RSSM(nn.Module):
    def __init__(self, cfg: RSSMConfig, action_size: int, embed_size: int, discrete_actions: bool):
        super().__init__()
        self.cfg, self.action_size, self.discrete_actions = cfg, action_size, discrete_actions
        self.categorical = cfg.classes > 0
        self.stoch_size = cfg.stoch * cfg.classes if self.categorical else cfg.stoch
        stats = cfg.stoch * cfg.classes if self.categorical else 2 * cfg.stoch
        D, H = cfg.deter, cfg.hidden
        if cfg.blocks:
            if D % cfg.blocks:
                raise ValueError(f"rssm.deter {D} must divide into rssm.blocks {cfg.blocks}")
            self.in_deter = Dense(D, H, cfg.norm, cfg.act)
            self.in_stoch = Dense(self.stoch_size, H, cfg.norm, cfg.act)
            self.in_action = Dense(action_size, H, cfg.norm, cfg.act)
            G = cfg.blocks
            self.block_hidden = BlockLinear(D + G * 3 * H, D, G)
            self.block_norm = RMSNorm(D) if cfg.norm else None
            self.block_gates = BlockLinear(D, 3 * D, G)
        else:
            self.in_layer = Dense(self.stoch_size + action_size, H, cfg.norm, cfg.act)
            self.cell = nn.GRUCell(H, D)
        self.prior_net = nn.Sequential(mlp(D, H, cfg.prior_layers, cfg.norm, cfg.act), output_layer(H, stats, 1.0))
        self.posterior_net = nn.Sequential(mlp(D + embed_size, H, cfg.posterior_layers, cfg.norm, cfg.act),
                                           output_layer(H, stats, 1.0))

    @property
    def feature_size(self) -> int:
        """Floats of `features(state)`, which is also the flat form a replay stores per step."""
        return self.cfg.deter + self.stoch_size

    def initial(self, batch: int, device=None) -> State:
        return State(torch.zeros(batch, self.cfg.deter, device=device), torch.zeros(batch, self.stoch_size, device=device))

    @staticmethod
    def features(state: State) -> torch.Tensor:
        return torch.cat([state.deter, state.stoch], -1)

    def state_of(self, features: torch.Tensor) -> State:
        return State(features[..., :self.cfg.deter], features[..., self.cfg.deter:])

    def action_input(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions as the core reads them: one-hots of discrete actions, continuous ones divided by max(1, |a|)."""
        if self.discrete_actions:
            return dists.one_hot(actions.long(), self.action_size)
        actions = actions.float()
        return actions / actions.abs().clamp(min=1).detach()

    # ------------------------------------------------------------------ one step

    def core(self, deter: torch.Tensor, stoch: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """h' from h, z and the core's action input."""
        if not self.cfg.blocks:
            return self.cell(self.in_layer(torch.cat([stoch, action], -1)), deter)
        G, D = self.cfg.blocks, self.cfg.deter
        x = torch.cat([self.in_deter(deter), self.in_stoch(stoch), self.in_action(action)], -1)  # [N, 3H]
        groups = torch.cat([deter.reshape(-1, G, D // G), x.unsqueeze(1).expand(-1, G, -1)], -1)  # [N, G, D/G + 3H]
        y = self.block_hidden(groups.reshape(deter.shape[0], -1))
        y = ACTIVATIONS[self.cfg.act](self.block_norm(y) if self.block_norm is not None else y)
        reset, cand, update = self.block_gates(y).reshape(-1, G, 3, D // G).unbind(2)  # split per group
        reset, cand, update = (part.reshape(-1, D) for part in (reset, cand, update))
        cand = torch.tanh(torch.sigmoid(reset) * cand)
        update = torch.sigmoid(update - 1)
        return update * cand + (1 - update) * deter

    def _stats(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.categorical:
            logits = out.reshape(*out.shape[:-1], self.cfg.stoch, self.cfg.classes)
            return (dists.unimix_logits(logits, self.cfg.unimix),)
        mean, std = out.chunk(2, -1)
        return mean, F.softplus(std) + self.cfg.min_std

    def prior(self, deter: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._stats(self.prior_net(deter))

    def posterior(self, deter: torch.Tensor, embed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._stats(self.posterior_net(torch.cat([deter, embed], -1)))

    def sample(self, stats: tuple[torch.Tensor, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """A differentiable sample, flattened: straight-through one-hots, or mean + std·ε."""
        if self.categorical:
            return dists.straight_through_sample(stats[0], generator).flatten(-2)
        mean, std = stats
        return mean + std * torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)

    def mode(self, stats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The most likely latent, flattened: each variable's likeliest class as a one-hot, or the mean."""
        if self.categorical:
            return dists.one_hot(stats[0].argmax(-1), self.cfg.classes, stats[0].dtype).flatten(-2)
        return stats[0]

    def kl(self, *stats: torch.Tensor) -> torch.Tensor:
        """KL(p ‖ q) of two stats tuples, given flat as (*p, *q), summed over the latent variables."""
        return dists.categorical_kl(*stats) if self.categorical else dists.gaussian_kl(*stats)

    def observe_step(self, state: State, action: torch.Tensor, embed: torch.Tensor, is_first: torch.Tensor,
                     generator: torch.Generator | None = None,
                     mode: bool = False) -> tuple[State, tuple[torch.Tensor, ...]]:
        """One step of observation: state and action [N, ...] (the core's action input) masked where is_first [N],
        then the core and the posterior of `embed`. -> (the posterior state, sampled or with `mode` its most likely
        latent; the posterior's stats)."""
        keep = (~is_first).float().unsqueeze(-1)
        deter = self.core(state.deter * keep, state.stoch * keep, action * keep)
        post = self.posterior(deter, embed)
        return State(deter, self.mode(post) if mode else self.sample(post, generator)), post

    def imagine_step(self, state: State, action: torch.Tensor,
                     generator: torch.Generator | None = None) -> tuple[State, tuple[torch.Tensor, ...]]:
        """One step of the dynamics alone (no reset in imagination). -> (the prior state, the prior's stats)."""
        deter = self.core(state.deter, state.stoch, action)
        prior = self.prior(deter)
        return State(deter, self.sample(prior, generator)), prior

    # ------------------------------------------------------------------ sequences

    def observe(self, state: State, actions: torch.Tensor, embeds: torch.Tensor, is_first: torch.Tensor,
                generator: torch.Generator | None = None):
        """Time-major [T, N, ...] previous actions (core inputs), embeddings and is_first from `state` [N, ...].
        -> (states [T, N, ...] as a State, posterior stats [T, N, ...], prior stats [T, N, ...])."""
        deters, stochs, posts = [], [], []
        for t in range(embeds.shape[0]):
            state, post = self.observe_step(state, actions[t], embeds[t], is_first[t], generator)
            deters.append(state.deter)
            stochs.append(state.stoch)
            posts.append(post)
        deter = torch.stack(deters)
        post = tuple(torch.stack(parts) for parts in zip(*posts))
        return State(deter, torch.stack(stochs)), post, self.prior(deter)
