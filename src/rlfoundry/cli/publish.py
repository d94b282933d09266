"""`rlfoundry publish RUN --repo ORG/NAME`: a trained policy as a model repository on the Hugging Face Hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from rlfoundry.cli.common import err, fail
from rlfoundry.config.errors import ConfigError


def publish(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run directory, @last, a model folder or hf://ORG/NAME. A folder built by publish (it has a README.md) is uploaded as it is.")],
    repo: Annotated[str, typer.Option(help="The Hub repository, ORG/NAME (created when missing).")],
    private: Annotated[bool, typer.Option("--private", help="Create the repository private (an existing one keeps its visibility).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write the model folder only; upload nothing.")] = False,
    out: Annotated[str | None, typer.Option(help="Where the model folder is written (default: RUN/publish/NAME for a run directory, else ./publish/NAME).")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="best, last, or a step (1024 or step_000000001024); default: best where saved, else last.")] = None,
    episodes: Annotated[int | None, typer.Option(min=1, help="Evaluation episodes for the card's score (default 10).")] = None,
    video: Annotated[bool, typer.Option("--video/--no-video", help="Record one replay episode (replay.mp4).")] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing folder at --out (once the new one is complete).")] = False,
) -> None:
    """Build a model folder (card, config, weights, normalisation statistics, a replay, the evaluation) from a run's
    checkpoint and upload it to the Hub in one commit; --dry-run writes the folder only."""
    from rlfoundry.hub import HF_PREFIX, is_model_folder, local_path
    from rlfoundry.hub.publish import CARD, UploadError, build_folder, check_repo, check_token, upload

    try:
        check_repo(repo)
        token = None if dry_run else check_token()  # before any work: a missing token is said at once
        source = None if run.startswith(HF_PREFIX) else local_path(run)
        if source is not None and is_model_folder(source) and (source / CARD).is_file():
            folder = _built_folder(source, repo, out, checkpoint, episodes)
            typer.echo(f"model folder: {folder} (built before: checked, not rebuilt)")
        else:
            name = repo.split("/")[1]
            out_dir = Path(out) if out else (source / "publish" / name if source is not None and not
                                             is_model_folder(source) else Path("publish") / name)
            built = build_folder(run, out_dir, checkpoint, episodes or 10, video, repo, overwrite)
            folder = built.folder
            typer.echo(f"evaluation return: {np.mean(built.returns):.2f} ± {np.std(built.returns):.2f} over "
                       f"{len(built.returns)} episodes (checkpoint {built.checkpoint}, step {built.step:,})")
            if built.video_note:
                err().print(f"note: {built.video_note}", highlight=False)
            typer.echo(f"model folder: {folder}")
        if dry_run:
            typer.echo("dry run: nothing uploaded")
            return
        err().print(f"uploading {folder} to {repo} (one commit) ...", highlight=False)
        try:
            url = upload(folder, repo, private, token)
        except KeyboardInterrupt:
            err().print(f"[yellow]stopped[/]: a commit is all or nothing, so {repo} holds either the whole folder or "
                        f"what it held before; the folder is kept: {folder}", highlight=False)
            raise typer.Exit(130) from None
    except ConfigError as exc:  # CheckpointError included
        fail(str(exc), 2)
    except UploadError as exc:
        fail(str(exc), 1)
    except OSError as exc:  # building the folder: a full disk, a read-only directory
        fail(f"cannot build the model folder: {exc}", 1)
    typer.echo(f"uploaded: {url}")


def _built_folder(folder: Path, repo: str, out, checkpoint, episodes) -> Path:
    """A folder `publish` built before: checked whole, and built for this repository (its card names it)."""
    from rlfoundry.hub.publish import check_folder

    given = [name for name, value in (("--out", out), ("--checkpoint", checkpoint), ("--episodes", episodes)) if value]
    if given:
        raise ConfigError(f"{folder} is a built model folder, uploaded as it is: {', '.join(given)} apply when "
                          "building one from a run")
    check_folder(folder)
    built_for = json.loads((folder / "rlfoundry.json").read_text()).get("repo")
    if built_for != repo:
        raise ConfigError(f"--repo {repo}: {folder} was built for {built_for} (its card names that repository); "
                          f"rebuild it: rlfoundry publish RUN --repo {repo}")
    return folder
