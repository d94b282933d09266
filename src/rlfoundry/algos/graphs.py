"""CUDA graphs for the steady-state gradient steps, and the check that a step can be captured.

On a GPU, a gradient step of the small networks of continuous control is a few hundred kernels of microseconds each,
launched one by one from Python: the GPU waits on the launches. A CUDA graph records the step's kernels once and
replays them with one launch (`train.cuda_graphs`). We capture by hand with `torch.cuda.CUDAGraph` rather than
through `torch.compile(mode="reduce-overhead")`: torch.compile breaks its graph at `loss.backward()` and at the
optimizer's step (torch 2.13), so it would capture the step in pieces with Python between them, while a hand
capture holds the forward passes, the backward passes, the Adam steps and the target updates in one graph.

What a step must be to be captured: a function of tensors returning a dict of tensors, with fixed shapes, no host
sync (`.item()`, `float(t)`, `bool(t)`, `.cpu()`), no Python branch on a tensor's value and no Python state it
changes (a counter it increments would count once, at capture); its optimizers capturable, with a learning rate
that a schedule changes held in a device tensor (`rlfoundry.algos.optim`). `no_host_syncs` checks the first two on
any device, the CPU included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import TreeSpec, tree_flatten, tree_map, tree_unflatten

Step = Callable[..., dict[str, torch.Tensor]]

# Operators that read a tensor's value on the host (item, float, bool, int, a Python branch on a tensor) or whose
# output shape depends on values: a CUDA graph can hold none of them.
_SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive",
            "unique_dim", "repeat_interleave", "equal", "is_nonzero"}

# Indexing operators: with a boolean mask among the indices, their shape depends on the mask's values.
_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class HostSync(RuntimeError):
    """A step read a tensor's value on the host, or made a shape from values: it cannot be captured."""


class _SyncGuard(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in _SYNCING:
            raise HostSync(f"aten.{name}: the step reads a tensor's value on the host (or sizes a tensor by its "
                           "values), so a CUDA graph cannot capture it")
        if name in ("_to_copy", "copy_") and _to_host(func, args, kwargs):
            raise HostSync(f"aten.{name} to the CPU: the step copies a device tensor to the host")
        if name in _INDEXING and any(i is not None and i.dtype == torch.bool for i in args[1]):
            raise HostSync(f"aten.{name} with a boolean mask: the result's shape depends on the mask's values")
        return func(*args, **(kwargs or {}))


def _to_host(func, args, kwargs) -> bool:
    """Whether a copy moves a tensor from another device to the CPU."""
    kwargs = kwargs or {}
    if func.overloadpacket.__name__ == "copy_":
        dst, src = args[0], args[1]
        return dst.device.type == "cpu" and isinstance(src, torch.Tensor) and src.device.type != "cpu"
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == "cpu" and args[0].device.type != "cpu"


@contextlib.contextmanager
def no_host_syncs() -> Iterator[None]:
    """Inside, any operator that reads a tensor's value on the host raises HostSync (on the CPU as on a GPU)."""
    with _SyncGuard():
        yield


class GraphedStep:
    """`step` captured in a CUDA graph after `warmup` eager calls, then replayed: one graph per signature of its
    arguments (their structure, every tensor's shape and dtype, every other value), up to `max_graphs`; calls with
    further signatures run eagerly (a PPO minibatch's row count varies by a few rows with the episode resets).

    The arguments may nest tensors in tuples, lists, dicts and named tuples (a PPO `Minibatch`): they are copied
    into the graph's input buffers and the graph replays. The eager calls run on a side stream, as capture asks
    (cuBLAS, autograd and the optimizers' states are set up there); the capturing call replays at once, so every call
    is one real step. The returned tensors (in a new dict) are the graph's own outputs: the next call with the same
    signature overwrites them, so read or add them first, or ask for `copies`. A step that samples from `torch.Generator`s of its own
    names them in `generators` (the default CUDA generator is always followed).
    """

    def __init__(self, step: Step, warmup: int = 3, max_graphs: int = 8, generators: Sequence[torch.Generator] = (),
                 copies: bool = False):
        self.step = step
        self.copies = copies  # replays return copies of the outputs (for callers that keep them past the next call)
        self.warmup = warmup
        self.max_graphs = max_graphs
        self.generators = generators  # CUDA generators the step draws from besides the default one
        self.graphs: list[_Graph] = []

    def __call__(self, *args: Any) -> dict[str, torch.Tensor]:
        leaves, spec = tree_flatten(args)
        signature = tuple((x.shape, x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in leaves)
        graph = next((g for g in self.graphs if g.signature == signature and g.spec == spec), None)
        if graph is None:
            if len(self.graphs) >= self.max_graphs:
                return self.step(*args)
            graph = _Graph(spec, signature)
            self.graphs.append(graph)
        graph.calls += 1
        if graph.graph is None and graph.calls <= self.warmup:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                outputs = self.step(*args)
            torch.cuda.current_stream().wait_stream(side)
            return outputs
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if graph.graph is None:
            graph.inputs = [x.detach().clone() for x in tensors]
            buffers = iter(graph.inputs)
            static = tree_unflatten([next(buffers) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
            graph.graph = torch.cuda.CUDAGraph()
            for generator in self.generators:  # each replay then advances it as the eager step would
                graph.graph.register_generator_state(generator)
            with torch.cuda.graph(graph.graph):
                graph.outputs = self.step(*static)
        else:
            for buffer, x in zip(graph.inputs, tensors, strict=True):
                buffer.copy_(x, non_blocking=True)
        graph.graph.replay()
        return tree_map(torch.clone, graph.outputs) if self.copies else dict(graph.outputs)


class _Graph:
    """One captured signature of a GraphedStep: its graph, input buffers and outputs."""

    def __init__(self, spec: TreeSpec, signature: tuple):
        self.spec, self.signature = spec, signature
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[torch.Tensor] = []
        self.outputs: dict[str, torch.Tensor] = {}
