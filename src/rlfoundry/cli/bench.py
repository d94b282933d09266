"""`rlfoundry bench env|train|arch`: throughput on this machine and the memory-core table (`rlfoundry.bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlfoundry.cli.common import fail, out
from rlfoundry.config.errors import ConfigError

bench_app = typer.Typer(no_args_is_help=True, help="Throughput on this machine: raw env steps/s, training steps/s.")


@bench_app.command("env")
def bench_env(
    env_id: Annotated[str, typer.Argument(help="A Gymnasium id (its preset's env settings are used when it has one).")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Dotted env overrides, e.g. env.atari.frame_stack=2.")] = None,
    num_envs: Annotated[int | None, typer.Option(min=1, help="Envs in the vector env (default: the preset's).")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Vector steps to time.")] = 2000,
    seed: Annotated[int, typer.Option(help="Env and action seed.")] = 0,
) -> None:
    """Raw vector-env steps/s with uniformly random actions."""
    from rlfoundry.bench.env import bench_env as run
    from rlfoundry.run.hardware import machine

    console = out()
    console.print(machine(), highlight=False)
    try:
        result = run(env_id, num_envs, steps, seed, overrides)
    except ConfigError as exc:
        fail(str(exc))
    console.print(f"{env_id}: {result['sps']:,.0f} env steps/s ({result['num_envs']} envs, {result['vectorization']}, "
                  f"obs {result['obs_dtype']} {list(result['obs_shape'])}, {result['vector_steps']:,} vector steps "
                  f"in {result['seconds']:.2f} s)", highlight=False)


@bench_app.command("train")
def bench_train(
    spec: Annotated[str, typer.Argument(help="ENV_ID:VARIANT or an experiment YAML, as for `train`.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Dotted overrides, as for `train`.")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Env steps to train for.")] = 50_000,
    seed: Annotated[int, typer.Option(help="train.seed")] = 1,
) -> None:
    """Training steps/s (no evaluation, no TensorBoard) and where the time goes."""
    from rlfoundry.bench.train import bench_train as run
    from rlfoundry.run.hardware import machine

    console = out()
    console.print(machine(), highlight=False)
    try:
        result = run(spec, overrides, steps, seed)
    except ConfigError as exc:
        fail(str(exc))
    console.print(f"{spec}: {result['sps']:,.0f} training steps/s ({result['steps']:,} steps in {result['seconds']:.1f} s, "
                  f"{result['num_envs']} envs, {result['torch_threads']} torch thread(s)); time: "
                  f"env {result['share_env']:.0%}, act {result['share_act']:.0%}, learn {result['share_learn']:.0%}",
                  highlight=False)


@bench_app.command("arch")
def bench_arch(
    envs: Annotated[str, typer.Argument(help="ENV_ID[,ENV_ID...]; each runs every --algos algorithm (its preset's "
                                             "ALGO-masked variant when it has one, else ALGO), or ENV_ID:VARIANT "
                                             "(that variant only, whatever --algos says).")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Dotted overrides for every run; ALGO:key=value for "
                                                              "that algorithm's runs only.")] = None,
    algos: Annotated[str, typer.Option(help="Comma-separated algorithms, e.g. ppo,dqn.")] = "ppo",
    cores: Annotated[str, typer.Option(help="Comma-separated cores: mlp,lstm,gru,trxl,gtrxl,mamba,mamba2.")] = "mlp,lstm,gru",
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per (env, algorithm, core) (1..N).")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Env steps per run.")] = 100_000,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the runs, arch.csv, arch.md and arch.png go.")] = Path("bench_arch"),
) -> None:
    """Each memory core under each algorithm on each env: final return (IQM over seeds), steps/s, latency, memory,
    parameters."""
    from rlfoundry.bench.arch import parse_algos, parse_cores, plan, run_arch
    from rlfoundry.run.hardware import machine

    console = out()
    console.print(machine(), highlight=False)
    try:
        names = parse_cores(cores)
        pairs = plan(envs, parse_algos(algos))
        rows = run_arch(pairs, names, seeds, steps, out_dir, overrides, log=lambda text: console.print(text, highlight=False))
    except ConfigError as exc:
        fail(str(exc))
    console.print((out_dir / "arch.md").read_text(), highlight=False)
    console.print(f"{len(rows)} rows ({len(pairs)} env × algorithm, {len(names)} cores); table: {out_dir / 'arch.md'}, "
                  f"{out_dir / 'arch.csv'}; plot: {out_dir / 'arch.png'}")
