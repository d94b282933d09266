"""The architecture benchmark behind `rlfoundry bench arch`: each memory core under each algorithm on each task.

A grid of envs × algorithms × cores × seeds, every run an ordinary run directory trained in a fresh process, one
at a time, seed by seed with every combination in turn (so a drifting machine favours none), all resolved before
the first starts. The table (return IQM with its interval, steps/s, latency, memory, parameters), how each
(env, algorithm) picks its spec and the overrides: docs/guide/memory-cores.md, "Architecture benchmark".
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.hardware import machine

CORE_NAMES = {"mlp": "identity", "lstm": "lstm", "gru": "gru", "trxl": "trxl", "gtrxl": "gtrxl", "mamba": "mamba",
              "mamba2": "mamba2"}
COLUMNS = ("env", "algo", "core", "spec", "seeds", "return_iqm", "return_low", "return_high", "return_mean",
           "return_std", "solved_runs", "solved_at_median", "sps", "sps_vs_mlp", "latency_ms", "peak_memory_mb",
           "params")
LATENCY_CALLS = 300
@dataclass(frozen=True)
class Pair:
    """An (env, algorithm) of the benchmark and the spec its runs train."""

    env: str
    algo: str
    spec: str


def _names(text: str, option: str, allowed: list[str]) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise ConfigError(f"{option} {text!r}: unknown {option[2:-1]} {', '.join(unknown) or '(none)'}; allowed: "
                          f"{', '.join(allowed)}")
    return list(dict.fromkeys(names))


def parse_cores(text: str) -> list[str]:
    return _names(text, "--cores", list(CORE_NAMES))


def parse_algos(text: str) -> list[str]:
    from rlfoundry.experiment.schema import ALGO_CONFIGS

    return _names(text, "--algos", list(ALGO_CONFIGS))


def default_spec(env: str, algo: str = "ppo") -> str:
    """ENV_ID:VARIANT as given; for an ENV_ID, the preset's `ALGO-masked` variant (the POMDP) when it has one, else
    its `ALGO` variant, else ENV_ID:ALGO (the algorithm's defaults for the env's spaces)."""
    if ":" in env:
        return env
    from rlfoundry.experiment.load import load_presets

    preset = load_presets().get(env)
    variants = preset.variants if preset is not None else {}
    return next((f"{env}:{variant}" for variant in (f"{algo}-masked", algo) if variant in variants), f"{env}:{algo}")


def plan(envs: str, algos: list[str]) -> list[Pair]:
    """The (env, algorithm) pairs of `--algos` on the comma-separated ENV[:VARIANT] list: an env given with its
    variant runs that variant only, under the algorithm it names."""
    from rlfoundry.experiment.load import load_config, split_spec

    pairs: list[Pair] = []
    for env in (name.strip() for name in envs.split(",") if name.strip()):
        if ":" in env:
            found = [Pair(split_spec(env)[0], load_config(env).algo.name, env)]
        else:
            found = [Pair(env, algo, default_spec(env, algo)) for algo in algos]
        pairs += [pair for pair in found if pair not in pairs]
    if not pairs:
        raise ConfigError(f"no env in {envs!r}: give ENV_ID[,ENV_ID...], each optionally as ENV_ID:VARIANT")
    return pairs


def _scope(text: str) -> str | None:
    """The algorithm an override is written for (`algo:key=value`), or None for one of every run."""
    scope, scoped, _ = text.partition("=")[0].partition(":")
    return scope if scoped else None


def overrides_for(overrides: list[str], algo: str) -> list[str]:
    """The overrides of `algo`'s runs, in the order given: the plain ones and those written `algo:key=value`."""
    return [text if _scope(text) is None else text[len(algo) + 1:] for text in overrides
            if _scope(text) in (None, algo)]


def check(pairs: list[Pair], cores: list[str], overrides: list[str]) -> None:
    """Resolve every (pair, core) as its runs will, and check each pair's action space: a ConfigError before any
    run starts for the first impossible one."""
    from rlfoundry.algos.registry import check_actions
    from rlfoundry.experiment.load import load_config

    algos = {pair.algo for pair in pairs}
    for text in overrides:
        scope = _scope(text)
        if scope is not None and scope not in algos:
            raise ConfigError(f"override {text!r}: {scope!r} is no algorithm of this benchmark (its algorithms: "
                              f"{', '.join(sorted(algos))}); write ALGO:key=value for one algorithm's runs")
    for pair in pairs:
        for core in cores:
            cfg = load_config(pair.spec, [*overrides_for(overrides, pair.algo), f"network.core={CORE_NAMES[core]}"])
            if cfg.algo.name != pair.algo:
                raise ConfigError(f"{pair.spec}: algo.name = '{cfg.algo.name}' by an override; the benchmark's "
                                  f"algorithms come from --algos or the variant, not from algo.name")
        try:
            check_actions(cfg)  # agents refuse others when built, in the run: checked here first
        except ConfigError as exc:
            raise ConfigError(f"{pair.spec}: {exc}") from None


def trainable_parameters(agent: Any) -> int:
    """The parameters the agent's optimizers update, each counted once: target networks, copies that follow the
    trained weights by averaging, are not counted."""
    import torch

    from rlfoundry.algos.optim import FlatOptimizer

    sizes: dict[int, int] = {}
    for value in vars(agent).values():
        if isinstance(value, FlatOptimizer):
            params = [value.flat]
        elif isinstance(value, torch.optim.Optimizer):
            params = [p for group in value.param_groups for p in group["params"]]
        else:
            continue
        sizes.update((id(p), p.numel()) for p in params)
    return sum(sizes.values())


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
        "summary": summary, "sps": summary["total_steps"] / (summary["wall_time_s"] - eval_seconds),
        "latency_ms": 1000 * float(np.median(times[20:])), "peak_memory_mb": peak,
        "params": trainable_parameters(agent),
    }
    Path(result_path).write_text(json.dumps(result))


def run_arch(pairs: list[Pair], cores: list[str], seeds: int, steps: int, out: Path,
             overrides: list[str] | None = None, log=print) -> list[dict[str, Any]]:
    """Train every (pair, core) for `seeds` seeds and write arch.csv, arch.md and arch.png into `out`; returns the
    rows (pair by pair, core by core)."""
    overrides = overrides or []
    check(pairs, cores, overrides)  # bad settings fail here, before any run starts
    out.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    grid = [(pair, core) for pair in pairs for core in cores]
    results: dict[tuple[Pair, str], list[dict[str, Any]]] = {cell: [] for cell in grid}
    # Seed by seed, every (pair, core) in turn (reversed on even seeds): a slow drift of a shared machine then
    # weighs on every one alike instead of on those that happen to run last.
    for seed in range(1, seeds + 1):
        for pair, core in grid if seed % 2 else grid[::-1]:
            name = f"{pair.env.replace('/', '-')}_{pair.algo}_{core}_s{seed}"
            run_dir, result_path = out / "runs" / name, out / "runs" / f"{name}.json"
            run_overrides = [*overrides_for(overrides, pair.algo), f"network.core={CORE_NAMES[core]}",
                             f"train.seed={seed}", f"train.total_timesteps={steps}", "eval.stop_at_threshold=false",
                             "logging.progress=false", f"logging.runs_root={out / 'runs'}"]
            what = f"{pair.env} {pair.algo} {core} seed {seed}"
            log(f"{what}: training {steps} steps ({pair.spec}) ...")
            process = context.Process(target=_run_one, args=(pair.spec, run_overrides, str(run_dir),
                                                             str(result_path)))
            process.start()
            process.join()
            if process.exitcode != 0 or not result_path.exists():
                raise RuntimeError(f"{what} failed (exit {process.exitcode}); see {run_dir / 'run.log'}")
            result = json.loads(result_path.read_text())
            result["run_dir"] = str(run_dir)
            results[pair, core].append(result)
            log(f"{what}: return {result['summary']['eval_return_mean']:.1f}, {result['sps']:.0f} steps/s")
    rows = [_row(pair, core, results[pair, core]) for pair, core in grid]
    for row in rows:
        base = next((other["sps"] for other in rows
                     if (other["env"], other["algo"], other["core"]) == (row["env"], row["algo"], "mlp")), None)
        row["sps_vs_mlp"] = row["sps"] / base if base else None
    _write_tables(rows, pairs, seeds, steps, out)
    _plot(pairs, cores, results, out / "arch.png")
    return rows


def _row(pair: Pair, core: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    from rlfoundry.studies.stats import interval_estimates

    returns = [float(r["summary"]["eval_return_mean"]) for r in runs]
    iqm = interval_estimates(np.array(returns)[:, None])["iqm"]  # [seeds, 1 task]
    solved = [r["summary"]["solved_at_step"] for r in runs if r["summary"]["solved_at_step"] is not None]
    return {
        "env": pair.env, "algo": pair.algo, "core": core, "spec": pair.spec, "seeds": len(runs),
        "return_iqm": iqm.value, "return_low": iqm.low, "return_high": iqm.high,
        "return_mean": statistics.fmean(returns), "return_std": statistics.pstdev(returns),
        "solved_runs": len(solved), "solved_at_median": statistics.median(solved) if solved else None,
        "sps": statistics.fmean(r["sps"] for r in runs),
        "latency_ms": statistics.fmean(r["latency_ms"] for r in runs),
        "peak_memory_mb": max(r["peak_memory_mb"] for r in runs), "params": runs[0]["params"],
    }


def _write_tables(rows: list[dict[str, Any]], pairs: list[Pair], seeds: int, steps: int, out: Path) -> None:
    from rlfoundry.studies.results import number_text

    with (out / "arch.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    specs = ", ".join(f"{pair.spec} ({pair.algo})" for pair in pairs)
    lines = [f"Architecture benchmark: {steps:,} steps per run, {seeds} seed(s) each; specs: {specs}", machine(), "",
             "| env | algo | core | final return: IQM [95% CI] | mean ± std | solved | solved at (median step) "
             "| steps/s | vs mlp | latency (ms/step) | peak memory (MB) | parameters |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        ratio = f"{row['sps_vs_mlp']:.2f}×" if row["sps_vs_mlp"] else "–"
        solved_at = f"{row['solved_at_median']:,.0f}" if row["solved_at_median"] is not None else "–"
        # as many decimals as the env's returns call for: POPGym's lie in [-1, 1], CartPole's run to 500
        scale = max(abs(row[key]) for key in ("return_iqm", "return_low", "return_high", "return_mean"))
        iqm, low, high, mean, std = (number_text(row[key], scale) for key in
                                     ("return_iqm", "return_low", "return_high", "return_mean", "return_std"))
        lines.append(
            f"| {row['env']} | {row['algo']} | {row['core']} | {iqm} [{low}, {high}] | {mean} ± {std} "
            f"| {row['solved_runs']}/{row['seeds']} | {solved_at} | {row['sps']:,.0f} | {ratio} "
            f"| {row['latency_ms']:.2f} | {row['peak_memory_mb']:,.0f} | {row['params']:,} |"
        )
    (out / "arch.md").write_text("\n".join(lines) + "\n")


def _plot(pairs: list[Pair], cores: list[str], results: dict[tuple[Pair, str], list[dict[str, Any]]],
          path: Path) -> None:
    """A panel per (env, algorithm): evaluation return against steps (mean over seeds), a line per core; then
    training steps/s of every row, a bar each, in the cores' colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(pairs) + 1, 3)
    rows = math.ceil((len(pairs) + 1) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.2 * rows), squeeze=False)
    panels = list(axes.ravel())
    for curves, pair in zip(panels, pairs):
        for index, core in enumerate(cores):
            series = [_eval_curve(Path(r["run_dir"]) / "metrics.csv") for r in results[pair, core]]
            steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
            if steps:
                curves.plot(steps, [statistics.fmean(s[step] for s in series) for step in steps], label=core,
                            color=f"C{index}", marker=".")  # a marker: a single evaluation is a point, not a line
        curves.set(xlabel="env steps", ylabel="evaluation return (mean over seeds)", title=pair.spec)
        curves.legend()
    speed = panels[len(pairs)]
    several_envs, several_algos = len({p.env for p in pairs}) > 1, len({p.algo for p in pairs}) > 1
    labels, values, colours = [], [], []
    for (pair, core), runs in results.items():
        labels.append(" · ".join([*([pair.env] if several_envs else []), *([pair.algo] if several_algos else []),
                                  core]))
        values.append(statistics.fmean(r["sps"] for r in runs))
        colours.append(f"C{cores.index(core)}")
    speed.bar(range(len(values)), values, color=colours)
    speed.set_xticks(range(len(labels)), labels, fontsize="small", rotation=35 if len(labels) > 4 else 0,
                     ha="right" if len(labels) > 4 else "center")
    speed.set(ylabel="training steps/s", title="throughput")
    for unused in panels[len(pairs) + 1:]:
        unused.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _eval_curve(metrics: Path) -> dict[int, float]:
    with metrics.open(newline="") as f:
        return {int(row["global_step"]): float(row["eval/return_mean"])
                for row in csv.DictReader(f) if row.get("eval/return_mean")}
