"""PlaNet (Hafner et al. 2019, arXiv:1811.04551): a latent dynamics model learned from replayed sequences, and
actions chosen by planning in its latent space with the cross-entropy method. Settings are the camera-ready ones
of google-research/planet (`scripts/configs.py`; docs/world-models/dreamer-planet.md §7, checked
against the source):

    seed_episodes episodes of uniformly random actions
    every env step: the posterior state after the observation; CEM over action sequences of plan_horizon steps
        (candidates, top_k, iterations), each scored by the sum of rewards the model predicts along the prior's
        rollout; act with the first action of the final mean, plus N(0, action_noise) while collecting
    after every finished episode (once the seed episodes are in): updates_per_episode updates, each on batch_size
        windows of batch_length steps, starting from the zero state:
        loss = rec + 10 · reward + max(KL(q ‖ p), 3 free nats); Adam (lr 1e-3, eps 1e-4), gradient norm ≤ 1000

The model is `world_models/latent.LatentModel` with PlaNet's options (Gaussian latents of 30 dims, a GRU of 200,
ReLU layers of 200 without norms, a Gaussian reward head, no continue head, one KL term) and `world_models/planning`
plans. Images (uint8, 64 × 64) go through PlaNet's CNNs with 5-bit inputs (`world_models/vision.py`). Deliberate
choices: vectors go through the shared vector encoder and decoder (symlog, as DreamerV3; PlaNet itself only learned
from pixels); the reward head has `head_layers` × `units` (PlaNet 3 × 300);
the learning-rate warm-up of the camera-ready code (removed later in the repository) is left out; actions are
planned in [-1, 1] and scaled to the env's bounds.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from rlfoundry.algos.base import AlgorithmConfig, Memory, Runtime
from rlfoundry.algos.families import LatentAgent
from rlfoundry.buffers import sized_by
from rlfoundry.buffers.sequences import SequenceReplay
from rlfoundry.config.errors import ConfigError
from rlfoundry.world_models.latent import (
    LatentModel,
    LatentModelConfig,
    check_observations,
    env_defaults,
    observe,
    time_major,
)
from rlfoundry.world_models.planning import cross_entropy_method
from rlfoundry.world_models.rssm import RSSM, State

# PlaNet's model (google-research/planet configs.py, camera-ready 0c6f7d3): state 30, belief 200, hidden 200, ReLU,
# min std 0.1, free nats 3, reward loss scale 10.
PLANET_MODEL = {
    "rssm": {"deter": 200, "hidden": 200, "stoch": 30, "classes": 0, "blocks": 0, "prior_layers": 1,
             "posterior_layers": 1, "norm": False, "act": "relu", "min_std": 0.1},
    "units": 200, "encoder_layers": 2, "decoder_layers": 2, "head_layers": 3, "free_nats": 3.0,
    "kl_balance": False, "reward_head": "normal", "continue_head": False, "loss_scales": {"rew": 10.0, "kl": 1.0},
    "cnn": "planet", "image_bits": 5,
}


def merged(base: dict, given: dict) -> dict:
    """`given` over `base`, nested dicts merged key by key."""
    out = dict(base)
    for key, value in given.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


class PlaNetConfig(AlgorithmConfig):
    name: Literal["planet"] = "planet"
    model: LatentModelConfig = Field(default_factory=lambda: LatentModelConfig(**PLANET_MODEL),
                                     description="The world model; what is given here changes PlaNet's settings.")
    batch_size: PositiveInt = Field(50, description="Replayed windows per update.")
    batch_length: PositiveInt = Field(50, description="Steps per window.")
    lr: PositiveFloat = Field(1e-3, description="Adam's learning rate.")
    adam_eps: PositiveFloat = Field(1e-4, description="Adam's epsilon.")
    max_grad_norm: PositiveFloat = Field(1000.0, description="Global gradient-norm clip.")
    seed_episodes: NonNegativeInt = Field(5, description="Episodes of uniformly random actions first.")
    updates_per_episode: NonNegativeInt = Field(100, description="Updates after each finished episode.")
    plan_horizon: PositiveInt = Field(12, description="CEM: steps of each planned action sequence.")
    candidates: PositiveInt = Field(1000, description="CEM: sequences drawn per iteration.")
    top_k: PositiveInt = Field(100, description="CEM: best sequences the next distribution is fitted to.")
    iterations: PositiveInt = Field(10, description="CEM: refinements per decision.")
    action_noise: NonNegativeFloat = Field(0.3, description="Std of the Gaussian noise on collected actions.")
    replay_size: PositiveInt = Field(1_000_000, description="Replay capacity in steps (capped at total_timesteps).")
    collect_steps: PositiveInt = Field(16, description="Vector env steps per iteration.")

    @model_validator(mode="before")
    @classmethod
    def _planet_model(cls, data: Any) -> Any:
        """A partial `model` section changes PlaNet's model settings, not DreamerV3's defaults."""
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            data = {**data, "model": merged(PLANET_MODEL, data["model"])}
        return data

    def check_with(self, num_envs: int) -> None:
        if self.top_k > self.candidates:
            raise ValueError(f"algo.top_k = {self.top_k}: at most algo.candidates ({self.candidates})")

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """An id without a preset: `latent.env_defaults` (one env; images at 64 x 64)."""
        return {"env": env_defaults(observation_space, env_id), "train": {"total_timesteps": 100_000}}


class PlaNet(LatentAgent):
    name = "planet"
    actions = ("Box",)
    graphs = True  # the world-model update (not yet measured on a GPU: train.cuda_graphs=auto leaves it eager)
    config = PlaNetConfig
    # its model, a small plan (16 candidates, 2 iterations), 2 updates per episode
    smoke = ("algo.batch_size=2", "algo.batch_length=8", "algo.seed_episodes=1", "algo.updates_per_episode=2",
             "algo.candidates=16", "algo.top_k=4", "algo.iterations=2", "algo.collect_steps=16")

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        algo, device = self.algo, self.device
        check_observations(spec, algo.model.cnn, "planet", "PlaNet")
        if spec.discrete or len(spec.action_space.shape) != 1:
            raise ConfigError(f"algo.name = 'planet': {spec.id} has {spec.action_space} actions; PlaNet plans 1-D Box "
                              "actions")
        self.action_size = spec.action_space.shape[0]
        self.model = LatentModel(algo.model, spec.obs_shape, self.action_size, False).to(device)
        # capturable on CUDA: a graph can hold its step (its lr is a constant)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=algo.lr, eps=algo.adam_eps,
                                          capturable=self.device.type == "cuda")
        self.graphed_step = runtime.graphed(self.gradient_step)
        capacity = max(min(algo.replay_size, cfg.train.total_timesteps + spec.num_envs),
                       spec.num_envs * (algo.batch_length + 2))
        with sized_by("algo.replay_size", capacity):
            self.replay = SequenceReplay(capacity, spec.num_envs, spec.obs_shape, spec.obs_dtype, (self.action_size,),
                                         np.float32, self.model.rssm.feature_size)
        runtime.keep_replay(self.replay)
        self.episodes = self.owed = 0

    # ------------------------------------------------------------------ acting

    def act_step(self, obs: torch.Tensor, deter: torch.Tensor, stoch: torch.Tensor, prev: torch.Tensor,
                 starts: torch.Tensor, noise: float, random: bool) -> dict[str, torch.Tensor]:
        """The posterior after `obs` and the planned actions in [-1, 1] (Gaussian `noise` added), or uniformly
        random ones while seeding."""
        n, algo, rssm = obs.shape[0], self.algo, self.model.rssm
        with torch.no_grad():
            state = observe(self.model, obs, State(deter, stoch), prev, starts)
        if random:
            actions = torch.rand(n, self.action_size, device=self.device) * 2 - 1
        else:
            def score(candidates: torch.Tensor) -> torch.Tensor:  # [N, J, H, A] -> [N, J] predicted reward sums
                J = candidates.shape[1]  # each env's state repeated for its J candidates
                rollout = State(*(part.unsqueeze(1).expand(n, J, *part.shape[1:]).reshape(n * J, *part.shape[1:])
                                  for part in state))
                total = torch.zeros(n * J, device=self.device)
                for t in range(candidates.shape[2]):
                    rollout, _ = rssm.imagine_step(rollout, candidates[:, :, t].reshape(n * J, -1))
                    total += self.model.predict_reward(RSSM.features(rollout))
                return total.reshape(n, J)

            with torch.no_grad():
                actions = cross_entropy_method(score, n, algo.plan_horizon, self.action_size, algo.candidates,
                                               algo.top_k, algo.iterations, device=self.device)
                if noise:
                    actions = (actions + noise * torch.randn_like(actions)).clamp(-1, 1)
        return {"actions": actions, "deter": state.deter, "stoch": state.stoch}

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        out = self.latent_act(obs, memory if memory is not None else Memory(), False,
                              0.0 if deterministic else self.algo.action_noise, False)
        return self.to_env(out["actions"].cpu().numpy())

    # ------------------------------------------------------------------ the loop

    @property
    def gamma(self) -> float:
        return 1.0  # PlaNet plans undiscounted reward sums

    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, None]:
        seeding = self.episodes < self.algo.seed_episodes
        return self.latent_act(obs, self.memory, True, self.algo.action_noise, seeding)["actions"].cpu().numpy(), None

    def updates_owed(self, done: np.ndarray) -> int:
        """`updates_per_episode` for each episode that ends after the seed episodes, once the replay has a window."""
        algo = self.algo
        for _ in range(int(done.sum())):
            self.episodes += 1
            if self.episodes >= algo.seed_episodes:
                self.owed += algo.updates_per_episode
        due = self.owed if self.replay.starts(algo.batch_length - 1) > 0 else 0
        self.owed -= due
        return due

    def update(self) -> dict[str, torch.Tensor]:
        algo = self.algo
        # windows of batch_length steps: the replay's context row is the first observed step here (PlaNet starts
        # every window from the zero state, with the action before its first step unknown, i.e. zero)
        batch = self.replay.sample(algo.batch_size, algo.batch_length - 1, self.rng)
        out = self.graphed_step(*time_major(batch, self.device))
        loss = out["loss/world_model"]
        if not torch.isfinite(loss):  # checked after the step, which a graph holds with the loss
            raise FloatingPointError(f"PlaNet loss is {loss.item()} at update {self.updates + 1}: "
                                     + ", ".join(f"{k} {float(v):.4g}" for k, v in out.items()))
        self.updates += 1
        return out

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, is_first: torch.Tensor,
                      is_terminal: torch.Tensor) -> dict[str, torch.Tensor]:
        """One world-model step on a replayed batch (time-major [L, N, ...]): the loss, clipped gradients, Adam (a
        CUDA graph with train.cuda_graphs). Its metrics."""
        prev = torch.cat([torch.zeros_like(actions[:1]), actions[:-1]])
        rssm = self.model.rssm
        terms, _ = self.model.loss(rssm.initial(self.algo.batch_size, self.device), obs, rssm.action_input(prev),
                                   rewards, is_first, is_terminal, 1.0)
        loss = terms["loss"].mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.algo.max_grad_norm)
        self.optimizer.step()
        out = {f"loss/{name}": value.detach().mean() for name, value in terms.items() if name != "loss"}
        out.update({"loss/world_model": loss.detach(), "diag/grad_norm": grad_norm})
        return out

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            **self.replay_state(episodes=self.episodes, owed=self.owed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        counters = self.load_replay_state(state)
        self.episodes, self.owed = counters["episodes"], counters["owed"]
