"""The preset smoke check (`rlfoundry presets --smoke [FILTER]`): every matching preset variant builds its env and
trains through the ordinary trainer for one shrunk iteration, then evaluates one episode. What a user runs after
installing an optional family, and what the test suite runs over every shipped preset.

Shrunk so a variant takes seconds: 2 envs × 64 steps (PPO and the on-policy algorithms: two minibatches), or 64
steps with two gradient steps of 16 from the first step (DQN, SAC); SimPLe gets one real env, a small world model
(on 36×36 frames for ALE ids), a 256-step budget of which 210 are random play, and one PPO update in the model;
DreamerV3 keeps its model size and trains on windows of 2 × 8 steps, once per 16 env steps; PlaNet keeps its model
and plans with 16 candidates over 2 iterations, with 2 updates after each episode.
Episodes are cut at 200 steps (800 emulator frames for ALE ids) so that evaluation ends.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SMALL_WORLD_MODEL = {"hidden_size": 8, "compress_steps": 2, "filter_double_steps": 1, "bottleneck_bits": 8,
                     "latent_state_size": 16, "posterior_filters": "[8,16]", "reward_head_channels": 8}


@dataclass(frozen=True)
class SmokeResult:
    spec: str  # ENV_ID:VARIANT
    ok: bool
    seconds: float
    detail: str  # the steps trained, or why it failed (one line)


def smoke_overrides(cfg) -> tuple[list[str], int]:
    """The overrides that shrink the run of config `cfg` (an `ExperimentConfig` as shipped), and its step count."""
    env_id, name = cfg.env.id, cfg.algo.name
    steps, envs = 2 * 64, "env.num_envs=2"
    shrink = {
        "ppo": ["algo.num_steps=64", "algo.minibatch_size=0.5"],
        "dqn": ["algo.train_freq=64", "algo.learning_starts=0", "algo.gradient_steps=2", "algo.batch_size=16"],
        "sac": ["algo.train_freq=64", "algo.learning_starts=0", "algo.gradient_steps=2", "algo.batch_size=16"],
    }.get(name, ["algo.num_steps=64"])
    if name == "simple":  # 210 random steps: a whole game (at most 200 steps, below) + 46 with the policy
        steps, envs = 256, "env.num_envs=1"
        frames = ["env.atari.img_size=[36,36]"] if env_id.startswith("ALE/") else []  # the toys' are small already
        shrink = [*(f"algo.world_model.{key}={value}" for key, value in SMALL_WORLD_MODEL.items()), *frames,
                  "algo.random_steps=210", "algo.real_steps_per_epoch=46", "algo.world_model_steps=10",
                  "algo.first_epoch_multiplier=1", "algo.rollout_length=5", "algo.reward_steps=2", "algo.sim_envs=2",
                  "algo.ppo_updates=1", "algo.ppo.num_steps=4", "algo.ppo.minibatch_size=4"]
    if name == "dreamer":  # 2 envs × 64 steps, updates from the 8th step on (windows of 2 × 8), 1 per 16 env steps
        shrink = ["algo.batch_size=2", "algo.batch_length=8", "algo.train_ratio=1", "algo.collect_steps=16"]
    if name == "planet":  # its model size, a small plan (16 candidates, 2 iterations), 2 updates per episode
        shrink = ["algo.batch_size=2", "algo.batch_length=8", "algo.seed_episodes=1", "algo.updates_per_episode=2",
                  "algo.candidates=16", "algo.top_k=4", "algo.iterations=2", "algo.collect_steps=16"]
    limit = "env.atari.max_episode_frames=800" if env_id.startswith("ALE/") else "env.max_episode_steps=200"
    return [envs, *shrink, f"train.total_timesteps={steps}", "eval.every_steps=0", "eval.episodes=1", limit], steps


def smoke(env_id: str, variant: str, run_dir: Path, extra: list[str] | None = None) -> SmokeResult:
    """One variant's smoke run into `run_dir` (recorded in a registry in its parent); any failure (a missing
    package, a bad preset, a crash) is a failed result with its message, not an exception."""
    from rich.console import Console

    from rlfoundry.run.launch import train
    from rlfoundry.spec.load import load_config

    spec, start = f"{env_id}:{variant}", time.perf_counter()
    try:
        overrides, steps = smoke_overrides(load_config(spec))
        # the registry beside the run, not the user's runs root: smoke runs are thrown away
        overrides = [*overrides, "logging.progress=false", "logging.tensorboard=false",
                     f"logging.runs_root={run_dir.parent}", *(extra or [])]
        _, summary = train(spec, overrides, run_dir, console=Console(quiet=True))
        if summary.get("status") != "finished" or summary.get("total_steps") != steps:
            raise RuntimeError(f"status {summary.get('status')} after {summary.get('total_steps')} of {steps} steps")
        if summary.get("eval_return_mean") is None:
            raise RuntimeError("no evaluation return")
        detail = f"{steps} steps, evaluation return {summary['eval_return_mean']:.3g}"
        return SmokeResult(spec, True, time.perf_counter() - start, detail)
    except Exception as exc:  # a smoke check reports every failure (ConfigError included) as its result
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return SmokeResult(spec, False, time.perf_counter() - start, f"{type(exc).__name__}: {reason}")


def smoke_presets(needle: str = "", report=None) -> list[SmokeResult]:
    """Every preset variant whose `ENV_ID:VARIANT` contains `needle` (case-insensitive), each into its own
    temporary run directory; `report(result)` is called as each one ends."""
    from rlfoundry.spec.load import load_presets

    needle = needle.lower()
    cases = [(env_id, variant) for env_id, preset in sorted(load_presets().items()) for variant in preset.variants
             if needle in f"{env_id}:{variant}".lower()]
    results = []
    with tempfile.TemporaryDirectory(prefix="rlfoundry-smoke-") as scratch:
        for index, (env_id, variant) in enumerate(cases):
            result = smoke(env_id, variant, Path(scratch) / f"{index:03d}")
            results.append(result)
            if report is not None:
                report(result)
    return results
