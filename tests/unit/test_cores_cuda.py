"""Memory cores on CUDA: the same outputs and gradients as on the CPU, and mamba_ssm's kernels (where installed)
equal to the pure-PyTorch scans they replace. Skipped without a CUDA device; run where one is lent.

The kernel tests use the cores' default sizes (mamba_ssm's Triton kernels tile over the head and state sizes) in
float32. Their tolerance is 1e-2 of each tensor's largest value: Triton's fp32 dots run in TF32 (10 mantissa bits),
and on an H100 the Mamba-2 kernel's outputs and gradients differed from the pure scan by up to 1.4e-3 of that scale,
where a wrong carried state or start would differ by its whole size.
"""

from types import SimpleNamespace

import pytest
import torch

from rlfoundry.nets.cores import CORE_SETTINGS, CORES, mamba, mamba2

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

T, B, D = 12, 3, 5
MEMORY = [name for name in CORES if name != "identity"]
KERNELS = {"mamba": (mamba, "selective_scan_fn"), "mamba2": (mamba2, "mamba_chunk_scan_combined")}  # module, kernel


@pytest.fixture
def full_fp32():
    """No TF32 in CUDA matmuls and cuDNN (LSTM, GRU) for the comparison with the CPU."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]


def outputs_and_gradients(core, x, starts):
    """y, the final state and the gradients of x and every parameter, for a fixed random loss."""
    x = x.clone().requires_grad_(True)
    _, warm = core(x[:4].detach(), core.initial_state(x.shape[1]), None)  # a non-zero carried state
    y, state = core(x[4:], warm, starts[4:])
    weights = torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)
    loss = (y * weights).sum() + sum(s.float().square().sum() for s in state)
    grads = torch.autograd.grad(loss, [x, *core.parameters()], allow_unused=True)
    return [y, *state, *(g for g in grads if g is not None)]


def assert_relative_close(actual, expected, rtol):
    """Every tensor within rtol of its largest absolute value; the message lists each tensor's relative error."""
    errors = [float((a.cpu() - e.cpu()).abs().amax() / e.cpu().abs().amax().clamp_min(1e-12))
              for a, e in zip(actual, expected, strict=True)]
    assert max(errors) <= rtol, [f"{error:.1e}" for error in errors]


@pytest.mark.parametrize("name", MEMORY)
def test_core_on_cuda_equals_cpu(name, full_fp32, monkeypatch):
    """The pure path on CUDA against the CPU, outputs and gradients (the kernels have their own test below)."""
    for module, kernel in KERNELS.values():
        monkeypatch.setattr(module, kernel, None)
    torch.manual_seed(0)
    cfg = SimpleNamespace(**{**CORE_SETTINGS, "core_hidden": 16, "core_layers": 2, "memory_length": 4,
                             "num_heads": 2, "mamba_state": 4, "mamba2_head_dim": 8})
    core = CORES[name](D, cfg)
    x = torch.randn(T, B, D, generator=torch.Generator().manual_seed(1))
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[[4, 7, 9], [0, 0, 1]] = True
    expected = outputs_and_gradients(core, x, starts)
    actual = outputs_and_gradients(core.cuda(), x.cuda(), starts.cuda())
    assert_relative_close(actual, expected, 1e-4)


@pytest.mark.parametrize("name", list(KERNELS))
def test_mamba_kernel_equals_pure_scan_on_cuda(name, monkeypatch):
    """Calls without starts after t = 0 go through mamba_ssm's kernel, with the carried state and a start at t = 0
    in env 1: outputs, final state and gradients against the pure scan on the same device."""
    module, kernel_name = KERNELS[name]
    kernel = getattr(module, kernel_name)
    if kernel is None:
        pytest.skip(f"mamba_ssm's {kernel_name} is not installed")
    calls = []
    monkeypatch.setattr(module, kernel_name, lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs))
    torch.manual_seed(0)
    cfg = SimpleNamespace(**{**CORE_SETTINGS, "core_layers": 2})
    core = CORES[name](D, cfg).cuda()
    x = torch.randn(68, 8, D, generator=torch.Generator().manual_seed(1)).cuda()
    starts = torch.zeros(68, 8, dtype=torch.bool, device="cuda")
    starts[4, 1] = True
    with_kernel = outputs_and_gradients(core, x, starts)
    assert len(calls) == 2 * cfg.core_layers  # the warm-up call's and the measured call's
    monkeypatch.setattr(module, kernel_name, None)
    assert_relative_close(with_kernel, outputs_and_gradients(core, x, starts), 1e-2)
