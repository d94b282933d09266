"""What this machine offers a run, and the `auto` settings chosen from it: `train.torch_threads`, `train.precision`.

Detected, never assumed: machines range from AVX2-only CPUs (no native bfloat16: bf16 autocast is emulated there,
about ten times slower than fp32, and oneDNN has no bf16 LSTM) to CPUs with AVX-512 BF16 or AMX, and GPUs.

- Threads (`auto`): the cores this process may use (its CPU affinity, a cgroup CPU quota, and a share of them when
  `RLFOUNDRY_CONCURRENT_RUNS` runs share the machine), for networks where more threads pay off: image encoders
  and MLPs at least `WIDE_LAYER` units wide. Smaller networks run on one thread: their operations are too small
  to split, and the extra threads only add synchronisation (see docs/guide/performance.md, "Threads, precision and compilation").
- Precision (`auto`): bf16 autocast where the device runs bfloat16 natively (a CUDA device that supports it; a CPU
  with AVX-512 BF16 or AMX) and the network has an image encoder, where it was measured to pay off; fp32 elsewhere.
  An explicit `bf16` without native support trains on, with a warning naming the CPU and the expected slowdown.

The trainer resolves both once, records them in the run's provenance and keeps them on resume, so the same seed
with the same resolved thread count stays bit-reproducible.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from rlfoundry.config.cores import cores_of_run, usable_cores

# The CPU features worth naming beside a speed figure: the vector extensions that set the matmul and conv kernels.
EXTENSIONS = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "avx512_fp16")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")
WIDE_LAYER = 256  # MLP width from which more threads pay off (Pendulum SAC, 256 units: 76 -> 103 steps/s at 2)
IMAGE_ENCODERS = ("nature_cnn", "impala_cnn")
BF16_SLOWDOWN = "about 10x slower than fp32"  # Breakout PPO on an AVX2-only AMD EPYC: 36 against 348 steps/s
COMPILE_PAYS_FROM = 500_000  # CartPole PPO on an AVX2 EPYC: 4,287 -> 5,680 steps/s after ~22 s compiling: even at ~385k


@dataclass(frozen=True)
class Hardware:
    cpu: str  # model name
    extensions: tuple[str, ...]  # of EXTENSIONS, the ones this CPU has
    cores: int  # cores this process may use (affinity, cgroup quota), before any share
    gpu: str | None = None  # the CUDA device's name, when there is one
    gpu_bf16: bool = False

    @property
    def cpu_bf16(self) -> bool:
        """Native bfloat16 arithmetic on this CPU (AVX-512 BF16 or AMX)."""
        return any(flag in self.extensions for flag in NATIVE_BF16)

    def describe(self) -> str:
        """One line for logs and benchmark headers, e.g. `AMD EPYC 7B12 (avx, avx2, fma; no native bf16), 2 cores`."""
        flags = ", ".join(self.extensions) or "no AVX"
        native = "native bf16" if self.cpu_bf16 else "no native bf16"
        text = f"{self.cpu} ({flags}; {native}), {self.cores} core{'s' if self.cores != 1 else ''}"
        if self.gpu:
            text += f"; GPU {self.gpu} ({'bf16' if self.gpu_bf16 else 'no bf16'})"
        return text


def _cpuinfo(text: str | None = None) -> tuple[str | None, set[str]]:
    """(model name, flags) from /proc/cpuinfo on Linux (or `text`); (None, empty) elsewhere. A model name without a
    number (a virtual machine's `AMD EPYC`) gets the x86 family and model, which tell CPU generations apart: Zen 4
    and Zen 5 EPYCs both say `AMD EPYC` but are family 25 and 26."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None, set()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    model = fields.get("model name")
    if model and not any(c.isdigit() for c in model) and "cpu family" in fields and "model" in fields:
        model = f"{model} family {fields['cpu family']} model {fields['model']}"
    return model, set(fields.get("flags", fields.get("Features", "")).split())


def _torch_extensions() -> set[str]:
    """The extensions torch itself detects (any OS): the fallback where /proc/cpuinfo is missing."""
    checks = {"avx2": "_is_avx2_supported", "avx512f": "_is_avx512_supported", "avx512_vnni": "_is_vnni_supported",
              "avx512_bf16": "_is_avx512_bf16_supported", "amx_tile": "_is_amx_tile_supported"}
    found = set()
    for flag, name in checks.items():
        check = getattr(torch.cpu, name, None)
        if check is not None and check():
            found.add(flag)
    if "amx_tile" in found:
        found.add("amx_bf16")  # every AMX CPU (Sapphire Rapids on) has AMX-BF16
    return found


@functools.cache
def detect() -> Hardware:
    model, flags = _cpuinfo()
    flags = flags or _torch_extensions()
    gpu, gpu_bf16 = None, False
    if torch.cuda.is_available():
        gpu, gpu_bf16 = torch.cuda.get_device_name(), bool(torch.cuda.is_bf16_supported())
    return Hardware(cpu=model or platform.processor() or platform.machine() or "unknown CPU",
                    extensions=tuple(flag for flag in EXTENSIONS if flag in flags), cores=usable_cores(),
                    gpu=gpu, gpu_bf16=gpu_bf16)


def wants_threads(network) -> bool:
    """Whether the network's operations are big enough to split over threads: an image encoder, or an MLP layer of
    at least WIDE_LAYER units (the config's `network` section)."""
    return network.encoder in IMAGE_ENCODERS or max(network.hidden_sizes, default=0) >= WIDE_LAYER


def resolve_threads(requested: int | str, network, hardware: Hardware, environ=os.environ, processes: int = 1) -> int:
    """`train.torch_threads`: a number stays; `auto` is this process's share of the cores
    (`config.cores.cores_of_run`) where threads pay off, else 1."""
    if requested != "auto":
        return int(requested)
    return cores_of_run(hardware.cores, environ, processes) if wants_threads(network) else 1


def native_bf16(device: torch.device, hardware: Hardware) -> bool:
    return hardware.gpu_bf16 if device.type == "cuda" else hardware.cpu_bf16


def resolve_precision(requested: str, device: torch.device, network, hardware: Hardware) -> tuple[str, str | None]:
    """`train.precision` resolved: (fp32 or bf16, a warning or None). `auto` is bf16 only on a CPU with native bf16
    and an image encoder: on CUDA fp32 was measured faster (H100, Breakout PPO: 1,783 steps/s in fp32, 1,635 in bf16;
    RL's small networks and batches leave the casts to and from bf16 unpaid). An explicit bf16 without native
    support stays bf16, with a warning."""
    if requested == "auto":
        bf16 = device.type == "cpu" and native_bf16(device, hardware) and network.encoder in IMAGE_ENCODERS
        return ("bf16" if bf16 else "fp32"), None
    if requested == "bf16" and not native_bf16(device, hardware):
        where = f"GPU {hardware.gpu}" if device.type == "cuda" else f"CPU {hardware.cpu} ({', '.join(hardware.extensions)})"
        return "bf16", (f"train.precision=bf16: the {where} has no native bfloat16 arithmetic, so bf16 is emulated and "
                        f"training runs {BF16_SLOWDOWN}; continuing in bf16 (train.precision=auto picks fp32 here)")
    return requested, None


def resolve_compile(requested: bool | str, algo: str, network, total_timesteps: int,
                    device: torch.device | str = "cpu") -> tuple[bool, str | None]:
    """`train.compile` resolved, and a warning where `true` cannot be honoured (the algorithm has no compiled path:
    `Agent.compiles`). auto: on the CPU, an algorithm whose compiled path is measured to pay off
    (`Agent.compile_by_default`: PPO) with a feed-forward core over a run long enough to win back the compilation
    (COMPILE_PAYS_FROM steps), where a C++ compiler is found; everything else stays eager, CUDA included, where the
    steady-state steps are CUDA graphs instead and compiling was measured slower (H100, PPO Breakout over 32k steps:
    644 steps/s compiled, 1,783 eager; see docs/guide/performance.md)."""
    from rlfoundry.algos import algorithm

    agent = algorithm(algo)
    if requested is True and not agent.compiles:
        return False, (f"train.compile=true: {algo} has no compiled path (docs/guide/performance.md, \"Threads, precision and "
                       f"compilation\" says why); it runs eager")
    if requested != "auto":
        return bool(requested), None
    worth_it = (torch.device(device).type == "cpu" and agent.compile_by_default and network.core == "identity"
                and total_timesteps >= COMPILE_PAYS_FROM)
    return worth_it and has_cpp_compiler(), None


def resolve_cuda_graphs(requested: bool | str, algo: str, device: torch.device, debug: bool,
                        processes: int) -> tuple[bool, str | None]:
    """`train.cuda_graphs` resolved, and a warning where `true` cannot be honoured: graphs need CUDA, an algorithm
    with graphed steps (`Agent.graphs`), one process, and no debug checks (they read
    values on the host at every update). auto: on CUDA for the algorithms whose graphed steps were measured to pay
    (`Agent.graphs_by_default`; docs/guide/performance.md, "Threads, precision and compilation")."""
    from rlfoundry.algos import algorithm

    agent = algorithm(algo)
    reason = ("the run is on the CPU" if device.type != "cuda" else
              f"{algo} has no graphed steps" if not agent.graphs else
              "train.debug reads every update's values on the host" if debug else
              "a run across processes all-reduces its gradients between steps" if processes > 1 else None)
    if requested is True:
        return reason is None, None if reason is None else f"train.cuda_graphs=true: {reason}; it runs eager"
    return requested == "auto" and reason is None and agent.graphs_by_default, None


def has_cpp_compiler() -> bool:
    """torch.compile's CPU code generation needs a C++ compiler ($CXX, g++ or clang++)."""
    return any(shutil.which(name) for name in (os.environ.get("CXX", ""), "g++", "clang++") if name)


def machine() -> str:
    """The line every benchmark prints above its figures: this machine's hardware and torch."""
    return f"machine: {detect().describe()}; torch {torch.__version__}"
