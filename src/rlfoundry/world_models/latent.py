"""DreamerV3's world model (reference code HEAD; docs/world-models/dreamer-planet.md §1-§3, checked against
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
continue head alone. Image observations go through DreamerV3's CNN encoder and decoder (`vision.py`) instead of
the MLPs, with the reconstruction loss against image / 255 (or PlaNet's CNNs and 5-bit images, `cnn: planet`).

PlaNet's settings (google-research/planet `scripts/configs.py`) are options of the same model: Gaussian latents and
a GRU cell (`RSSMConfig`), ReLU without norms, a unit-variance Gaussian reward head weighted 10, no continue head,
and one KL(q ‖ p) term with 3 free nats (`kl_balance: false`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeFloat, PositiveInt
from torch import nn

from rlfoundry.config.base import StrictModel
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.spaces import packed_parts
from rlfoundry.world_models import dists, vision
from rlfoundry.world_models.layers import mlp, output_layer
from rlfoundry.world_models.rssm import RSSM, RSSMConfig, State


class LossScales(StrictModel):
    rec: NonNegativeFloat = Field(1.0, description="Reconstruction (decoder).")
    rew: NonNegativeFloat = Field(1.0, description="Reward head (PlaNet: 10).")
    con: NonNegativeFloat = Field(1.0, description="Continue head.")
    dyn: NonNegativeFloat = Field(1.0, description="KL dynamics term (trains the prior); paper v1 used 0.5.")
    rep: NonNegativeFloat = Field(0.1, description="KL representation term (trains the posterior).")
    kl: NonNegativeFloat = Field(1.0, description="The one KL term when kl_balance is off (PlaNet).")


class LatentModelConfig(StrictModel):
    rssm: RSSMConfig = Field(default_factory=RSSMConfig, description="The recurrent state-space model.")
    units: PositiveInt = Field(64, description="Width of the encoder, decoder and heads (size1m: 64).")
    depth: PositiveInt = Field(4, description="Image observations: the CNNs' channels are depth·(2, 3, 4, 4) "
                                              "(size1m: 4).")
    encoder_layers: PositiveInt = Field(3, description="Hidden layers of the vector encoder.")
    decoder_layers: PositiveInt = Field(3, description="Hidden layers of the vector decoder.")
    head_layers: PositiveInt = Field(1, description="Hidden layers of the reward and continue heads.")
    bins: PositiveInt = Field(255, description="Two-hot bins of the reward head (and the critic).")
    free_nats: NonNegativeFloat = Field(1.0, description="Free bits of each KL term, per (batch, time) element "
                                                         "(PlaNet: 3).")
    kl_balance: bool = Field(True, description="DreamerV3's two KL terms (dyn, rep); false: PlaNet's one KL(q ‖ p) "
                                               "training both sides.")
    cnn: Literal["dreamerv3", "planet"] = Field(
        "dreamerv3", description="Image observations: DreamerV3's CNNs (`depth`; H, W divisible by 16) or PlaNet's "
                                 "(64 × 64 only, `image_bits`); see world_models/vision.py.")
    image_bits: int = Field(8, ge=1, le=8, description="PlaNet's CNNs: bits per image channel kept, with uniform "
                                                       "dequantisation noise (PlaNet: 5).")
    reward_head: Literal["twohot", "normal"] = Field(
        "twohot", description="DreamerV3's two-hot over symexp bins, or PlaNet's unit-variance Gaussian.")
    continue_head: bool = Field(True, description="Predict episode continuation (PlaNet has none).")
    loss_scales: LossScales = Field(default_factory=LossScales, description="Weights of the world-model terms.")


class LatentModel(nn.Module):
    def __init__(self, cfg: LatentModelConfig, obs_shape: tuple[int, ...], action_size: int, discrete_actions: bool):
        super().__init__()
        self.cfg = cfg
        U, norm, act = cfg.units, cfg.rssm.norm, cfg.rssm.act
        self.images = len(obs_shape) == 3
        self.encoder: nn.Module
        self.decoder: nn.Module
        if self.images:
            channels, height, width = obs_shape
            image_shape = (channels, height, width)
            encoder: vision.PlaNetEncoder | vision.ImageEncoder = (
                vision.PlaNetEncoder(image_shape) if cfg.cnn == "planet" else
                vision.ImageEncoder(image_shape, cfg.depth))
            self.encoder = encoder
            embed_size = encoder.output_size
        else:
            self.encoder = mlp(obs_shape[0], U, cfg.encoder_layers, norm, act)
            embed_size = U
        self.rssm = RSSM(cfg.rssm, action_size, embed_size, discrete_actions)
        F_ = self.rssm.feature_size
        if self.images:
            self.decoder = (vision.PlaNetDecoder(image_shape, F_) if cfg.cnn == "planet" else
                            vision.ImageDecoder(image_shape, cfg.depth, cfg.rssm.deter, self.rssm.stoch_size, U))
        else:
            self.decoder = nn.Sequential(mlp(F_, U, cfg.decoder_layers, norm, act), output_layer(U, obs_shape[0], 1.0))
        twohot = cfg.reward_head == "twohot"
        self.reward = nn.Sequential(mlp(F_, U, cfg.head_layers, norm, act),
                                    output_layer(U, cfg.bins, 0.0) if twohot else output_layer(U, 1, 1.0))
        self.cont = (nn.Sequential(mlp(F_, U, cfg.head_layers, norm, act), output_layer(U, 1, 1.0))
                     if cfg.continue_head else None)
        self.twohot = dists.TwoHot(cfg.bins)

    @property
    def device(self) -> torch.device:
        last = self.rssm.prior_net[-1]
        assert isinstance(last, nn.Linear)  # output_layer's
        return last.weight.device

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the encoder takes them and the decoder reconstructs them: symlog(vectors), or images as
        `vision.network_input` prepares them for the model's CNNs."""
        if self.images:
            return vision.network_input(obs, self.cfg.cnn, self.cfg.image_bits)
        return dists.symlog(obs.float())

    def embed(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.inputs(obs))

    def reconstruction_loss(self, feats: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """[..., F] features, [..., *obs_shape] `inputs(obs)` -> [...]: the squared error summed over the
        observation (PlaNet's images: halved, the unit-variance Gaussian's negative log-likelihood)."""
        error = (self.decoder(feats) - inputs).square()
        if not self.images:
            return error.sum(-1)
        error = error.sum((-3, -2, -1))
        return 0.5 * error if self.cfg.cnn == "planet" else error

    def loss(self, start: State, obs: torch.Tensor, prev_actions: torch.Tensor, rewards: torch.Tensor,
             is_first: torch.Tensor, is_terminal: torch.Tensor, discount: float) -> tuple[dict[str, torch.Tensor], State]:
        """Time-major [T, N, ...] observations, the core's inputs of the previous actions, rewards, is_first and
        is_terminal, from the context `start` [N, ...]. -> (each term [T, N] unweighted, plus `loss` [T, N]; the
        posterior states [T, N, ...])."""
        inputs = self.inputs(obs)
        states, post, prior = self.rssm.observe(start, prev_actions, self.encoder(inputs), is_first)
        feats = RSSM.features(states)
        cfg = self.cfg
        terms = {"rec": self.reconstruction_loss(feats, inputs)}
        if cfg.reward_head == "twohot":
            terms["rew"] = self.twohot.loss(self.reward(feats), rewards)
        else:  # -log N(r; μ, 1) up to a constant
            terms["rew"] = 0.5 * (self.reward(feats).squeeze(-1) - rewards).square()
        if self.cont is not None:
            terms["con"] = F.binary_cross_entropy_with_logits(
                self.cont(feats).squeeze(-1), (1.0 - is_terminal.float()) * discount, reduction="none")
        if cfg.kl_balance:
            terms["dyn"], terms["rep"] = dists.kl_balance(self.rssm.kl, post, prior, cfg.free_nats)
        else:  # PlaNet: max(KL, free) has the gradient of max(0, KL - free) (google-research/planet, both eras)
            terms["kl"] = self.rssm.kl(*post, *prior).clamp(min=cfg.free_nats)
        terms["loss"] = sum(getattr(cfg.loss_scales, name) * term for name, term in terms.items())
        return terms, states

    def predict_reward(self, feats: torch.Tensor) -> torch.Tensor:
        out = self.reward(feats)
        return self.twohot.mean(out) if self.cfg.reward_head == "twohot" else out.squeeze(-1)

    def predict_continue(self, feats: torch.Tensor) -> torch.Tensor:
        assert self.cont is not None, "predict_continue needs continue_head"
        return torch.sigmoid(self.cont(feats).squeeze(-1))


# ---------------------------------------------------------------- acting with a latent model (DreamerV3, PlaNet)


IMAGE_SIDE = 64  # DreamerV3 (every env's `size`) and PlaNet observe 64 x 64 images


def env_defaults(observation_space, env_id: str) -> dict:
    """The env section DreamerV3 and PlaNet take for an id without a preset: one env, observations as they come (the
    world model symlogs vectors), and images of another size resized to 64 x 64 (`env.img_size`) where the id's
    family has no frame size option of its own."""
    from rlfoundry.envs import is_image_space, size_option

    env = {"num_envs": 1, "vectorization": "sync", "normalize_obs": False, "normalize_reward": False}
    if is_image_space(observation_space) and size_option(env_id) is None \
            and observation_space.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        env["img_size"] = IMAGE_SIDE
    return env


def check_observations(spec, cnn: str, algo: str, name: str) -> None:
    """ConfigError unless the env's observations go through the model: vectors (a 1-D Box) or uint8 images the `cnn`
    networks take. `algo` and `name` (e.g. 'dreamer', 'DreamerV3') name the agent in the message."""
    if packed_parts(spec.observation_space):  # a Dict or Tuple with images, packed
        raise ConfigError(f"algo.name = '{algo}': {spec.id} observes images inside a Dict or Tuple; {name}'s model "
                          "encodes and decodes one image or one vector: keep one of them with env.wrappers "
                          "(FilterObservation)")
    problem = None if len(spec.obs_shape) == 1 else vision.check_image(spec.obs_shape, cnn)
    if problem is not None or (len(spec.obs_shape) == 3 and spec.obs_dtype != np.uint8):
        from rlfoundry.envs import size_option

        own = size_option(spec.id)
        hint = "" if len(spec.obs_shape) != 3 else \
            f"; set their size with {own}" if own is not None else f"; resize them with env.img_size={IMAGE_SIDE}"
        raise ConfigError(f"algo.name = '{algo}': {spec.id} gives {spec.observation_space} observations; {name} "
                          f"takes vectors (a 1-D Box) or uint8 {problem or 'images'}{hint}")


def acting_inputs(model: LatentModel, memory, n: int, action_shape: tuple[int, ...]) -> tuple[State, torch.Tensor, np.ndarray]:
    """What the next acting step starts from: the state and previous actions `memory.state` holds (zeros, and an
    episode start for every env, at the first call) and which observations begin episodes [N] (`memory.starts`; see
    `rlfoundry.algos.base.Memory`). The caller stores (the new state, its actions) back into `memory.state`."""
    if memory.state is None:
        memory.state = (model.rssm.initial(n, model.device), torch.zeros(n, *action_shape, device=model.device))
        starts = np.ones(n, bool)
    else:
        starts = memory.starts if memory.starts is not None else np.zeros(n, bool)
    state, prev = memory.state
    return state, prev, starts


def observe(model: LatentModel, obs: torch.Tensor, state: State, prev: torch.Tensor, starts: torch.Tensor,
            mode: bool = False) -> State:
    """The posterior state after observations `obs` [N, ...] (on the device) from `state` and the previous actions,
    restarted where `starts`, its latent sampled or with `mode` the most likely; call it without gradients."""
    return model.rssm.observe_step(state, model.rssm.action_input(prev), model.embed(obs), starts, mode=mode)[0]


def acting_arrays(memory, obs: np.ndarray | None) -> dict[str, np.ndarray]:
    """The acting position for a checkpoint's .npz: the observation the next step starts from, the memory's state,
    previous actions and episode-start flags (nothing before the first step)."""
    if obs is None or memory.state is None:
        return {}
    state, prev = memory.state
    flags = lambda a: np.zeros(len(obs), bool) if a is None else np.asarray(a, bool)
    return {"current_obs": np.ascontiguousarray(obs), "acting_deter": state.deter.cpu().numpy(),
            "acting_stoch": state.stoch.cpu().numpy(), "acting_prev": prev.cpu().numpy(),
            "acting_starts": flags(memory.starts), "acting_ended": flags(memory._ended)}


ACTING_KEYS = ("current_obs", "acting_deter", "acting_stoch", "acting_prev", "acting_starts", "acting_ended")


def restore_acting(arrays: dict[str, np.ndarray], memory, device) -> np.ndarray | None:
    """Put `acting_arrays`' state back into `memory`; returns the observation the next step starts from, or None."""
    if "current_obs" not in arrays:
        return None
    tensor = lambda a: torch.as_tensor(np.array(a), device=device)
    memory.state = (State(tensor(arrays["acting_deter"]), tensor(arrays["acting_stoch"])), tensor(arrays["acting_prev"]))
    memory.starts = np.array(arrays["acting_starts"], bool)
    memory._ended = np.array(arrays["acting_ended"], bool)
    return np.array(arrays["current_obs"])


def time_major(batch, device) -> tuple[torch.Tensor, ...]:
    """A replayed `SequenceBatch` as time-major [L+1, N, ...] tensors: obs, actions, rewards, is_first, is_terminal."""
    return tuple(torch.as_tensor(array, device=device).transpose(0, 1)
                 for array in (batch.obs, batch.actions, batch.rewards, batch.is_first, batch.is_terminal))


def to_env_actions(actions: np.ndarray, space) -> np.ndarray:
    """Actions in [-1, 1] units (latent agents' Box actions) clipped and scaled to the env's bounds `space`;
    discrete actions pass as they are."""
    if not hasattr(space, "low"):
        return actions
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return low + (np.clip(actions, -1.0, 1.0) + 1.0) * (high - low) / 2
