"""SimPLe: model-based RL on Atari 100k (Kaiser et al. 2019, arXiv:1903.00374), with MBARC's reward strategies.

Defaults follow the MBARC PyTorch port (tag MB, thomas-schillaci/mbarc_atari;
docs/world-models/simple-mbarc.md, whose § numbers are cited below). One `iterate` is one SimPLe epoch:

    epoch 0 first: random_steps real steps with uniformly random actions                           §1
    every epoch:
        collect real_steps_per_epoch real steps with the policy, actions sampled at temperature 1,
            into the frame replay (the env is reset first; the episode left unfinished stays unsampled)  §1
        world model: world_model_steps optimizer steps (× first_epoch_multiplier in epoch 0) on random windows
            of rollout_length real steps, feeding its own predictions back (scheduled sampling in epoch 0) §2.3
        reward head: the strategy's batches (strategy `online`: trained inside the world-model loss)     §4
        PPO inside the model: ppo_updates × z updates, each on a fresh rollout of sim_envs simulated envs
            × ppo.num_steps steps restarted from real frame stacks; z = 2 at epochs E-8 and E-4, 3 at E-1
            (MB: 7, 11 and 14 of 15)                                                                     §3
    evaluation: the trainer's, in the real env (whole games, unclipped scores)

The number of epochs E follows from train.total_timesteps: (total - random_steps) / real_steps_per_epoch.

Deliberate choices (explained in docs/guide/model-based.md and simple-mbarc.md §2.6): tensor2tensor's behaviour
where MB differs (no dropout in the simulator, the latent warm-up ramping up, area-averaged frames, a simulated
episode that really ends); MB's defects left out, each with a test; the real env's reset steps neither stored nor
counted as real steps; rlfoundry's PPO (`algos/ppo.py`) with MB's settings inside the model; evaluation sampling at
`eval_temperature` (MB 0.5) unless eval.deterministic.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from rlfoundry.algos.base import Agent, AlgorithmConfig, Iteration, Memory, Runtime
from rlfoundry.algos.families import actor_critic_outputs
from rlfoundry.algos.ppo import PPO, PPOConfig
from rlfoundry.buffers.frames import FrameReplay
from rlfoundry.buffers.rollout import RolloutCollector
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import EnvInfo
from rlfoundry.nets.heads import CategoricalHead
from rlfoundry.nets.policy import GreedyActorCritic
from rlfoundry.world_models.next_frame import NextFrameConfig, NextFramePredictor
from rlfoundry.world_models.reward_strategies import (
    REWARD_BATCH_SIZE,
    REWARD_STEPS_PER_EPOCH,
    Strategy,
    reward_training_indices,
)
from rlfoundry.world_models.simulated_env import SimulatedEnv
from rlfoundry.world_models.training import Adafactor, train_reward_head, train_world_model

# PPO inside the model, MB `ppo_wrapper.PPO` and `train_agent_sim_env` (§3): rollouts of 50 steps of 16 envs, Adam
# lr 1e-4 (eps 1e-5), clip 0.1, clipped value loss with weight 0.5, entropy 0.01, γ 0.99, λ 0.95, 4 epochs of 5
# minibatches (160 samples), gradient norm 0.5.
MB_PPO = dict(lr=1e-4, num_steps=50, minibatch_size=160, update_epochs=4, clip_coef=0.1, clip_vloss=True,
              vf_coef=0.5, ent_coef=0.01, gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5, adam_eps=1e-5)


class SimpleConfig(AlgorithmConfig):
    name: Literal["simple"] = "simple"
    random_steps: NonNegativeInt = Field(6400, description="Real steps of uniformly random play before epoch 0 (§1).")
    real_steps_per_epoch: PositiveInt = Field(6400, description="Real steps collected per epoch (§1).")
    frame_stack: PositiveInt = Field(4, description="Frames per observation; the env's channels are frame_stack × C.")
    collect_temperature: float = Field(1.0, ge=0, description="Softmax temperature of real collection (0: argmax).")
    eval_temperature: float = Field(0.5, ge=0, description="Softmax temperature of evaluation (MB 0.5).")
    world_model: NextFrameConfig = Field(default_factory=NextFrameConfig, description="The predictor's layers (§2).")
    world_model_steps: PositiveInt = Field(15_000, description="World-model optimizer steps per epoch (§2.3).")
    first_epoch_multiplier: PositiveInt = Field(3, description="Epoch 0 trains the world model this many times longer.")
    world_model_batch: PositiveInt = Field(4, description="Windows per world-model batch (§2.3).")
    rollout_length: PositiveInt = Field(50, description="Real steps per world-model training window (§2.3).")
    scheduled_sampling_steps: PositiveInt = Field(
        22_250, description="Epoch 0's scheduled sampling reaches free-running after this many steps (MB, §2.3).")
    latent_warmup_steps: PositiveInt = Field(
        40_000, description="World-model steps of the latent warm-up ramps (T2T; MB ends its ramps in epoch 0).")
    input_noise: float = Field(0.05, ge=0, le=1, description="P(an input pixel is replaced by the batch median).")
    reward_strategy: Strategy = Field("mbarc", description="How the reward head trains (MBARC, §4).")
    reward_steps: PositiveInt | None = Field(
        None, description="Reward-head batches per epoch; None: the strategy's own count (MB, §4.1).")
    cbf_loss: bool = Field(False, description="Strategy online: MBARC's class-balanced focal loss instead of CE.")
    sim_envs: PositiveInt = Field(16, description="Simulated envs PPO trains on (§3).")
    ppo_updates: PositiveInt = Field(1000, description="PPO updates per epoch before the z multiplier (§3).")
    add_value: bool = Field(True, description="The last simulated reward adds the world model's value (MB; §3).")
    sim_temperature: float = Field(1.0, gt=0, description="Sampling temperature of the simulator's latent bits.")
    flip_first_random: bool = Field(
        True, description="The last simulated env restarts from the collection phase's first frame stack (§3).")
    ppo: PPOConfig = Field(default_factory=lambda: PPOConfig(**MB_PPO),
                           description="PPO inside the model (§3); keys given here change MB's settings one by one.")

    @model_validator(mode="before")
    @classmethod
    def _ppo_over_mb(cls, data: Any) -> Any:
        """A partial `ppo` section changes MB's PPO settings, not PPO's own defaults."""
        if isinstance(data, dict) and isinstance(data.get("ppo"), dict):
            data = {**data, "ppo": {**MB_PPO, **data["ppo"]}}
        return data

    def check_with(self, num_envs: int) -> None:
        if num_envs != 1:
            raise ValueError(f"env.num_envs = {num_envs}: SimPLe collects from one real env (MB asserts it); set 1")
        self.ppo.check_with(self.sim_envs)

    def epochs(self, total_timesteps: int) -> int:
        return max(1, math.ceil((total_timesteps - self.random_steps) / self.real_steps_per_epoch))

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """SimPLe's real env for an id without a preset: for ALE ids MB's Atari settings (§1: 105×80 RGB, 4 stacked,
        frame skip 4 without max-pooling, up to 8 no-ops, no sticky actions, no life-loss episodes, FIRE on reset,
        18,000-step time limit); 102,400 real steps (15 epochs)."""
        env: dict[str, Any] = {"num_envs": 1}
        if env_id.startswith("ALE/"):
            env["atari"] = {"img_size": [105, 80], "grayscale": False, "max_pool": False, "noop_max": 8,
                            "repeat_action_probability": 0.0, "episodic_life": False, "frame_stack": 4,
                            "max_episode_frames": 72_000}
        return {"env": env, "train": {"total_timesteps": 102_400},
                "eval": {"deterministic": False, "episodes": 30}}


def ppo_multiplier(epoch: int, epochs: int) -> int:
    """SimPLe's z: 3 in the last epoch, 2 eight and four epochs before it, else 1 (MB: 7, 11, 14 of 15; §3)."""
    if epoch == epochs - 1:
        return 3
    return 2 if epoch in (epochs - 8, epochs - 4) else 1


# The smoke check's world model: a few units wide, two compressions deep.
SMALL_WORLD_MODEL = {"hidden_size": 8, "compress_steps": 2, "filter_double_steps": 1, "bottleneck_bits": 8,
                     "latent_state_size": 16, "posterior_filters": "[8,16]", "reward_head_channels": 8}


class Simple(Agent):
    name = "simple"
    actions = ("Discrete",)
    config = SimpleConfig
    graphs = True  # the simulated env's step and its PPO's (not yet measured on a GPU: auto leaves them eager)
    iteration_settings = ("algo.random_steps", "algo.real_steps_per_epoch")

    @classmethod
    def smoke_overrides(cls, env_id: str) -> tuple[list[str], int]:
        """One real env, a small world model (on 36×36 frames for ALE ids), 256 steps of which 210 are random play
        (a whole game of at most 200 steps, and 46 with the policy), one PPO update in the model."""
        frames = ["env.atari.img_size=[36,36]"] if env_id.startswith("ALE/") else []  # the toys' are small already
        return ["env.num_envs=1", *(f"algo.world_model.{key}={value}" for key, value in SMALL_WORLD_MODEL.items()),
                *frames, "algo.random_steps=210", "algo.real_steps_per_epoch=46", "algo.world_model_steps=10",
                "algo.first_epoch_multiplier=1", "algo.rollout_length=5", "algo.reward_steps=2", "algo.sim_envs=2",
                "algo.ppo_updates=1", "algo.ppo.num_steps=4", "algo.ppo.minibatch_size=4"], 256

    def __init__(self, cfg, spec: EnvInfo, runtime: Runtime):
        algo: SimpleConfig = cfg.algo
        if not spec.discrete or len(spec.obs_shape) != 3 or spec.obs_dtype != np.uint8 \
                or spec.obs_shape[0] % algo.frame_stack:
            raise ConfigError(f"algo.name = 'simple': {spec.id} gives {spec.observation_space} observations and "
                              f"{spec.action_space} actions; SimPLe needs uint8 frame stacks [frame_stack × C, H, W] "
                              f"(algo.frame_stack = {algo.frame_stack}) and Discrete actions")
        super().__init__(cfg, spec, runtime)
        device = self.device
        channels = spec.obs_shape[0] // algo.frame_stack
        self.frame_shape = (channels, *spec.obs_shape[1:])
        assert isinstance(spec.action_space, spaces.Discrete)  # spec.discrete, checked above
        self.num_actions = int(spec.action_space.n)
        try:
            self.model = NextFramePredictor(algo.world_model, self.num_actions, self.frame_shape,
                                            algo.frame_stack).to(device)
        except ValueError as error:
            raise ConfigError(f"algo.world_model: {error}") from None
        online = algo.reward_strategy == "online"
        head = {id(p) for p in self.model.reward_head.parameters()}
        body = [p for p in self.model.parameters() if online or id(p) not in head]
        self.wm_optimizer = Adafactor(body)  # MB's relative-step Adafactor = torch's defaults (§2.3)
        self.reward_optimizer = None if online else Adafactor(self.model.reward_head.parameters())
        self.epochs = algo.epochs(cfg.train.total_timesteps)
        capacity = algo.random_steps + self.epochs * algo.real_steps_per_epoch
        self.replay = FrameReplay(capacity, self.frame_shape, self.num_actions, algo.frame_stack, algo.ppo.gamma,
                                  max_episodes=max(capacity // 100, 2 * (self.epochs + 1)))
        self.rng = np.random.default_rng(cfg.train.seed)
        self.epoch = 0
        self.wm_steps = 0  # world-model optimizer steps so far (the warm-up ramps, the scheduled sampling)
        self.first_stack: np.ndarray | None = None  # the collection phase's first observation (flip_first_random)

        sim_cfg = cfg.model_copy(update={"algo": algo.ppo, "env": cfg.env.model_copy(update={"num_envs": algo.sim_envs})})
        self.sim = SimulatedEnv(self.model, self._restarts, algo.sim_envs, algo.ppo.num_steps, algo.add_value,
                                algo.sim_temperature, runtime.graphed)
        self.sim_spec = EnvInfo(f"simulated {spec.id}", algo.sim_envs, self.sim.single_observation_space,
                                self.sim.single_action_space, "simulated")
        self.ppo = PPO(sim_cfg, self.sim_spec, runtime)
        self.policy = self.ppo.policy

    # ---------------------------------------------------------------- one epoch

    def iteration_steps(self, first: bool = False) -> int:
        return self.algo.real_steps_per_epoch + (self.algo.random_steps if first else 0)

    def iterate(self, envs, progress: float) -> Iteration:
        algo, start = self.algo, time.perf_counter()
        returns: list[float] = []
        lengths: list[int] = []
        steps = 0
        if self.epoch == 0 and algo.random_steps:
            steps += self._collect(envs, algo.random_steps, None, returns, lengths)
        steps += self._collect(envs, algo.real_steps_per_epoch, algo.collect_temperature, returns, lengths)
        metrics: dict[str, float] = {"time/env": time.perf_counter() - start, "diag/epoch": float(self.epoch)}
        if len(self.replay) < algo.rollout_length:
            raise RuntimeError(
                f"after {self.replay.num_steps} real steps of {self.spec.id}, {len(self.replay)} belong to finished "
                f"episodes; the world model trains on windows of algo.rollout_length = {algo.rollout_length} steps of "
                f"finished episodes: raise algo.random_steps (MB: 6400) or algo.real_steps_per_epoch")

        clock = time.perf_counter()
        first = self.epoch == 0
        wm_steps = algo.world_model_steps * (algo.first_epoch_multiplier if first else 1)
        online = algo.reward_strategy == "online"
        metrics.update(train_world_model(
            self.model, self.wm_optimizer, self.replay, self.rng, steps=wm_steps, batch=algo.world_model_batch,
            length=algo.rollout_length, first_step=self.wm_steps,
            scheduled_sampling_steps=algo.scheduled_sampling_steps if first else None, noise=algo.input_noise,
            warmup_steps=algo.latent_warmup_steps, reward_loss=("cbf" if algo.cbf_loss else "ce") if online else None,
            autocast=self.autocast))
        self.wm_steps += max(1, wm_steps // algo.rollout_length) * algo.rollout_length
        metrics["time/world_model"] = time.perf_counter() - clock

        clock = time.perf_counter()
        if not online:
            assert self.reward_optimizer is not None  # built when the reward strategy is not online
            n = self.replay.num_steps
            batches = algo.reward_steps or REWARD_STEPS_PER_EPOCH[algo.reward_strategy]
            indices = reward_training_indices(
                algo.reward_strategy, self.replay.rewards[:n], self.replay.dones[:n],
                ~np.isnan(self.replay.values[:n]), batches * REWARD_BATCH_SIZE, self.rng)
            metrics.update(train_reward_head(self.model, self.reward_optimizer, self.replay, indices,
                                             REWARD_BATCH_SIZE, self.autocast))
        metrics["time/reward_head"] = time.perf_counter() - clock

        clock = time.perf_counter()
        metrics.update(self._train_policy(algo.ppo_updates * ppo_multiplier(self.epoch, self.epochs), progress))
        metrics["time/policy"] = time.perf_counter() - clock
        metrics["time/learn"] = time.perf_counter() - start - metrics["time/env"]
        self.epoch += 1
        return Iteration(steps, metrics, returns, lengths)

    def _collect(self, envs, steps: int, temperature: float | None, returns: list[float], lengths: list[int]) -> int:
        """`steps` real transitions from a fresh reset into the replay; actions uniformly random (temperature None)
        or sampled from the policy at `temperature`."""
        obs, _ = envs.reset(seed=int(self.rng.integers(2**31)))
        self.replay.interrupt()
        self.first_stack = np.array(obs[0])
        added, reset_step = 0, False
        while added < steps:
            if temperature is None:
                action = int(self.rng.integers(self.num_actions))
            else:
                action = int(self._actions(obs, temperature)[0])
            next_obs, reward, terminated, truncated, info = envs.step(np.array([action]))
            done = bool(terminated[0] or truncated[0])
            if not reset_step:  # NEXT_STEP: the step after an episode's end only resets the env
                self.replay.add(obs[0], action, float(reward[0]), next_obs[0], done)
                added += 1
            reset_step = done
            if "_episode" in info and info["_episode"][0]:
                returns.append(float(info["episode"]["r"][0]))
                lengths.append(int(info["episode"]["l"][0]))
            obs = next_obs
        self.replay.interrupt()
        return added

    def _restarts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Real frame stacks for the simulated envs: uniformly from the replay's finished episodes; with
        flip_first_random the last env gets the collection phase's first stack (MB, §3)."""
        stacks = self.replay.restart_states(rng, n)
        if self.algo.flip_first_random and self.first_stack is not None:
            stacks[-1] = self.first_stack
        return stacks

    def _train_policy(self, updates: int, progress: float) -> dict[str, float]:
        """`updates` PPO iterations in the simulated env, each from fresh restarts."""
        if self.ppo.collector is None:
            self.ppo.collector = RolloutCollector(self.sim, self.sim_spec, self.algo.ppo.num_steps, self.device,
                                                  int(self.rng.integers(2**31)))
        self.model.eval()
        totals: dict[str, float] = {}
        sim_returns: list[float] = []
        for _ in range(updates):
            self.ppo.collector.restart()
            result = self.ppo.iterate(self.sim, progress)
            for key, value in result.metrics.items():
                if not key.startswith("time/"):
                    totals[key] = totals.get(key, 0.0) + value
            sim_returns.extend(result.episode_returns)
        metrics = {key: value / updates for key, value in totals.items()}
        metrics.update({"diag/sim_return_mean": float(np.mean(sim_returns)) if sim_returns else float("nan"),
                        "diag/sim_steps": float(updates * self.algo.sim_envs * self.algo.ppo.num_steps)})
        return metrics

    # ---------------------------------------------------------------- acting, checkpoints

    def _actions(self, obs: np.ndarray, temperature: float) -> np.ndarray:
        with torch.inference_mode(), self.autocast():
            logp = self.policy.action_logprobs(torch.as_tensor(np.asarray(obs), device=self.device))
            if temperature == 0:
                return logp.argmax(-1).cpu().numpy()
            return CategoricalHead.sample(logp / temperature, False).cpu().numpy()

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        return self._actions(obs, 0.0 if deterministic else self.algo.eval_temperature)

    @property
    def gamma(self) -> float:
        return float(self.algo.ppo.gamma)

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        return actor_critic_outputs(self.policy, self.runtime, obs, before, after)

    def acting_network(self) -> torch.nn.Module:
        return GreedyActorCritic(self.policy, self.spec)

    def state_dict(self) -> dict[str, Any]:
        """The world model and its optimizers, the policy and its optimizer, the replay, the simulator's random
        streams and the epoch counters: everything the next epoch depends on."""
        state = {
            "world_model": self.model.state_dict(), "wm_optimizer": self.wm_optimizer.state_dict(),
            "reward_optimizer": None if self.reward_optimizer is None else self.reward_optimizer.state_dict(),
            "policy": self.policy.state_dict(), "ppo_optimizer": self.ppo.optimizer.state_dict(),
            "replay": self.replay.state_dict(),
            "counters": {"epoch": self.epoch, "wm_steps": self.wm_steps, "rng": self.rng.bit_generator.state,
                         "sim": self.sim.state_dict(), "has_collector": self.ppo.collector is not None},
        }
        if self.first_stack is not None:
            state["first_stack"] = {"stack": self.first_stack}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["world_model"])
        self.wm_optimizer.load_state_dict(state["wm_optimizer"])
        if self.reward_optimizer is not None:
            self.reward_optimizer.load_state_dict(state["reward_optimizer"])
        self.policy.load_state_dict(state["policy"])
        self.ppo.optimizer.load_state_dict(state["ppo_optimizer"])
        self.replay.load_state_dict(state["replay"])
        counters = state["counters"]
        self.epoch, self.wm_steps = int(counters["epoch"]), int(counters["wm_steps"])
        self.rng.bit_generator.state = counters["rng"]
        if counters["has_collector"]:  # built at the first policy phase: its reset drew a seed; restore after it
            self.ppo.collector = RolloutCollector(self.sim, self.sim_spec, self.algo.ppo.num_steps, self.device, 0)
        self.sim.load_state_dict(counters["sim"])
        self.first_stack = state["first_stack"]["stack"].copy() if "first_stack" in state else None

    def forget_env_position(self) -> None:
        """Every epoch starts its collection from a reset, so the real env's position is never needed."""
