"""One seed for Python, NumPy and torch, and the device; the envs are seeded at their first reset
(`rlfoundry.envs.env_seed`)."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int, torch_threads: int, deterministic: bool = False) -> None:
    # Same seed gives the same numbers only at the same thread count (reductions split differently).
    torch.set_num_threads(torch_threads)
    deterministic_kernels(deterministic)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def deterministic_kernels(on: bool) -> None:
    """`train.deterministic`: torch's deterministic kernels only (an operation that has none raises, naming
    itself), cuDNN without autotuning, and cuBLAS with a fixed workspace (CUBLAS_WORKSPACE_CONFIG, set before the
    first matrix product unless the user set it). Off, as torch's default: on CUDA, kernels that add with atomics
    (the backward of gather, index_add and scatter_add; some cuDNN convolution backward algorithms) may differ in
    the last bits from run to run. The CPU kernels rlfoundry uses are deterministic either way."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(on)  # set either way: an earlier run in this process may have turned it on
    torch.backends.cudnn.deterministic = on


def resolve_device(name: str) -> torch.device:
    from rlfoundry.config.errors import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device = 'cuda': no CUDA device is available here; allowed: auto, cpu")
    return torch.device(name)


def rng_state() -> tuple[dict[str, Any], dict[str, np.ndarray], torch.Tensor]:
    """Python's, NumPy's and torch's global RNG states, for a checkpoint: (JSON values, NumPy arrays, torch's CPU
    state). The arrays hold each CUDA device's generator too, where CUDA is in use (SAC's and TD3's noises)."""
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)  # the legacy global generator is an MT19937: its state is the tuple form
    py_version, py_internal, py_gauss = random.getstate()
    values = {"numpy_rng": {"pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
              "python_rng": {"version": py_version, "internal": list(py_internal), "gauss": py_gauss}}
    arrays = {"numpy_rng_keys": np_state[1]}
    if torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            arrays[f"cuda_rng_{index}"] = torch.cuda.get_rng_state(index).numpy()
    return values, arrays, torch.get_rng_state()


def set_rng_state(values: dict[str, Any], arrays: dict[str, np.ndarray], torch_state: torch.Tensor) -> None:
    """The inverse of `rng_state`."""
    torch.set_rng_state(torch_state)
    for key, state in arrays.items():
        if key.startswith("cuda_rng_") and torch.cuda.is_available():
            torch.cuda.set_rng_state(torch.from_numpy(state.copy()), int(key.removeprefix("cuda_rng_")))
    numpy_rng = values["numpy_rng"]
    np.random.set_state(("MT19937", arrays["numpy_rng_keys"], numpy_rng["pos"], numpy_rng["has_gauss"],
                         numpy_rng["cached"]))
    python_rng = values["python_rng"]
    random.setstate((python_rng["version"], tuple(python_rng["internal"]), python_rng["gauss"]))


@contextlib.contextmanager
def own_random_state(seed: int) -> Iterator[None]:
    """Python's, NumPy's and torch's global generators seeded with `seed` inside, and put back as they were on the
    way out, however it is left: what runs inside draws the same numbers every time, and what runs after draws the
    numbers it would have drawn had it never run (an evaluation, for the training around it)."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cuda = range(torch.cuda.device_count()) if torch.cuda.is_initialized() else ()
    with torch.random.fork_rng(devices=cuda):  # (torch's CPU and CUDA states: it puts them back itself)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
