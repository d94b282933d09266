"""`rlfoundry eval RUN`: evaluate a run's checkpoint (or a published model) again, optionally with videos."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlfoundry.cli.common import fail
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import MAX_SEED

MAX_VIDEOS = 3
RUN_HELP = "A run directory, @last (the newest run under runs/), a model folder, or hf://ORG/NAME."


def check_checkpoint(checkpoint: str | None, run: str) -> None:
    """A checkpoint name is a step directory's name, never a path that leaves the run."""
    if checkpoint is not None and (checkpoint in ("", ".", "..") or Path(checkpoint).name != checkpoint):
        raise ConfigError(f"--checkpoint {checkpoint!r}: allowed: last, best, a step (5120) or a step directory name "
                          f"in {Path(run) / 'checkpoints'}")


def video_dir(policy) -> Path:
    """Where a command's videos go: the run directory's videos/, or ./videos for a model folder (a download in the
    Hub's cache is not ours to write into)."""
    return Path("videos") if policy.run_dir is None else policy.run_dir / "videos"


def evaluate_run(
    run: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    checkpoint: Annotated[str, typer.Option(help="last, best, a step (12288) or a step directory such as step_000000012288.")] = "last",
    episodes: Annotated[int, typer.Option(min=1, help="Evaluation episodes.")] = 10,
    video: Annotated[bool, typer.Option("--video", help=f"Also write mp4s of up to {MAX_VIDEOS} episodes into RUN/videos.")] = False,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Evaluation seed (default: the run's train.seed + eval.seed_offset).")] = None,
    num_envs: Annotated[int | None, typer.Option(min=1, help="Evaluation envs (default: min(episodes, 16)).")] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions instead of the greedy / mean action.")] = False,
) -> None:
    """Print a checkpoint's mean ± std evaluation return, and with --video write mp4s of its episodes."""
    from rlfoundry.envs import check_renders
    from rlfoundry.hub import load_policy
    from rlfoundry.hub.evaluation import evaluate

    try:
        check_checkpoint(checkpoint, run)
        policy = load_policy(run, checkpoint)
        if video:
            check_renders(policy.cfg.env.id)  # before evaluating: an id without video fails at once
        result = evaluate(policy, episodes=episodes, seed=seed, deterministic=not stochastic, num_envs=num_envs)
    except ConfigError as exc:  # CheckpointError included
        fail(str(exc), 2)
    typer.echo(f"evaluation return: {result.mean:.2f} ± {result.std:.2f} over {len(result.returns)} episodes "
               f"(checkpoint {result.checkpoint}, step {result.step:,})")
    if video:
        _write_videos(policy, video_dir(policy), result.checkpoint, min(episodes, MAX_VIDEOS), result.seed,
                      not stochastic)


def _write_videos(policy, directory: Path, checkpoint: str, count: int, seed: int, deterministic: bool) -> None:
    """Video i is its own episode in a one-env evaluation env, seeded with seed + i."""
    from rlfoundry.run.video import record_video

    for i in range(count):
        path = directory / f"eval_{checkpoint}_step{policy.step}_ep{i}.mp4"
        try:
            result = record_video(policy.agent, policy.cfg.env, policy.obs_stats, path, seed + i, deterministic)
        except ConfigError as exc:
            fail(str(exc), 2)
        except OSError as exc:  # e.g. a read-only run directory: not bad input, so the run-time exit code
            fail(f"cannot write the video {path}: {exc}", 1)
        cut = "" if result["complete"] else ", cut short"
        typer.echo(f"video: {result['path']} (return {result['return']:.2f}, {result['length']} steps{cut})")
