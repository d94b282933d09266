"""Host arrays to the device without stalling it: each step's observations, each replay sample, and a replay's
largest arrays kept on the device.

A copy from pageable host memory to a GPU waits for the GPU to finish its queue; from pinned (page-locked) memory it
is queued like a kernel (`non_blocking`). `HostToDevice` keeps pinned buffers of the arrays' shapes between calls, so
the pinning is paid once. On the CPU the arrays are handed over as tensors sharing their memory.

`DeviceMirror` (`train.device_replay`) keeps a copy of a replay's frames and actions on the device, written a row at a
time as the host's are: a sample is then gathered there from indices drawn on the host, so a batch of Atari frames
(or DreamerV3's windows of 64 steps) crosses the bus as a few hundred integers instead of megabytes, and the host
does no gathering. The host arrays stay what checkpoints and the replay's bookkeeping read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class HostToDevice:
    """Arrays (a replay sample) to the device: on CUDA through pinned buffers kept between calls, each copied with
    `non_blocking` (a copy from pageable memory would wait for the GPU to finish its queue); elsewhere as tensors
    sharing the arrays' memory. A call first waits for the previous call's copies to have read the buffers."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pinned: list[torch.Tensor] = []
        self.copied: torch.cuda.Event | None = None

    def __call__(self, *arrays: Any) -> tuple[torch.Tensor, ...]:
        """The arrays as tensors on the device; tensors already there (a mirrored replay's) pass as they are."""
        if self.device.type != "cuda":
            return tuple(torch.as_tensor(a, device=self.device) for a in arrays)
        moved = iter([p.to(self.device, non_blocking=True) for p in self._stage(
            [a for a in arrays if not _on(a, self.device)])])
        self._copied()
        return tuple(a if _on(a, self.device) else next(moved) for a in arrays)

    def into(self, targets: tuple[torch.Tensor, ...], *arrays: Any) -> None:
        """Copy host `arrays` into the device tensors `targets` of their shapes (a rollout's step, a replay's row),
        cast to the targets' dtypes, without making new device tensors."""
        if self.device.type != "cuda":
            for target, array in zip(targets, arrays, strict=True):
                target.copy_(torch.as_tensor(array))
            return
        for target, pinned in zip(targets, self._stage(list(arrays)), strict=True):
            target.copy_(pinned, non_blocking=True)
        self._copied()

    def _stage(self, arrays: list[Any]) -> list[torch.Tensor]:
        """The arrays in the pinned buffers (made for their shapes, once the previous copies have read them)."""
        hosts = [torch.as_tensor(a) for a in arrays]
        if [(p.shape, p.dtype) for p in self.pinned] != [(h.shape, h.dtype) for h in hosts]:
            self.pinned = [torch.empty(h.shape, dtype=h.dtype, pin_memory=True) for h in hosts]
            self.copied = None
        if self.copied is not None:
            self.copied.synchronize()
        for pinned, host in zip(self.pinned, hosts, strict=True):
            pinned.copy_(host)
        return self.pinned

    def _copied(self) -> None:
        """Mark the copies just queued, which the next call waits for before it refills the buffers."""
        self.copied = torch.cuda.Event()
        self.copied.record()


def _on(array: Any, device: torch.device) -> bool:
    return isinstance(array, torch.Tensor) and array.device.type == device.type


class DeviceMirror:
    """Device copies of named host arrays `[R, B, ...]` (a replay's ring), kept equal to them row by row: the replay
    calls `write` after each write of its own and `load` after a restore, and gathers samples with `take`. A new
    mirror is zeros, as a fresh replay's arrays are (`load` the arrays when they already hold something)."""

    def __init__(self, arrays: dict[str, np.ndarray], device: torch.device):
        self.device = device
        self.tensors = {name: torch.zeros(array.shape, dtype=torch.from_numpy(array[:0]).dtype, device=device)
                        for name, array in arrays.items()}
        self.rows = {name: HostToDevice(device) for name in arrays}  # pinned buffers of each row's shape
        self.indices = HostToDevice(device)

    def write(self, name: str, slot: int, row: np.ndarray) -> None:
        """Row `slot` of array `name` became `row` on the host (the copy is queued, not waited for)."""
        self.rows[name].into((self.tensors[name][slot],), row)

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Copy the whole host arrays (a new mirror, a restored replay)."""
        for name, array in arrays.items():
            self.tensors[name].copy_(torch.from_numpy(np.ascontiguousarray(array)))

    def to_device(self, *indices: np.ndarray) -> tuple[torch.Tensor, ...]:
        """A sample's index arrays on the device, in one batch of copies."""
        return self.indices(*indices)

    def take(self, name: str, slots: torch.Tensor, envs: torch.Tensor) -> torch.Tensor:
        """`array[slots, envs]` of array `name`, on the device (index tensors from `to_device`)."""
        return self.tensors[name][slots, envs]
