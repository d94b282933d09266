"""Trained policies by name: a run directory, `@last`, a published model folder, or `hf://ORG/NAME` on the
Hugging Face Hub (downloaded into the Hub's cache with `huggingface_hub`, an optional extra).

A model folder is what `rlfoundry publish` writes (`rlfoundry.hub.publish`): `config.yaml`, `model.safetensors`,
`normalization.json` and `rlfoundry.json`, with a model card, a video and the evaluation results beside them. It is
read as a run directory is: YAML validated as any config, safetensors, JSON; nothing in it is executed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.checkpoint import CheckpointError, read_marked, read_weights
from rlfoundry.run.restore import run_named
from rlfoundry.trained import policy as policy_lib

HF_PREFIX = "hf://"
MODEL_FORMAT = "rlfoundry-model"
MODEL_VERSION = 1
MODEL_FILES = ("config.yaml", "model.safetensors", "normalization.json", "rlfoundry.json")


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


def load_policy(run: str | Path = "@last", checkpoint: str | None = None, device: str = "cpu",
                runs_root: str | Path = "runs") -> policy_lib.Policy:
    """The trained policy a RUN names (`local_path`): a run directory's checkpoint `checkpoint` (last, best or a
    step directory; default: the best where one was saved, else the last), or a model folder's weights. See
    `rlfoundry.trained.policy` for what the returned object does."""
    path = local_path(run, runs_root)
    if not is_model_folder(path):
        return policy_lib.from_run(path, checkpoint, device)
    if checkpoint not in (None, "best", "last"):
        raise ConfigError(f"--checkpoint {checkpoint}: a model folder holds one checkpoint ({run})")
    return from_model_folder(path, str(run), device)


def from_model_folder(path: Path, source: str, device: str = "cpu") -> policy_lib.Policy:
    from rlfoundry.run.restore import run_config

    marker = read_marked(path, MODEL_FILES, "rlfoundry.json", MODEL_FORMAT, MODEL_VERSION, "model folder")
    try:
        stats = json.loads((path / "normalization.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / 'normalization.json'}: unreadable ({exc})") from None
    weights = read_weights(path / "model.safetensors")
    policy = policy_lib.build(run_config(path), weights, read_stats(stats, source), int(marker.get("step", 0)),
                              source, device)
    policy.checkpoint = str(marker.get("checkpoint") or "unknown")
    return policy


def stats_json(stats: tuple[np.ndarray, np.ndarray, float] | None) -> dict:
    """Observation statistics as JSON (Python writes floats exactly, and the dtype is kept: they read back bit for
    bit, and normalise in the same precision as in training)."""
    if stats is None:
        return {"mean": None, "var": None, "count": None}
    mean, var, count = stats
    return {"shape": list(mean.shape), "dtype": str(mean.dtype), "mean": mean.astype(np.float64).ravel().tolist(),
            "var": var.astype(np.float64).ravel().tolist(), "count": float(count)}


def read_stats(data: dict, source: str) -> tuple[np.ndarray, np.ndarray, float] | None:
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
        raise CheckpointError(f"{source}: normalization.json is malformed ({exc})") from None
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all() and math.isfinite(count)):
        raise CheckpointError(f"{source}: normalization.json holds non-finite or negative statistics")
    return mean, var, count
