"""DreamerV3 (Hafner et al. 2023, arXiv:2301.04104 v2 / Nature 2025), following the reference code's current
version throughout (danijar/dreamerv3 HEAD, read at f8817c4; docs/world-models/dreamer-planet.md,
column V3-HEAD): block-GRU RSSM with RMSNorm, zero initial state, replay context, one LaProp optimizer with AGC,
REINFORCE for discrete and continuous actions, the replay value loss, the discount inside the continue head.

    every env step (all envs): act with the posterior state, store the step and the state in the sequence replay;
        once the replay holds batch_size · batch_length steps, train_ratio / (batch_size · batch_length) updates
        per env step (the reference's `Ratio`: fractions carried over, the first call gives one)
    one update, on batch_size windows of batch_length steps plus a context step (whose stored state starts it):
        world model: `LatentModel.loss`
        imagination, without gradients: from every posterior state, `imag_horizon` steps of policy samples and
            the prior; rewards r̂ and continues ĉ from the heads, values v from the critic
        R = λ-returns(r̂, ĉ, v), w = cumprod(ĉ), S = max(1, EMA P95(R) - EMA P5(R))
        policy: -w · (log π(a|s) · (R - v) / S + actent · H[π(·|s)])
        critic: w · (two-hot CE(R) + slowreg · two-hot CE(slow critic's value))
        replay critic: the same on the replayed states, λ-returns bootstrapped by the imagined returns (weight 0.3,
            its gradient reaches the world model)
        one optimizer step on the sum; slow critic ← 0.02 · critic + 0.98 · slow critic
        the posterior states go back into the replay, to start later windows there

Deliberate choices: evaluation with `eval.deterministic` takes the policy's mode and the posterior latent's
(the reference always samples both);
continuous actions are the policy's unclipped samples in [-1, 1] units, clipped and scaled to the env's bounds on
the way out (the reference's ClipAction and NormalizeAction wrappers). Replay as the reference's
(`replay.online: True`): each fresh window is served once first, the rest of a batch is uniform
(`buffers/sequences.py`).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator
from torch import nn
from torch.distributions import Categorical

from rlfoundry.algos.base import AlgorithmConfig, Memory, Runtime
from rlfoundry.algos.families import LatentAgent
from rlfoundry.buffers import sized_by
from rlfoundry.buffers.sequences import SequenceReplay
from rlfoundry.config.errors import ConfigError
from rlfoundry.world_models import dists
from rlfoundry.world_models.imagination import PercentileScale, lambda_returns
from rlfoundry.world_models.laprop import LaProp
from rlfoundry.world_models.latent import (
    LatentModel,
    LatentModelConfig,
    check_observations,
    env_defaults,
    observe,
    time_major,
)
from rlfoundry.world_models.layers import mlp, output_layer
from rlfoundry.world_models.rssm import RSSM, State

# The reference's model sizes (configs.yaml `size*`): RSSM deter / hidden / classes, the width of every MLP, and the
# CNNs' depth.
SIZES = {"size1m": (512, 64, 4, 64, 4), "size12m": (2048, 256, 16, 256, 16), "size25m": (3072, 384, 24, 384, 24),
         "size50m": (4096, 512, 32, 512, 32), "size100m": (6144, 768, 48, 768, 48),
         "size200m": (8192, 1024, 64, 1024, 64)}


class DreamerConfig(AlgorithmConfig):
    name: Literal["dreamer"] = "dreamer"
    size: Literal[tuple(SIZES)] | None = Field(  # type: ignore[valid-type]
        "size1m", description="A reference model size: fills model.rssm.{deter,hidden,classes}, every width "
                              "(model.units, policy/critic units) and model.depth where they are not given; null: "
                              "give them all.")
    model: LatentModelConfig = Field(default_factory=LatentModelConfig, description="The world model.")
    units: PositiveInt = Field(64, description="Width of the policy and critic MLPs.")
    policy_layers: PositiveInt = Field(3, description="Hidden layers of the policy.")
    critic_layers: PositiveInt = Field(3, description="Hidden layers of the critic.")
    batch_size: PositiveInt = Field(16, description="Replayed windows per update.")
    batch_length: PositiveInt = Field(64, description="Trained steps per window (plus one context step).")
    train_ratio: PositiveFloat = Field(512.0, description="Replayed steps per env step: updates per env step = "
                                                          "train_ratio / (batch_size · batch_length).")
    imag_horizon: PositiveInt = Field(15, description="Imagined steps from each start state.")
    horizon: PositiveFloat = Field(333.0, description="Discount γ = 1 - 1/horizon, inside the continue target.")
    lam: float = Field(0.95, ge=0, le=1, description="λ of the returns.")
    actent: NonNegativeFloat = Field(3e-4, description="Entropy scale of the policy loss.")
    slow_rate: float = Field(0.02, gt=0, le=1, description="EMA rate of the slow critic, every update.")
    slowreg: NonNegativeFloat = Field(1.0, description="Weight of the critic's regulariser towards the slow critic.")
    repval: NonNegativeFloat = Field(0.3, description="Weight of the replay critic loss.")
    lr: PositiveFloat = Field(4e-5, description="Learning rate of the one LaProp optimizer.")
    warmup: NonNegativeInt = Field(1000, description="Updates of linear learning-rate warm-up from 0.")
    agc: NonNegativeFloat = Field(0.3, description="Adaptive gradient clipping ratio (0: off).")
    min_std: PositiveFloat = Field(0.1, description="Continuous policy: smallest std.")
    max_std: PositiveFloat = Field(1.0, description="Continuous policy: largest std.")
    replay_size: PositiveInt = Field(5_000_000, description="Replay capacity in steps (all envs); capped at the "
                                                            "run's total_timesteps.")
    replay_online: bool = Field(True, description="Serve each fresh window once before sampling uniformly (the "
                                                  "reference's replay.online); false: uniform only.")
    collect_steps: PositiveInt = Field(16, description="Vector env steps per iteration (between the trainer's "
                                                       "evaluations, logs and checkpoints).")

    @model_validator(mode="before")
    @classmethod
    def _size(cls, data: Any) -> Any:
        """A named size fills what the config leaves unset."""
        if not isinstance(data, dict) or data.get("size", "size1m") is None:
            return data
        size = data.get("size", "size1m")
        if size not in SIZES:
            return data  # the field's own validation names the allowed sizes
        deter, hidden, classes, units, depth = SIZES[size]
        model = dict(data.get("model") or {})
        model["rssm"] = {"deter": deter, "hidden": hidden, "classes": classes, **(model.get("rssm") or {})}
        model.setdefault("units", units)
        model.setdefault("depth", depth)
        return {"units": units, **data, "model": model}

    def check_with(self, num_envs: int) -> None:
        if self.train_ratio / (self.batch_size * self.batch_length) > 64:
            raise ValueError(f"algo.train_ratio = {self.train_ratio:g}: more than 64 updates per env step")

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """An id without a preset: `latent.env_defaults` (one env; images at 64 x 64). ALE ids get
        the reference's Atari 100k env (configs.yaml `atari100k`, `env.atari`): 64 × 64 RGB frames without
        stacking, action repeat 4, no sticky actions, up to 30 no-ops, lives not ending episodes, unclipped rewards
        (the two-hot heads take any scale); its train_ratio 256 and 110k steps. The single backend: the run checkpoints
        between env steps, and only its emulators are captured for an exact resume (beside the updates its stepping
        costs nothing: 0.40 against 0.38 ms a step on one env)."""
        env: dict[str, Any] = env_defaults(observation_space, env_id)
        layers: dict[str, Any] = {"env": env, "train": {"total_timesteps": 100_000}}
        if env_id.startswith("ALE/"):
            env.pop("vectorization")  # env.atari.backend steps ALE ids
            env["atari"] = {"backend": "single", "img_size": [64, 64], "grayscale": False, "frame_stack": 1,
                            "frame_skip": 4, "repeat_action_probability": 0.0, "noop_max": 30, "episodic_life": False,
                            "reward_clipping": False}
            layers.update(algo={"train_ratio": 256}, train={"total_timesteps": 110_000})
        return layers


def policy_distribution(out: torch.Tensor, discrete: bool, min_std: float, max_std: float):
    if discrete:
        return Categorical(logits=out.float(), validate_args=False)
    return dists.bounded_normal(out, min_std, max_std)


class Dreamer(LatentAgent):
    name = "dreamer"
    config = DreamerConfig
    graphs = True  # the whole update (not yet measured on a GPU: train.cuda_graphs=auto leaves it eager)
    # its model size as given, windows of 2 × 8 steps, updates from the 8th step on, 1 per 16 env steps
    smoke = ("algo.batch_size=2", "algo.batch_length=8", "algo.train_ratio=1", "algo.collect_steps=16")

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        algo, device = self.algo, self.device
        check_observations(spec, algo.model.cnn, "dreamer", "DreamerV3")
        self.discrete = spec.discrete
        if not self.discrete and len(spec.action_space.shape) != 1:
            raise ConfigError(f"algo.name = 'dreamer': {spec.id}'s actions {spec.action_space}: need Discrete or a 1-D Box")
        action_size = int(spec.action_space.n) if self.discrete else spec.action_space.shape[0]
        self.model = LatentModel(algo.model, spec.obs_shape, action_size, self.discrete).to(device)
        feature_size = self.model.rssm.feature_size
        outputs = action_size if self.discrete else 2 * action_size
        self.policy = nn.Sequential(mlp(feature_size, algo.units, algo.policy_layers),
                                    output_layer(algo.units, outputs, 0.01)).to(device)
        self.critic = nn.Sequential(mlp(feature_size, algo.units, algo.critic_layers),
                                    output_layer(algo.units, algo.model.bins, 0.0)).to(device)
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        params = [*self.model.parameters(), *self.policy.parameters(), *self.critic.parameters()]
        self.optimizer = LaProp(params, lr=algo.lr, eps=1e-20, agc=algo.agc, warmup=algo.warmup,
                                capturable=device.type == "cuda")
        self.slow_params: list[torch.Tensor] = list(self.slow_critic.parameters())
        self.critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self.graphed_step = runtime.graphed(self.gradient_step)
        self.retnorm = PercentileScale()
        capacity = min(algo.replay_size, cfg.train.total_timesteps + spec.num_envs)
        capacity = max(capacity, spec.num_envs * (algo.batch_length + 2))
        action_shape, action_dtype = ((), np.int64) if self.discrete else ((action_size,), np.float32)
        with sized_by("algo.replay_size", capacity):
            self.replay = SequenceReplay(capacity, spec.num_envs, spec.obs_shape, spec.obs_dtype, action_shape,
                                         action_dtype, feature_size, algo.batch_length if algo.replay_online else None)
        runtime.keep_replay(self.replay)
        self.ratio_last: float | None = None  # the reference's Ratio: env steps accounted for so far

    # ------------------------------------------------------------------ acting

    def act_step(self, obs: torch.Tensor, deter: torch.Tensor, stoch: torch.Tensor, prev: torch.Tensor,
                 starts: torch.Tensor, sample: bool) -> dict[str, torch.Tensor]:
        """The posterior after `obs`, its features and the policy's actions: sampled, or without `sample` the mode of
        both (the latent's and the policy's), so that a deterministic policy is one: the same observations from the
        same memory give the same actions."""
        with torch.no_grad():
            state = observe(self.model, obs, State(deter, stoch), prev, starts, mode=not sample)
            feats = RSSM.features(state)
            dist = self._policy(feats)
            if sample:
                actions = dist.sample()
            else:
                actions = dist.probs.argmax(-1) if self.discrete else dist.mean
        return {"actions": actions, "feats": feats, "deter": state.deter, "stoch": state.stoch}

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        out = self.latent_act(obs, memory if memory is not None else Memory(), False, not deterministic)
        return self.to_env(out["actions"].cpu().numpy())

    # ------------------------------------------------------------------ the loop

    @property
    def gamma(self) -> float:
        return 1.0 - 1.0 / self.algo.horizon

    def updates_owed(self, done: np.ndarray) -> int:
        """The reference's `Ratio(train_ratio / (batch_size · batch_length))` at the current env step."""
        if len(self.replay) < self.algo.batch_size * self.algo.batch_length \
                or self.replay.starts(self.algo.batch_length) <= 0:
            return 0
        rate = self.algo.train_ratio / (self.algo.batch_size * self.algo.batch_length)
        if self.ratio_last is None:
            self.ratio_last = float(self.env_steps)
            return 1
        owed = int((self.env_steps - self.ratio_last) * rate)
        self.ratio_last += owed / rate
        return owed

    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self.latent_act(obs, self.memory, True, True)
        return out["actions"].cpu().numpy(), out["feats"].cpu().numpy()

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        """The critic's value of the posterior state after o_t (what `act` just computed; its memory is (state,
        action))."""
        latent, _ = after
        with torch.inference_mode():
            value = self.model.twohot.mean(self.critic(RSSM.features(latent)))
        return {"value": float(value[0])}

    # ------------------------------------------------------------------ one update

    def update(self) -> dict[str, torch.Tensor]:
        algo = self.algo
        batch = self.replay.sample(algo.batch_size, algo.batch_length, self.rng)
        # only the context row's stored state is used: zeros where the agent had none there
        context = torch.as_tensor(batch.latents[:, 0] * batch.has_latent[:, 0, None], device=self.device)
        out = self.graphed_step(*time_major(batch, self.device), context)
        feats, loss = out.pop("feats"), out.pop("loss/total")
        latents = feats.transpose(0, 1).cpu().numpy()  # (the host waits for the step here)
        if not torch.isfinite(loss):  # checked after the step, which a graph holds with the loss
            raise FloatingPointError(f"DreamerV3 loss is {loss.item()} at update {self.updates + 1}: "
                                     + ", ".join(f"{k} {float(v):.4g}" for k, v in out.items()))
        self.updates += 1
        self.replay.write_latents(batch.rows + 1, batch.envs, latents)
        return out

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, is_first: torch.Tensor,
                      is_terminal: torch.Tensor, context: torch.Tensor) -> dict[str, torch.Tensor]:
        """One update on a replayed batch (time-major [L+1, N, ...]) from the context states [N, F]: world model,
        imagination, actor-critic and replay value losses, one LaProp step, the slow critic (a CUDA graph with
        train.cuda_graphs). Its metrics, the total loss (`loss/total`) and the posterior features (`feats`)."""
        algo = self.algo
        rssm = self.model.rssm
        terms, states = self.model.loss(rssm.state_of(context), obs[1:], rssm.action_input(actions[:-1]),
                                        rewards[1:], is_first[1:], is_terminal[1:], self.gamma)
        feats = RSSM.features(states)  # [T, B, F]
        imagined = self._imagine(feats.detach().flatten(0, 1))
        policy_loss, value_loss, returns, stats = self._actor_critic_losses(*imagined)
        repval_loss = self._replay_value_loss(feats, returns[0].reshape(feats.shape[:2]), rewards[1:], is_first[1:],
                                              is_terminal[1:])
        wm_loss = terms["loss"].mean()
        loss = wm_loss + policy_loss + value_loss + algo.repval * repval_loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.slow_params, self.critic_params, algo.slow_rate)
        out = {f"loss/{name}": value.detach().mean() for name, value in terms.items() if name != "loss"}
        out.update({"loss/world_model": wm_loss.detach(), "loss/policy": policy_loss.detach(),
                    "loss/value": value_loss.detach(), "loss/repval": repval_loss.detach(), **stats,
                    "loss/total": loss.detach(), "feats": feats.detach()})
        return out

    @torch.no_grad()
    def _imagine(self, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`imag_horizon` steps of the policy and the prior from start features [K, F] -> features [H+1, K, F] and
        the action taken in each of them [H+1, K, ...]."""
        rssm = self.model.rssm
        state = rssm.state_of(start)
        feats, actions = [start], []
        for _ in range(self.algo.imag_horizon):
            action = self._policy(feats[-1]).sample()
            actions.append(action)
            state, _ = rssm.imagine_step(state, rssm.action_input(action))
            feats.append(RSSM.features(state))
        actions.append(self._policy(feats[-1]).sample())
        return torch.stack(feats), torch.stack(actions)

    def _policy(self, feats: torch.Tensor):
        return policy_distribution(self.policy(feats), self.discrete, self.algo.min_std, self.algo.max_std)

    def _actor_critic_losses(self, feats: torch.Tensor, actions: torch.Tensor):
        algo, twohot = self.algo, self.model.twohot
        with torch.no_grad():
            rewards = self.model.predict_reward(feats)  # [H+1, K]: r̂_t on arriving at s_t
            cont = self.model.predict_continue(feats)
            values = twohot.mean(self.critic(feats))
            slow = twohot.mean(self.slow_critic(feats))
            returns = lambda_returns(rewards, cont, values, algo.lam)  # [H, K]
            weights = torch.cumprod(cont, 0)[:-1]
            scale = self.retnorm(returns)
            advantages = (returns - values[:-1]) / scale
        dist = self._policy(feats[:-1])
        policy_loss = -(weights * (dist.log_prob(actions[:-1]) * advantages + algo.actent * dist.entropy())).mean()
        logits = self.critic(feats[:-1])
        value_loss = (weights * (twohot.loss(logits, returns) + algo.slowreg * twohot.loss(logits, slow[:-1]))).mean()
        stats = {"diag/return_scale": scale, "diag/imagined_return": returns.mean(), "diag/value": values.mean(),
                 "diag/entropy": dist.entropy().detach().mean()}
        return policy_loss, value_loss, returns, stats

    def _replay_value_loss(self, feats, boot, rewards, is_first, is_terminal) -> torch.Tensor:
        """The critic on the replayed states [T, B, F] (gradient into the world model), towards λ-returns of the
        real rewards bootstrapped by the imagined returns `boot` [T, B], cut at episode ends."""
        algo, twohot = self.algo, self.model.twohot
        terminal = is_terminal.float()
        last = terminal.clone()  # a step is an episode's last when it terminates or the next one starts afresh
        last[:-1] = torch.maximum(last[:-1], is_first[1:].float())
        with torch.no_grad():
            targets = lambda_returns(rewards, self.gamma * (1 - terminal), boot, algo.lam * (1 - last))
            slow = twohot.mean(self.slow_critic(feats[:-1]))
        logits = self.critic(feats[:-1])
        per_step = twohot.loss(logits, targets) + algo.slowreg * twohot.loss(logits, slow)
        return ((1 - last[:-1]) * per_step).mean()

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(), "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
            "slow_critic": self.slow_critic.state_dict(), "optimizer": self.optimizer.state_dict(),
            "retnorm": self.retnorm.state_dict(),
            **self.replay_state(ratio_last=self.ratio_last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.slow_critic.load_state_dict(state["slow_critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.retnorm.load_state_dict(state["retnorm"])
        self.ratio_last = self.load_replay_state(state)["ratio_last"]
