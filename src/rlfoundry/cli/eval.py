"""`rlfoundry eval RUN_DIR`: evaluate a run's checkpoint again, optionally with videos."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from rlfoundry.cli.common import fail
from rlfoundry.config.errors import ConfigError

MAX_VIDEOS = 3


def evaluate_run(
    run_dir: Annotated[str, typer.Argument(metavar="RUN_DIR", help="A run directory (holding config.yaml and checkpoints/).")],
    checkpoint: Annotated[str, typer.Option(help="last, best, or a step directory such as step_000000012288.")] = "last",
    episodes: Annotated[int, typer.Option(min=1, help="Evaluation episodes.")] = 10,
    video: Annotated[bool, typer.Option("--video", help=f"Also write mp4s of up to {MAX_VIDEOS} episodes into RUN_DIR/videos.")] = False,
    seed: Annotated[Optional[int], typer.Option(help="Evaluation seed (default: the run's train.seed + eval.seed_offset).")] = None,
    num_envs: Annotated[Optional[int], typer.Option(min=1, help="Evaluation envs (default: min(episodes, 16)).")] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions instead of the greedy / mean action.")] = False,
) -> None:
    """Print a checkpoint's mean ± std evaluation return, and with --video write mp4s of its episodes."""
    import torch

    from rlfoundry.envs import check_renders, obs_stats
    from rlfoundry.run.evaluate import evaluate
    from rlfoundry.run.restore import load_for_evaluation

    run_path = Path(run_dir)
    try:
        if checkpoint in ("", ".", "..") or Path(checkpoint).name != checkpoint:
            raise ConfigError(f"--checkpoint {checkpoint!r}: allowed: last, best, or a step directory name "
                              f"in {run_path / 'checkpoints'}")
        restored = load_for_evaluation(run_path, checkpoint, num_envs or min(episodes, 16))
    except ConfigError as exc:  # CheckpointError included
        fail(str(exc), 2)
    cfg = restored.cfg
    step = int(restored.checkpoint.state["step"])
    seed = cfg.train.seed + cfg.eval.seed_offset if seed is None else seed
    torch.manual_seed(seed)  # --stochastic samples with torch: the same seed gives the same episodes
    try:
        if video:
            check_renders(cfg.env.id)  # before evaluating: an id without video fails at once
        stats = obs_stats(restored.envs)  # the checkpoint's, set by load_for_evaluation
        returns, _ = evaluate(restored.agent, restored.envs, episodes, seed, deterministic=not stochastic)
    except ConfigError as exc:
        fail(str(exc), 2)
    finally:
        restored.envs.close()
    typer.echo(f"evaluation return: {np.mean(returns):.2f} ± {np.std(returns):.2f} over {len(returns)} episodes "
               f"(checkpoint {checkpoint}, step {step:,})")
    if video:
        _write_videos(restored, stats, run_path, checkpoint, step, min(episodes, MAX_VIDEOS), seed, not stochastic)


def _write_videos(restored, stats, run_path: Path, checkpoint: str, step: int, count: int, seed: int,
                  deterministic: bool) -> None:
    """Video i is its own episode in a one-env evaluation env, seeded with seed + i."""
    from rlfoundry.run.video import record_video

    for i in range(count):
        path = run_path / "videos" / f"eval_{checkpoint}_step{step}_ep{i}.mp4"
        try:
            result = record_video(restored.agent, restored.cfg.env, stats, path, seed + i, deterministic)
        except ConfigError as exc:
            fail(str(exc), 2)
        except OSError as exc:  # e.g. a read-only run directory: not bad input, so the run-time exit code
            fail(f"cannot write the video {path}: {exc}", 1)
        cut = "" if result["complete"] else ", cut short"
        typer.echo(f"video: {result['path']} (return {result['return']:.2f}, {result['length']} steps{cut})")

