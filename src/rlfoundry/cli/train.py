"""`rlfoundry train SPEC [overrides]` and `rlfoundry train --resume RUN_DIR`."""

from __future__ import annotations

import json
import shlex
from typing import Annotated

import typer
from typer._click.core import ParameterSource

from rlfoundry.cli.common import err, fail, out
from rlfoundry.config.errors import ConfigError


def train(
    ctx: typer.Context,
    spec: Annotated[str | None, typer.Argument(help="ENV_ID:VARIANT (a preset, or any Gymnasium id with an algorithm name) or an experiment YAML.")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="Dotted overrides, e.g. algo.lr=3e-4 env.num_envs=16.")] = None,
    seed: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_SEED", help="Shortcut for train.seed=N; a list (1,2,3) runs them all as `rlfoundry trials`.")] = None,
    total_timesteps: Annotated[int | None, typer.Option(envvar="RLFOUNDRY_TOTAL_TIMESTEPS", help="Shortcut for train.total_timesteps=N.")] = None,
    run_dir: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_RUN_DIR", help="Run directory (default: runs/<time>_<env>_<variant>_s<seed>).")] = None,
    device: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_DEVICE", help="auto | cpu | cuda (train.device).")] = None,
    resume: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_RESUME", help="Continue a stopped run from its last checkpoint: RUN_DIR, or @last; with --total-timesteps N, a finished run too, to N steps.")] = None,
    debug: Annotated[bool, typer.Option("--debug", envvar="RLFOUNDRY_DEBUG", help="A quick run with debug checks (NaN/inf named where they first appear, anomaly detection), per-layer norms, verbose lines and a profile; a small budget unless one is given.")] = False,
    profile: Annotated[bool, typer.Option("--profile", envvar="RLFOUNDRY_PROFILE", help="Profile a few iterations: profile.json and profile.md in the run directory (train.profile=true).")] = False,
    init: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_INIT", help="Fine-tune: start from the networks (and observation statistics) of a run directory, @last, a model folder or hf://ORG/NAME (train.init); optimizers, replay and the step count start fresh.")] = None,
    init_checkpoint: Annotated[str | None, typer.Option(envvar="RLFOUNDRY_INIT_CHECKPOINT", help="With --init RUN_DIR: last, best or a step (5120); default best where saved, else last (train.init_checkpoint).")] = None,
    nproc: Annotated[int | None, typer.Option(envvar="RLFOUNDRY_NPROC", help="One run across N processes of this machine (PPO, A2C, REINFORCE): each steps env.num_envs envs, gradients averaged every update. Under torchrun, leave it out.")] = None,
) -> None:
    """Train an agent and write a run directory (or continue one with --resume). Every option can also come from
    an environment variable, RLFOUNDRY_ and its name (RLFOUNDRY_DEVICE=cuda); the command line wins."""
    from rlfoundry.run.launch import train as launch
    from rlfoundry.run.trainer import RunFailed

    if resume is not None:  # a resumed run keeps its own config: options set only by the environment give way
        given = {name: value for name, value in ctx.params.items()
                 if ctx.get_parameter_source(name) is not ParameterSource.ENVIRONMENT or name == "resume"}
        seed, total_timesteps, run_dir, device, nproc, init, init_checkpoint = (given.get(name) for name in (
            "seed", "total_timesteps", "run_dir", "device", "nproc", "init", "init_checkpoint"))
        debug, profile = given.get("debug", False), given.get("profile", False)
        if init is not None or init_checkpoint is not None:
            fail("--init starts a new run from another run's networks; --resume continues a run from its own")
    extra = list(overrides or [])
    for key, value in (("train.total_timesteps", None if resume else total_timesteps), ("train.device", device),
                       ("train.init", init), ("train.init_checkpoint", init_checkpoint)):
        if value is not None:
            extra.append(f"{key}={json.dumps(value) if isinstance(value, str) else value}")  # @last, 5120: strings
    if seed is not None and "," in seed:
        _seed_list(spec, seed, extra, run_dir, resume, debug, profile, nproc)
        return
    if seed is not None:
        extra.append(f"train.seed={seed}")
    if profile:
        extra.append("train.profile=true")
    try:
        path, summary = launch(spec, extra, run_dir, console=err(), resume=resume, debug=debug, nproc=nproc,
                               total_timesteps=total_timesteps if resume else None)
    except ConfigError as exc:
        fail(str(exc))
    except RunFailed as exc:
        fail(f"{exc} (traceback in {exc.run_dir / 'run.log'})", code=1)
    except KeyboardInterrupt:
        err().print("[yellow]stopped[/]")
        raise typer.Exit(130) from None
    if path is None:  # a rank other than 0 under torchrun: rank 0 reports the run
        return
    if summary["status"] == "stopped":
        err().print(f"[yellow]stopped[/] at step {summary['total_steps']:,}; checkpoint in {path / 'checkpoints'}",
                    highlight=False)
        raise typer.Exit(130) from None
    evaluation = summary["eval_return_mean"]
    shown = "-" if evaluation is None else f"{evaluation:.2f} ± {summary['eval_return_std']:.2f}"
    solved = summary["solved_at_step"]
    console = out()
    console.print(f"evaluation return: {shown}" + (f" (solved at step {solved:,})" if solved is not None else ""),
                  highlight=False)
    console.print(f"{summary['total_steps']:,} steps in {summary['wall_time_s']:.1f} s ({summary['sps']:,.0f} steps/s)",
                  highlight=False)
    console.print(f"run directory: {path}", highlight=False)


def _seed_list(spec, seeds: str, overrides: list[str], run_dir, resume, debug, profile, nproc) -> None:
    """`train SPEC --seed 1,2,3`: the same as `rlfoundry trials SPEC --seeds 1,2,3`."""
    from rlfoundry.cli.trials import run_set
    from rlfoundry.studies.trials import parse_seeds

    clashing = [name for name, value in (("--run-dir", run_dir), ("--resume", resume), ("--debug", debug),
                                         ("--profile", profile), ("--nproc", nproc)) if value]
    if clashing or spec is None:
        fail(f"--seed {seeds} runs several seeds as `rlfoundry trials`" +
             (f"; it cannot be combined with {', '.join(clashing)}" if clashing else ": give a SPEC"))
    try:
        seed_list = parse_seeds(seeds)
    except ConfigError as exc:
        fail(str(exc))
    extra = "".join(f" {shlex.quote(text)}" for text in overrides)
    run_set([spec], seed_list, overrides, None, None,
            again=f"rlfoundry trials {shlex.quote(spec)} --seeds {seeds}{extra} --out {{path}} continues them")
