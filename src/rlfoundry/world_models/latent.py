"""DreamerV3's world model (reference code HEAD; fact sheet dreamer_planet.md §1-§3, checked against
danijar/dreamerv3 f8817c4 `dreamerv3/rssm.py`, `agent.py`): an encoder, the RSSM, a decoder and reward and continue
heads, trained on replayed sequences with one loss per (batch, time) element:

    embed_t  = encoder(symlog(o_t))                                  3 × Dense(units) + RMSNorm + SiLU
    states   = RSSM.observe(context state, a_{t-1}, embed_t, is_first_t)
    rec_t    = Σ_dims (decoder(s_t) - symlog(o_t))²                  3 × Dense(units), a linear output
    rew_t    = two-hot cross-entropy of reward(s_t) against r_t      1 × Dense(units), a zero-initialised output
    con_t    = binary cross-entropy of continue(s_t) against (1 - terminal_t) · (1 - 1/horizon)
    dyn_t, rep_t = KL balancing with free bits (`dists.kl_balance`)
    loss_t   = rec·rec_t + rew·rew_t + con·con_t + dyn·dyn_t + rep·rep_t        (1, 1, 1, 1, 0.1)

The continue target carries the discount 1 - 1/horizon (HEAD `contdisc`), so imagination discounts through the
continue head alone. Observations here are vectors; pixel observations (DreamerV3's CNN encoder and decoder) are
refused by the agent with a clear message until they are added.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeFloat, PositiveInt
from torch import nn

from rlfoundry.config.base import StrictModel
from rlfoundry.world_models import dists
from rlfoundry.world_models.layers import mlp, output_layer
from rlfoundry.world_models.rssm import RSSM, RSSMConfig, State


class LossScales(StrictModel):
    rec: NonNegativeFloat = Field(1.0, description="Reconstruction (decoder).")
    rew: NonNegativeFloat = Field(1.0, description="Reward head.")
    con: NonNegativeFloat = Field(1.0, description="Continue head.")
    dyn: NonNegativeFloat = Field(1.0, description="KL dynamics term (trains the prior); paper v1 used 0.5.")
    rep: NonNegativeFloat = Field(0.1, description="KL representation term (trains the posterior).")


class LatentModelConfig(StrictModel):
    rssm: RSSMConfig = Field(default_factory=RSSMConfig, description="The recurrent state-space model.")
    units: PositiveInt = Field(64, description="Width of the encoder, decoder and heads (size1m: 64).")
    encoder_layers: PositiveInt = Field(3, description="Hidden layers of the vector encoder.")
    decoder_layers: PositiveInt = Field(3, description="Hidden layers of the vector decoder.")
    head_layers: PositiveInt = Field(1, description="Hidden layers of the reward and continue heads.")
    bins: PositiveInt = Field(255, description="Two-hot bins of the reward head (and the critic).")
    free_nats: NonNegativeFloat = Field(1.0, description="Free bits of each KL term, per (batch, time) element.")
    loss_scales: LossScales = Field(default_factory=LossScales, description="Weights of the world-model terms.")


class LatentModel(nn.Module):
    def __init__(self, cfg: LatentModelConfig, obs_size: int, action_size: int, discrete_actions: bool):
        super().__init__()
        self.cfg = cfg
        U = cfg.units
        self.encoder = mlp(obs_size, U, cfg.encoder_layers)
        self.rssm = RSSM(cfg.rssm, action_size, U, discrete_actions)
        F_ = self.rssm.feature_size
        self.decoder = nn.Sequential(mlp(F_, U, cfg.decoder_layers), output_layer(U, obs_size, 1.0))
        self.reward = nn.Sequential(mlp(F_, U, cfg.head_layers), output_layer(U, cfg.bins, 0.0))
        self.cont = nn.Sequential(mlp(F_, U, cfg.head_layers), output_layer(U, 1, 1.0))
        self.twohot = dists.TwoHot(cfg.bins)

    def _apply(self, fn, recurse=True):  # keep the two-hot bins on the model's device
        super()._apply(fn, recurse)
        self.twohot.to(self.decoder[-1].weight.device)
        return self

    def embed(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(dists.symlog(obs.float()))

    def loss(self, start: State, obs: torch.Tensor, prev_actions: torch.Tensor, rewards: torch.Tensor,
             is_first: torch.Tensor, is_terminal: torch.Tensor, discount: float) -> tuple[dict[str, torch.Tensor], State]:
        """Time-major [T, N, ...] observations, the core's inputs of the previous actions, rewards, is_first and
        is_terminal, from the context `start` [N, ...]. -> (each term [T, N] unweighted, plus `loss` [T, N]; the
        posterior states [T, N, ...])."""
        states, post, prior = self.rssm.observe(start, prev_actions, self.embed(obs), is_first)
        feats = RSSM.features(states)
        scales = self.cfg.loss_scales
        terms = {
            "rec": (self.decoder(feats) - dists.symlog(obs.float())).square().sum(-1),
            "rew": self.twohot.loss(self.reward(feats), rewards),
            "con": F.binary_cross_entropy_with_logits(
                self.cont(feats).squeeze(-1), (1.0 - is_terminal.float()) * discount, reduction="none"),
        }
        terms["dyn"], terms["rep"] = dists.kl_balance(self.rssm.kl, post, prior, self.cfg.free_nats)
        terms["loss"] = sum(getattr(scales, name) * terms[name] for name in ("rec", "rew", "con", "dyn", "rep"))
        return terms, states

    def predict_reward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.twohot.mean(self.reward(feats))

    def predict_continue(self, feats: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.cont(feats).squeeze(-1))
