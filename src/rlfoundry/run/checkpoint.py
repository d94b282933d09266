"""Checkpoints: written atomically, loaded without executing anything from the file.

    <run>/checkpoints/step_000012288/     one checkpoint
        weights.safetensors               network weights (safetensors: raw tensors only)
        agent.pt                          the rest of the agent (optimizer state): torch.load(weights_only=True)
        arrays.npz                        numpy state (normalisation statistics, RNG arrays): np.load(allow_pickle=False)
        state.json                        counters, summary, format marker
    <run>/checkpoints/last.json           {"step_dir": ...}: the newest checkpoint
    <run>/checkpoints/best.json           {"step_dir": ..., "eval_return": ...}: the best evaluation

A checkpoint is written into a hidden temporary directory, each file flushed to disk, and then
renamed into place (a save that fails, on a full disk say, removes its temporary directory); the pointer files are replaced with `os.replace`. A `kill -9` at any moment,
also in the middle of a save, therefore leaves every earlier checkpoint and both pointers intact:
at worst a `.tmp-*` directory is left over, which the next save removes. Old checkpoints are
deleted the same way round: renamed to a `.tmp-` name first, so no half-deleted one keeps its name.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.rundir import write_json
from rlfoundry.sinks.files import writing

FORMAT = "rlfoundry-checkpoint"
VERSION = 1
FILES = ("state.json", "weights.safetensors", "agent.pt", "arrays.npz")


class CheckpointError(ConfigError):
    """A checkpoint that cannot be loaded: missing, truncated, corrupt or not ours (exit 2)."""


@dataclass
class Checkpoint:
    weights: dict[str, torch.Tensor]  # flat names, e.g. "policy.encoder.weights.0"
    agent: dict[str, Any]  # tensors and plain values (the optimizer state)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)  # JSON values


def _write_file(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write bytes (or let a writer fill the file) and flush them to disk; a failure names `path`."""
    with writing(path), open(path, "wb") as f:
        if isinstance(data, bytes):
            f.write(data)
        else:
            data(f)
        f.flush()
        os.fsync(f.fileno())


def _write_files(directory: Path, step: int, checkpoint: Checkpoint) -> None:
    # clone: parameters may be views of one flat buffer (FlatOptimizer), and safetensors refuses shared storage
    weights = {k: v.detach().cpu().clone(memory_format=torch.contiguous_format) for k, v in checkpoint.weights.items()}
    _write_file(directory / "weights.safetensors", safetensors_bytes(weights))
    agent = io.BytesIO()  # torch.save into a file turns a failed write (a full disk) into an anonymous RuntimeError
    torch.save(checkpoint.agent, agent)
    _write_file(directory / "agent.pt", agent.getvalue())
    # (numpy's stub takes the keyword arrays for its allow_pickle flag)
    _write_file(directory / "arrays.npz", lambda f: np.savez(f, **checkpoint.arrays))  # type: ignore[arg-type]
    state = {"format": FORMAT, "version": VERSION, "step": step, **checkpoint.state}
    _write_file(directory / "state.json", json.dumps(state, indent=2, allow_nan=True).encode())


def step_dir_name(step: int) -> str:
    return f"step_{step:012d}"


def save(root: Path, step: int, checkpoint: Checkpoint, keep_last: int, best_return: float | None = None) -> Path:
    """Write `checkpoint` as `root/step_<step>` atomically, point `last.json` at it (and `best.json` when
    `best_return` is given), then delete all but the newest `keep_last` step directories (never the best)."""
    root.mkdir(parents=True, exist_ok=True)
    for leftover in root.glob(".tmp-*"):  # from a save that was killed
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir()
    try:
        _write_files(tmp, step, checkpoint)
        if final.exists():  # this step is saved already (a resumed run passing it again): keep that one whole
            shutil.rmtree(tmp)
        else:
            os.rename(tmp, final)
    except BaseException as exc:  # a full disk, a signal: leave no half-written directory holding the space
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.filename and Path(exc.filename).parent == tmp:
            # name the checkpoint's file, not the temporary one that is gone now
            raise OSError(exc.errno, exc.strerror, str(final / Path(exc.filename).name)) from exc
        raise
    write_json(root / "last.json", {"step_dir": final.name, "step": step})
    if best_return is not None:
        write_json(root / "best.json", {"step_dir": final.name, "step": step, "eval_return": best_return})
    _prune(root, keep_last)
    return final


def _pointer(root: Path, name: str) -> str | None:
    try:
        return json.loads((root / f"{name}.json").read_text())["step_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_step(root: Path) -> int | None:
    """The step of the newest checkpoint under `root` (a run's checkpoints/), or None."""
    try:
        return int(json.loads((root / "last.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _prune(root: Path, keep_last: int) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    protected = {_pointer(root, "best"), _pointer(root, "last")}
    for path in steps[:-keep_last] if keep_last > 0 else []:
        if path.name not in protected:
            _remove(path)


def _remove(path: Path) -> None:
    """Delete a checkpoint directory so that a kill at any moment leaves either all of it or none of it
    under its name: rename it to a `.tmp-` name first (the next save clears those)."""
    trash = path.with_name(f".tmp-trash-{path.name}-{os.getpid()}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def resolve(run_dir: Path, which: str = "last") -> Path:
    """The checkpoint directory of a run: `last`, `best`, or a step directory name."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        raise CheckpointError(f"{run_dir}: no checkpoints/ directory; is this a run directory of a run that saved one?")
    if which in ("last", "best"):
        name = _pointer(root, which)
        if name is None:
            raise CheckpointError(f"{root / (which + '.json')}: missing or unreadable, so there is no '{which}' checkpoint")
    else:
        name = which
    path = root / name
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    return path


def read_marked(path: Path, files: tuple[str, ...], marker: str, fmt: str, version: int, what: str) -> dict[str, Any]:
    """The JSON `marker` of a directory of ours (a checkpoint, a model folder) that must hold `files`: its `format`
    must be `fmt` and its `version` this reader's (CheckpointError naming what is wrong)."""
    missing = [name for name in files if not (path / name).is_file()]
    if missing:
        raise CheckpointError(f"{path}: not a complete rlfoundry {what} (missing {', '.join(missing)})")
    try:
        data = json.loads((path / marker).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / marker}: unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise CheckpointError(f"{path}: not an rlfoundry {what} ({marker} has no format '{fmt}')")
    if data.get("version") != version:
        raise CheckpointError(f"{path}: {what} format version {data.get('version')}; this rlfoundry reads {version}")
    return data


def read_weights(file: Path) -> dict[str, torch.Tensor]:
    """Tensors from a safetensors file (raw tensors only: nothing is executed)."""
    try:
        return load_file(file)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{file}: corrupt or truncated ({exc})") from None


def load(path: Path) -> Checkpoint:
    """Read a checkpoint directory. Nothing in it is executed: safetensors, a weights-only torch.load,
    numpy without pickle and JSON. Anything missing, truncated or foreign raises CheckpointError."""
    path = Path(path)
    saved = load_networks(path, None)
    try:
        saved.agent = torch.load(path / "agent.pt", map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle.UnpicklingError for a payload that is not plain data, zip errors, EOF
        raise CheckpointError(
            f"{path / 'agent.pt'}: refused or corrupt: only plain tensors and values load ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    return saved


def load_networks(path: Path, arrays: Sequence[str] | None = ()) -> Checkpoint:
    """What a trained policy needs of a checkpoint directory: its weights, state.json and the named arrays (those
    present; None: all), without the optimizers' state or the replay, which may be gigabytes (`agent` is left
    empty)."""
    path = Path(path)
    state = read_marked(path, FILES, "state.json", FORMAT, VERSION, "checkpoint")
    return Checkpoint(weights=read_weights(path / "weights.safetensors"), agent={}, arrays=_arrays(path, arrays),
                      state=state)


def _arrays(path: Path, names: Sequence[str] | None) -> dict[str, np.ndarray]:
    """arrays.npz read without pickle: every array, or those of `names` it holds (the others are not read)."""
    try:
        with np.load(path / "arrays.npz", allow_pickle=False) as data:
            return {key: data[key] for key in data.files if names is None or key in names}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CheckpointError(f"{path / 'arrays.npz'}: corrupt or not plain arrays ({exc})") from None


def _is_weights(value: Any) -> bool:
    """A module state dict: a flat mapping of names to tensors (what goes to safetensors)."""
    return isinstance(value, dict) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())


def _is_arrays(value: Any) -> bool:
    """A mapping of names to numpy arrays (a replay buffer's storage): what goes to the .npz."""
    return isinstance(value, dict) and bool(value) and all(isinstance(v, np.ndarray) for v in value.values())


def split_agent_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray], dict[str, Any]]:
    """An agent's `state_dict()` as (weights for safetensors, arrays for the .npz — both with flat names
    "<part>.<name>" — and everything else, for a weights-only torch.save)."""
    weights = {f"{key}.{name}": tensor for key, value in state.items() if _is_weights(value)
               for name, tensor in value.items()}
    arrays = {f"agent.{key}.{name}": array for key, value in state.items() if _is_arrays(value)
              for name, array in value.items()}
    rest = {key: value for key, value in state.items() if not _is_weights(value) and not _is_arrays(value)}
    return weights, arrays, rest


def agent_state(checkpoint: Checkpoint) -> dict[str, Any]:
    """The inverse of `split_agent_state`: what the agent's `load_state_dict` takes."""
    state: dict[str, Any] = {}
    for flat_name, tensor in checkpoint.weights.items():
        part, _, name = flat_name.partition(".")
        state.setdefault(part, {})[name] = tensor
    for flat_name, array in checkpoint.arrays.items():
        if flat_name.startswith("agent."):
            part, _, name = flat_name.removeprefix("agent.").partition(".")
            state.setdefault(part, {})[name] = array
    state.update({k: v for k, v in checkpoint.agent.items() if k != "torch_rng"})
    return state
