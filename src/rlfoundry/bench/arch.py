"""The architecture benchmark behind `rlfoundry bench arch`: the same PPO with each memory core on one task.

Every (core, seed) pair trains in a fresh process, one at a time, so peak memory is that run's own and runs do
not compete for cores; seed by seed, all cores in turn, so that a drift of the machine's speed favours none.
Each run is an ordinary run directory under `<out>/runs` (registered, resumable, reported); the benchmark then
reads back what it needs:

- final return: the evaluation at the end of training (mean over seeds ± std over seeds);
- solved at: the first evaluation step at which the preset's threshold was met (median over the seeds that did);
- training steps/s: env steps per second of training (acting, env steps and learning; evaluation excluded);
- inference latency: one `predict` call for a single env, memory carried, median over repeated calls;
- peak memory: the run's maximum RSS on CPU, or the CUDA allocator's peak on a GPU;
- parameters: trainable parameters of the policy (actor and critic).
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import statistics
import time
from pathlib import Path
from typing import Any

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.hardware import machine

CORE_NAMES = {"mlp": "identity", "lstm": "lstm", "gru": "gru", "trxl": "trxl", "gtrxl": "gtrxl", "mamba": "mamba",
              "mamba2": "mamba2"}
COLUMNS = ("core", "seeds", "return_mean", "return_std", "solved_runs", "solved_at_median", "sps", "latency_ms",
           "peak_memory_mb", "params")
LATENCY_CALLS = 300


def parse_cores(text: str) -> list[str]:
    cores = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in cores if name not in CORE_NAMES]
    if unknown or not cores:
        raise ConfigError(f"--cores {text!r}: unknown core {', '.join(unknown) or '(none)'}; allowed: "
                          f"{', '.join(CORE_NAMES)}")
    return cores


def default_spec(env: str) -> str:
    """ENV_ID or ENV_ID:VARIANT; without a variant, the preset's `ppo-masked` (the POMDP) when it has one."""
    if ":" in env:
        return env
    from rlfoundry.experiment.load import load_presets

    preset = load_presets().get(env)
    return f"{env}:ppo-masked" if preset is not None and "ppo-masked" in preset.variants else f"{env}:ppo"


def _run_one(spec: str, overrides: list[str], run_dir: str, result_path: str) -> None:
    """Worker process: train, then measure latency, parameters and peak memory; write them as JSON."""
    import resource

    import numpy as np
    import torch
    from rich.console import Console

    from rlfoundry.algos.base import Memory
    from rlfoundry.run.launch import train
    from rlfoundry.trained.policy import from_run

    _, summary = train(spec, overrides, Path(run_dir), console=Console(quiet=True))
    policy = from_run(Path(run_dir), "last")
    agent, envs = policy.agent, policy.vector_env(1)
    obs, _ = envs.reset(seed=0)
    memory = Memory()
    times = []
    for _ in range(LATENCY_CALLS + 20):
        start = time.perf_counter()
        actions = agent.predict(obs, True, memory)
        times.append(time.perf_counter() - start)
        obs, _, terminated, truncated, _ = envs.step(actions)
        memory.ended(terminated | truncated)
    envs.close()
    if agent.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    with (Path(run_dir) / "metrics.csv").open(newline="") as f:
        eval_seconds = sum(float(row.get("time/eval") or 0) for row in csv.DictReader(f))
    result = {
        "summary": summary, "sps": summary["total_steps"] / (summary["wall_time_s"] - eval_seconds), "latency_ms": 1000 * float(np.median(times[20:])), "peak_memory_mb": peak,
        "params": sum(p.numel() for p in agent.policy.parameters() if p.requires_grad),
    }
    Path(result_path).write_text(json.dumps(result))


def run_arch(spec: str, cores: list[str], seeds: int, steps: int, out: Path, overrides: list[str] | None = None,
             log=print) -> list[dict[str, Any]]:
    """Train every core for `seeds` seeds and write arch.csv, arch.md and arch.png into `out`; returns the rows."""
    from rlfoundry.experiment.load import load_config

    for core in cores:  # bad settings fail here, before any run starts
        load_config(spec, [*(overrides or []), f"network.core={CORE_NAMES[core]}"])
    out.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    results: dict[str, list[dict[str, Any]]] = {core: [] for core in cores}
    # Seed by seed, every core in turn (reversed on even seeds): a slow drift of a shared machine then weighs on
    # every core alike instead of on the cores that happen to run last.
    for seed in range(1, seeds + 1):
        for core in cores if seed % 2 else cores[::-1]:
            run_dir = out / "runs" / f"{core}_s{seed}"
            result_path = out / "runs" / f"{core}_s{seed}.json"
            run_overrides = [*(overrides or []), f"network.core={CORE_NAMES[core]}", f"train.seed={seed}",
                             f"train.total_timesteps={steps}", "eval.stop_at_threshold=false",
                             "logging.progress=false", f"logging.runs_root={out / 'runs'}"]
            log(f"{core} seed {seed}: training {steps} steps ...")
            process = context.Process(target=_run_one, args=(spec, run_overrides, str(run_dir), str(result_path)))
            process.start()
            process.join()
            if process.exitcode != 0 or not result_path.exists():
                raise RuntimeError(f"{core} seed {seed} failed (exit {process.exitcode}); see {run_dir / 'run.log'}")
            result = json.loads(result_path.read_text())
            result["run_dir"] = str(run_dir)
            results[core].append(result)
            log(f"{core} seed {seed}: return {result['summary']['eval_return_mean']:.1f}, "
                f"{result['sps']:.0f} steps/s")
    rows = [_row(core, runs) for core, runs in results.items()]
    _write_tables(rows, spec, steps, out)
    _plot(results, spec, out / "arch.png")
    return rows


def _row(core: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    returns = [r["summary"]["eval_return_mean"] for r in runs]
    solved = [r["summary"]["solved_at_step"] for r in runs if r["summary"]["solved_at_step"] is not None]
    return {
        "core": core, "seeds": len(runs), "return_mean": statistics.fmean(returns),
        "return_std": statistics.pstdev(returns), "solved_runs": len(solved),
        "solved_at_median": statistics.median(solved) if solved else None,
        "sps": statistics.fmean(r["sps"] for r in runs),
        "latency_ms": statistics.fmean(r["latency_ms"] for r in runs),
        "peak_memory_mb": max(r["peak_memory_mb"] for r in runs), "params": runs[0]["params"],
    }


def _write_tables(rows: list[dict[str, Any]], spec: str, steps: int, out: Path) -> None:
    with (out / "arch.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    base = next((row["sps"] for row in rows if row["core"] == "mlp"), None)
    lines = [f"Architecture benchmark: {spec}, {steps} steps per run", machine(), "",
             "| core | final return (mean ± std) | solved | solved at (median step) | steps/s | vs mlp "
             "| latency (ms/step) | peak memory (MB) | parameters |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        ratio = f"{row['sps'] / base:.2f}×" if base else "–"
        solved_at = f"{row['solved_at_median']:,.0f}" if row["solved_at_median"] is not None else "–"
        lines.append(
            f"| {row['core']} | {row['return_mean']:.1f} ± {row['return_std']:.1f} | {row['solved_runs']}/{row['seeds']} "
            f"| {solved_at} | {row['sps']:,.0f} | {ratio} | {row['latency_ms']:.2f} | {row['peak_memory_mb']:,.0f} "
            f"| {row['params']:,} |"
        )
    (out / "arch.md").write_text("\n".join(lines) + "\n")


def _plot(results: dict[str, list[dict[str, Any]]], spec: str, path: Path) -> None:
    """Evaluation return against steps (mean over seeds) per core, and training steps/s per core."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, speed) = plt.subplots(1, 2, figsize=(12, 4.5))
    for core, runs in results.items():
        series = [_eval_curve(Path(r["run_dir"]) / "metrics.csv") for r in runs]
        steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
        if steps:
            curves.plot(steps, [statistics.fmean(s[step] for s in series) for step in steps], label=core)
    curves.set(xlabel="env steps", ylabel="evaluation return (mean over seeds)", title=spec)
    curves.legend()
    names = list(results)
    speed.bar(names, [statistics.fmean(r["sps"] for r in results[n]) for n in names])
    speed.set(ylabel="training steps/s", title="throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _eval_curve(metrics: Path) -> dict[int, float]:
    with metrics.open(newline="") as f:
        return {int(row["global_step"]): float(row["eval/return_mean"])
                for row in csv.DictReader(f) if row.get("eval/return_mean")}
