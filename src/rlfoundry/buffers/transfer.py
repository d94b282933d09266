"""Host arrays to the device without stalling it: each step's observations, each replay sample.

A copy from pageable host memory to a GPU waits for the GPU to finish its queue; from pinned (page-locked) memory it
is queued like a kernel (`non_blocking`). `HostToDevice` keeps pinned buffers of the arrays' shapes between calls, so
the pinning is paid once. On the CPU the arrays are handed over as tensors sharing their memory.
"""

from __future__ import annotations

from typing import Any

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
        if self.device.type != "cuda":
            return tuple(torch.as_tensor(a, device=self.device) for a in arrays)
        hosts = [torch.as_tensor(a) for a in arrays]
        if [(p.shape, p.dtype) for p in self.pinned] != [(h.shape, h.dtype) for h in hosts]:
            self.pinned = [torch.empty(h.shape, dtype=h.dtype, pin_memory=True) for h in hosts]
            self.copied = None
        if self.copied is not None:
            self.copied.synchronize()
        for pinned, host in zip(self.pinned, hosts, strict=True):
            pinned.copy_(host)
        on_device = tuple(p.to(self.device, non_blocking=True) for p in self.pinned)
        self.copied = torch.cuda.Event()
        self.copied.record()
        return on_device
