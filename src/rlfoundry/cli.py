"""The `rlfoundry` command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from rlfoundry.cli_eval import evaluate_run
from rlfoundry.cli_report import report
from rlfoundry.cli_runs import runs_app
from rlfoundry.config.errors import ConfigError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="rlfoundry: deep reinforcement learning from one config.",
)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": False})
def train(
    spec: Annotated[Optional[str], typer.Argument(help="ENV_ID:VARIANT (a preset, or any Gymnasium id with an algorithm name) or an experiment YAML.")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help="Dotted overrides, e.g. algo.lr=3e-4 env.num_envs=16.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Shortcut for train.seed=N.")] = None,
    total_timesteps: Annotated[Optional[int], typer.Option(help="Shortcut for train.total_timesteps=N.")] = None,
    run_dir: Annotated[Optional[str], typer.Option(help="Run directory (default: runs/<time>_<env>_<variant>_s<seed>).")] = None,
    device: Annotated[Optional[str], typer.Option(help="auto | cpu | cuda (train.device).")] = None,
    resume: Annotated[Optional[str], typer.Option(help="Continue a stopped run from its last checkpoint: RUN_DIR, or @last.")] = None,
) -> None:
    """Train an agent and write a run directory (or continue one with --resume)."""
    import rlfoundry
    from rlfoundry.run.trainer import RunFailed

    extra = list(overrides or [])
    for key, value in (("train.seed", seed), ("train.total_timesteps", total_timesteps), ("train.device", device)):
        if value is not None:
            extra.append(f"{key}={value}")
    try:
        path, summary = rlfoundry.train(spec, extra, run_dir, console=err, resume=resume)
    except ConfigError as exc:
        fail(str(exc))
    except RunFailed as exc:
        fail(f"{exc} (traceback in {exc.run_dir / 'run.log'})", code=1)
    except KeyboardInterrupt:
        err.print("[yellow]stopped[/]")
        raise typer.Exit(130)
    if summary["status"] == "stopped":
        err.print(f"[yellow]stopped[/] at step {summary['total_steps']:,}; checkpoint in {path / 'checkpoints'}",
                  highlight=False)
        raise typer.Exit(130)
    evaluation = summary["eval_return_mean"]
    shown = "-" if evaluation is None else f"{evaluation:.2f} ± {summary['eval_return_std']:.2f}"
    solved = summary["solved_at_step"]
    out.print(f"evaluation return: {shown}" + (f" (solved at step {solved:,})" if solved is not None else ""),
              highlight=False)
    out.print(f"{summary['total_steps']:,} steps in {summary['wall_time_s']:.1f} s ({summary['sps']:,.0f} steps/s)",
              highlight=False)
    out.print(f"run directory: {path}", highlight=False)


@app.command()
def presets(
    filter: Annotated[Optional[str], typer.Argument(help="Show only env ids or variants containing this text.")] = None,
) -> None:
    """List presets, their variants and "solved" thresholds."""
    from rich.table import Table

    from rlfoundry.config.load import load_presets

    try:
        found = load_presets()
    except ConfigError as exc:
        fail(str(exc))
    table = Table(title="rlfoundry presets")
    for column in ("env id", "variants", "solved at", "source"):
        table.add_column(column)
    needle = (filter or "").lower()
    for env_id, preset in sorted(found.items()):
        variants = list(preset.variants)
        if needle and needle not in env_id.lower() and not any(needle in v.lower() for v in variants):
            continue
        solved = preset.solved or {}
        table.add_row(env_id, ", ".join(variants), str(solved.get("return", "-")), solved.get("source", "-"))
    out.print(table)


app.command("eval", help="Evaluate a run's checkpoint: mean ± std return, optionally mp4 videos.")(evaluate_run)
app.command("report", help="Regenerate a run's report.md and curves.png.")(report)
app.add_typer(runs_app, name="runs")

bench = typer.Typer(no_args_is_help=True, help="Throughput on this machine: raw env steps/s, training steps/s.")
app.add_typer(bench, name="bench")


@bench.command("env")
def bench_env(
    env_id: Annotated[str, typer.Argument(help="A Gymnasium id (its preset's env settings are used when it has one).")],
    overrides: Annotated[Optional[list[str]], typer.Argument(help="Dotted env overrides, e.g. env.atari.frame_stack=2.")] = None,
    num_envs: Annotated[Optional[int], typer.Option(min=1, help="Envs in the vector env (default: the preset's).")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Vector steps to time.")] = 2000,
    seed: Annotated[int, typer.Option(help="Env and action seed.")] = 0,
) -> None:
    """Raw vector-env steps/s with uniformly random actions."""
    from rlfoundry.bench import bench_env as run

    try:
        result = run(env_id, num_envs, steps, seed, overrides)
    except ConfigError as exc:
        fail(str(exc))
    out.print(f"{env_id}: {result['sps']:,.0f} env steps/s ({result['num_envs']} envs, {result['vectorization']}, "
              f"obs {result['obs_dtype']} {list(result['obs_shape'])}, {result['vector_steps']:,} vector steps "
              f"in {result['seconds']:.2f} s)", highlight=False)


@bench.command("train")
def bench_train(
    spec: Annotated[str, typer.Argument(help="ENV_ID:VARIANT or an experiment YAML, as for `train`.")],
    overrides: Annotated[Optional[list[str]], typer.Argument(help="Dotted overrides, as for `train`.")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Env steps to train for.")] = 50_000,
    seed: Annotated[int, typer.Option(help="train.seed")] = 1,
) -> None:
    """Training steps/s (no evaluation, no TensorBoard) and where the time goes."""
    from rlfoundry.bench import bench_train as run

    try:
        result = run(spec, overrides, steps, seed)
    except ConfigError as exc:
        fail(str(exc))
    out.print(f"{spec}: {result['sps']:,.0f} training steps/s ({result['steps']:,} steps in {result['seconds']:.1f} s, "
              f"{result['num_envs']} envs, {result['torch_threads']} torch thread(s)); time: "
              f"env {result['share_env']:.0%}, act {result['share_act']:.0%}, learn {result['share_learn']:.0%}",
              highlight=False)


@bench.command("arch")
def bench_arch(
    env: Annotated[str, typer.Argument(help="ENV_ID (its ppo-masked variant when the preset has one, else ppo) or "
                                            "ENV_ID:VARIANT.")],
    overrides: Annotated[Optional[list[str]], typer.Argument(help="Dotted overrides for every run.")] = None,
    cores: Annotated[str, typer.Option(help="Comma-separated cores: mlp,lstm,gru,trxl,gtrxl,mamba,mamba2.")] = "mlp,lstm,gru",
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per core (1..N).")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Env steps per run.")] = 100_000,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the runs, arch.csv, arch.md and arch.png go.")] = Path("bench_arch"),
) -> None:
    """The same PPO with each memory core: final return, steps/s, latency, memory, parameters."""
    from rlfoundry.bench_arch import default_spec, parse_cores, run_arch

    try:
        names = parse_cores(cores)
        spec = default_spec(env)
        rows = run_arch(spec, names, seeds, steps, out_dir, overrides, log=lambda text: out.print(text, highlight=False))
    except ConfigError as exc:
        fail(str(exc))
    out.print((out_dir / "arch.md").read_text(), highlight=False)
    out.print(f"{len(rows)} cores; table: {out_dir / 'arch.md'}, {out_dir / 'arch.csv'}; plot: {out_dir / 'arch.png'}")


def main() -> None:
    try:
        app(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
