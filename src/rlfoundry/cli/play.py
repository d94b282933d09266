"""`rlfoundry play RUN`: watch a trained policy, in a window, as mp4s or as text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from rlfoundry.cli.common import fail
from rlfoundry.cli.eval import RUN_HELP, check_checkpoint, video_dir
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import MAX_SEED


def play(
    run: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    checkpoint: Annotated[str | None, typer.Option(help="best, last, a step (12288) or a step directory (default: best where "
                                                            "one was saved, else last).")] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes to play.")] = 3,
    render: Annotated[str | None, typer.Option(help="human (a window), video (mp4s), ansi (text) or none "
                                                       "(returns only). Default: a window where a display exists, "
                                                       "else mp4s, else text.")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Episode i is reset with env_seed(seed + i), hashed (default: the run's "
                                                     "train.seed + eval.seed_offset).")] = None,
    out: Annotated[Path | None, typer.Option(help="Where the mp4s go (default: RUN/videos, or ./videos for "
                                                     "a model folder).")] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions instead of the greedy / mean "
                                                                  "action.")] = False,
    max_steps: Annotated[int, typer.Option(min=1, help="Cut an episode after this many steps.")] = 100_000,
) -> None:
    """Play a trained policy with the run's frozen normalisation and memory, printing each episode's return."""
    import torch

    from rlfoundry.hub import load_policy
    from rlfoundry.trained.play import choose_render
    from rlfoundry.trained.play import play as play_episodes

    try:
        check_checkpoint(checkpoint, run)
        policy = load_policy(run, checkpoint)
        mode = choose_render(policy.cfg.env.id, render)
        directory = out if out is not None else video_dir(policy)
    except ConfigError as exc:
        fail(str(exc), 2)
    cfg = policy.cfg
    seed = cfg.train.seed + cfg.eval.seed_offset if seed is None else seed
    torch.manual_seed(seed)  # --stochastic samples with torch: the same seed gives the same episodes
    typer.echo(f"playing {cfg.env.id}:{cfg.variant} ({cfg.algo.name}, step {policy.step:,}) from {policy.source}, "
               f"render {mode}")

    def report(result: dict) -> None:
        shown = f", video {result['video']}" if result["video"] is not None else ""
        cut = "" if result["complete"] else " (cut short)"
        typer.echo(f"episode {result['episode']}: return {result['return']:.2f}, length {result['length']}{cut}{shown}")

    try:
        results = play_episodes(policy, episodes, mode, seed, directory, not stochastic, max_steps, report)
    except ConfigError as exc:
        fail(str(exc), 2)
    except OSError as exc:  # an unwritable video directory: a fault of the machine, not bad input
        fail(f"cannot write the video: {exc}", 1)
    returns = [result["return"] for result in results]
    typer.echo(f"mean return {np.mean(returns):.2f} ± {np.std(returns):.2f} over {len(returns)} episodes")
