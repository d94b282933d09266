"""Trained networks read back from where runs leave them: a run directory's checkpoint, a published model folder
(`rlfoundry publish`), or `hf://ORG/NAME[@REVISION]` on the Hugging Face Hub (downloaded into the Hub's cache with
`huggingface_hub`, an optional extra).

Two users read them: a policy that acts (`rlfoundry.load_policy`, `eval`, `play`, `export`) and a new run that starts
from them (`train.init`, fine-tuning). Both take only the networks and the observation statistics; optimizers,
replay and random streams stay behind. Only safetensors, JSON and YAML are read: nothing in the files is executed.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlfoundry import envs as envs_lib
from rlfoundry.config.errors import ConfigError
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run.restore import run_named

HF_PREFIX = "hf://"
MODEL_FORMAT = "rlfoundry-model"
MODEL_VERSION = 1
MODEL_FILES = ("config.yaml", "model.safetensors", "normalization.json", "rlfoundry.json")

ObsStats = tuple[np.ndarray, np.ndarray, float]  # (mean, var, count) of the observation normalisation


@dataclass
class Saved:
    """The networks of a run directory's checkpoint or of a model folder."""

    path: Path  # the run directory or model folder: its config.yaml is the networks' config
    weights: dict[str, torch.Tensor]  # flat names, "<part>.<name>"
    obs_stats: ObsStats | None
    step: int  # the env step they were saved at
    checkpoint: str  # which: last, best or a step directory (a model folder: the one it was built from)
    file: Path  # the safetensors file the weights came from

    @property
    def run_dir(self) -> Path | None:
        return None if is_model_folder(self.path) else self.path

    @property
    def step_dir(self) -> str | None:
        """A run's checkpoint by its step directory, whatever `best` or `last` points at later; None for a folder."""
        return None if self.run_dir is None else self.file.parent.name


# ---------------------------------------------------------------- where


def is_model_folder(path: Path) -> bool:
    return (Path(path) / "rlfoundry.json").is_file()


def local_path(spec: str | Path, runs_root: str | Path = "runs") -> Path:
    """The local directory a RUN names: a run directory or model folder as given, `@last` (the newest run with a
    checkpoint under `runs_root`), or `hf://ORG/NAME[@REVISION]` downloaded into the Hub cache."""
    text = str(spec)
    if text.startswith(HF_PREFIX):
        return download(text[len(HF_PREFIX):])
    path = run_named(text, runs_root, "checkpoints/last.json", "a checkpoint")
    if not path.is_dir():
        raise ConfigError(f"{spec}: no such run directory or model folder")
    return path


def download(name: str) -> Path:
    """`ORG/NAME[@REVISION]` from the Hugging Face Hub into its cache (token and endpoint from the usual places:
    HF_TOKEN, `hf auth login`, HF_ENDPOINT); only the model folder's files are fetched."""
    try:
        import huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:
        raise ConfigError(f"{HF_PREFIX}{name}: loading from the Hub needs huggingface_hub: "
                          "pip install 'rlfoundry[hub]'") from None
    repo_id, _, revision = name.partition("@")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"{HF_PREFIX}{name}: expected {HF_PREFIX}ORG/NAME or {HF_PREFIX}ORG/NAME@REVISION")
    try:
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision or None, allow_patterns=list(MODEL_FILES))
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise ConfigError(f"{HF_PREFIX}{name}: not found on the Hub ({type(exc).__name__})") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:  # no network and nothing cached, a refused token
        raise ConfigError(f"{HF_PREFIX}{name}: cannot download: {str(exc).splitlines()[0]}") from None
    return Path(folder)


def pinned(spec: str, folder: Path) -> str:
    """`spec` as a name that finds the same files again: a local path made absolute, `hf://ORG/NAME` with the commit
    the Hub cache holds (its snapshot folder is named by it)."""
    if not spec.startswith(HF_PREFIX):
        return str(folder.resolve())
    repo_id = spec[len(HF_PREFIX):].partition("@")[0]
    if folder.parent.name == "snapshots":
        return f"{HF_PREFIX}{repo_id}@{folder.name}"
    return spec


def checkpoint_name(run_dir: Path, which: str | None) -> str:
    """The checkpoint `which` names (last, best, a step directory, or a step number: 5120 is step_000000005120), or
    with None the best where one was saved, else the last."""
    if which is None:
        return "best" if (Path(run_dir) / "checkpoints" / "best.json").is_file() else "last"
    if which.isdigit():
        return ckpt.step_dir_name(int(which))
    if which in ("", ".", "..") or Path(which).name != which:
        raise ckpt.CheckpointError(f"checkpoint {which!r}: allowed: last, best, a step (5120) or a step directory "
                                   f"name in {Path(run_dir) / 'checkpoints'}")
    return which


# ---------------------------------------------------------------- reading


def read(path: Path, checkpoint: str | None, source: str) -> Saved:
    """The networks in `path` (`local_path`): a run directory's checkpoint `checkpoint` (see `checkpoint_name`), or a
    model folder's one (which takes None, best or last). `source` names it in messages."""
    if is_model_folder(path):
        if checkpoint not in (None, "best", "last"):
            raise ConfigError(f"checkpoint {checkpoint}: a model folder holds one checkpoint ({source})")
        return _model_folder(path, source)
    name = checkpoint_name(path, checkpoint)
    step_dir = ckpt.resolve(path, name)
    saved = ckpt.load_networks(step_dir, ("obs_rms_mean", "obs_rms_var"))
    stats = None
    if "obs_rms_mean" in saved.arrays:
        stats = (saved.arrays["obs_rms_mean"], saved.arrays["obs_rms_var"], float(saved.state["obs_rms_count"]))
    return Saved(path, saved.weights, stats, int(saved.state["step"]), name, step_dir / "weights.safetensors")


def _model_folder(path: Path, source: str) -> Saved:
    marker = ckpt.read_marked(path, MODEL_FILES, "rlfoundry.json", MODEL_FORMAT, MODEL_VERSION, "model folder")
    try:
        stats = json.loads((path / "normalization.json").read_text())
    except (OSError, ValueError) as exc:
        raise ckpt.CheckpointError(f"{path / 'normalization.json'}: unreadable ({exc})") from None
    weights = ckpt.read_weights(path / "model.safetensors")
    return Saved(path, weights, read_stats(stats, source), int(marker.get("step", 0)),
                 str(marker.get("checkpoint") or "unknown"), path / "model.safetensors")


def stats_json(stats: ObsStats | None) -> dict[str, Any]:
    """Observation statistics as JSON (Python writes floats exactly, and the dtype is kept: they read back bit for
    bit, and normalise in the same precision as in training)."""
    if stats is None:
        return {"mean": None, "var": None, "count": None}
    mean, var, count = stats
    return {"shape": list(mean.shape), "dtype": str(mean.dtype), "mean": mean.astype(np.float64).ravel().tolist(),
            "var": var.astype(np.float64).ravel().tolist(), "count": float(count)}


def read_stats(data: dict, source: str) -> ObsStats | None:
    """The inverse of `stats_json` (CheckpointError for malformed or impossible statistics)."""
    if not isinstance(data, dict) or data.get("mean") is None:
        return None
    try:
        shape = tuple(int(n) for n in data["shape"])
        dtype = np.dtype(data.get("dtype", "float64"))
        if dtype.kind != "f":
            raise ValueError(f"dtype {dtype} is not a float type")
        mean = np.asarray(data["mean"], dtype=np.float64).reshape(shape).astype(dtype)
        var = np.asarray(data["var"], dtype=np.float64).reshape(shape).astype(dtype)
        count = float(data["count"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ckpt.CheckpointError(f"{source}: normalization.json is malformed ({exc})") from None
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all() and math.isfinite(count)):
        raise ckpt.CheckpointError(f"{source}: normalization.json holds non-finite or negative statistics")
    return mean, var, count


# ---------------------------------------------------------------- into an agent


def load_weights(agent, weights: dict[str, torch.Tensor], source: str) -> None:
    """Give a freshly built agent the networks of `weights` (a checkpoint's flat names) and keep the rest of its
    fresh state (optimizers, empty buffers). Every tensor of the agent's networks must be there; tensors of parts
    a fresh agent does not have (a collector's last observations) are run state and are left out."""
    state = agent.state_dict()
    ours = network_weights(agent, weights, source)
    for flat_name, tensor in ours.items():
        part, _, name = flat_name.partition(".")
        state[part][name] = tensor
    try:
        agent.load_state_dict(state)
    except (KeyError, RuntimeError, ValueError) as exc:  # shapes that do not fit this config
        raise ckpt.CheckpointError(f"{source}: the weights do not fit the run's networks ({exc})") from None


def network_weights(agent, weights: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """The tensors of `weights` that a freshly built `agent`'s networks hold (CheckpointError when one is missing, or
    a network holds a name the agent does not know)."""
    expected, _, _ = ckpt.split_agent_state(agent.state_dict())
    parts = {name.partition(".")[0] for name in expected}
    given = {name for name in weights if name.partition(".")[0] in parts}
    missing, unexpected = sorted(set(expected) - given), sorted(given - set(expected))
    if missing or unexpected:
        raise ckpt.CheckpointError(f"{source}: the weights do not fit the run's networks (missing: {missing[:5]}, "
                                   f"unexpected: {unexpected[:5]})")
    return {name: weights[name] for name in expected}


def start_from(saved: Saved, agent, envs, source: str) -> None:
    """A new run's agent and training envs given the networks and observation statistics of `saved` (`train.init`).
    Networks trained on normalised observations mean nothing on raw ones, and the other way round, so the two runs
    must agree on `env.normalize_obs` (ConfigError)."""
    load_weights(agent, saved.weights, source)
    ours = envs_lib.obs_stats(envs)
    if (saved.obs_stats is None) != (ours is None):
        setting = "false" if saved.obs_stats is None else "true"
        raise ConfigError(f"{source}: its networks were trained {'without' if setting == 'false' else 'with'} running "
                          f"observation statistics and this run's are not; set env.normalize_obs={setting}")
    if saved.obs_stats is None or ours is None:
        return
    mean, var, count = saved.obs_stats
    if mean.shape != ours[0].shape:
        raise ConfigError(f"{source}: its observation statistics have shape {list(mean.shape)}, this run's "
                          f"observations {list(ours[0].shape)}")
    envs_lib.set_obs_stats(envs, mean.astype(ours[0].dtype), var.astype(ours[1].dtype), count)


def describe(saved: Saved | None, source: str | None) -> dict[str, Any] | None:
    """What a run started from, for its provenance: `source` (train.init as pinned), which checkpoint at which step,
    and the weights file's SHA-256 (the same networks whatever the source is called later)."""
    if saved is None:
        return None
    with open(saved.file, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    return {"source": source, "checkpoint": saved.step_dir or saved.checkpoint, "step": saved.step, "sha256": digest}
