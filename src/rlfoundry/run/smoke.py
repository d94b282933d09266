"""The preset smoke check (`rlfoundry presets --smoke [FILTER]`): every matching preset variant builds its env and
trains through the ordinary trainer for one shrunk iteration, then evaluates one episode. What a user runs after
installing an optional family, and what the test suite runs over every shipped preset.

Shrunk so a variant takes seconds, as each algorithm says on its class (`Agent.smoke`, `Agent.smoke_overrides`):
2 envs × 64 steps by default (the on-policy algorithms: one rollout; PPO in two minibatches; the off-policy ones:
two gradient steps of 16 from the first step); SimPLe one real env, a small world model and 210 random steps;
DreamerV3 and PlaNet small windows and plans. Episodes are cut at 200 steps (800 emulator frames for ALE ids) so
that evaluation ends.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlfoundry.algos import algorithm


@dataclass(frozen=True)
class SmokeResult:
    spec: str  # ENV_ID:VARIANT
    ok: bool
    seconds: float
    detail: str  # the steps trained, or why it failed (one line)


def smoke_overrides(cfg) -> tuple[list[str], int]:
    """The overrides that shrink the run of config `cfg` (an `ExperimentConfig` as shipped), and its step count: the
    algorithm's own (`Agent.smoke_overrides`), one evaluation episode, and episodes cut short."""
    env_id = cfg.env.id
    shrink, steps = algorithm(cfg.algo.name).smoke_overrides(env_id)
    limit = "env.atari.max_episode_frames=800" if env_id.startswith("ALE/") else "env.max_episode_steps=200"
    return [*shrink, f"train.total_timesteps={steps}", "eval.every_steps=0", "eval.episodes=1", limit], steps


def smoke(env_id: str, variant: str, run_dir: Path, extra: list[str] | None = None) -> SmokeResult:
    """One variant's smoke run into `run_dir` (recorded in a registry in its parent); any failure (a missing
    package, a bad preset, a crash) is a failed result with its message, not an exception."""
    from rich.console import Console

    from rlfoundry.experiment.load import load_config
    from rlfoundry.run.launch import train

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
    from rlfoundry.experiment.load import load_presets

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
