"""Memory cores: step-by-step equals whole-sequence, resets reset, memory matters, gradients flow.

Tolerances: float32 outputs and states agree to atol 1e-5, float64 to atol 1e-10 (the differences
are reassociation only: scans, chunking, attention over different key sets with -inf masks).
"""

import itertools
from types import SimpleNamespace

import pytest
import torch

from rlfoundry.nets.cores import CORE_SETTINGS, CORES, base, mamba, mamba2
from rlfoundry.nets.cores import gru as gru_core

T, B, D = 12, 3, 5
MEMORY = [name for name in CORES if name != "identity"]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def small_cfg(**overrides):
    settings = {"core_hidden": 16, "core_layers": 2, "memory_length": 4, "num_heads": 2,
                "mamba_state": 4, "mamba_expand": 2, "mamba_conv": 3, "mamba2_head_dim": 8}
    assert settings.keys() == CORE_SETTINGS.keys()
    return SimpleNamespace(**{**settings, **overrides})


def make_core(name, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return CORES[name](D, small_cfg()).to(dtype)


def episode_starts():
    """Env 0 starts at t = 0 and t = 7, env 1 at t = 3, env 2 never."""
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0, 0] = starts[7, 0] = starts[3, 1] = True
    return starts


def inputs(dtype=torch.float32, seed=1):
    return torch.randn(T, B, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def run(core, x, starts, pieces):
    """Feed x in consecutive pieces of the given lengths, carrying the state."""
    state, ys, t = core.initial_state(x.shape[1]), [], 0
    for n in pieces:
        y, state = core(x[t : t + n], state, None if starts is None else starts[t : t + n])
        ys.append(y)
        t += n
    return torch.cat(ys), state


def assert_same_state(a, b, atol):
    assert (a is None) == (b is None)
    for sa, sb in zip(a or (), b or (), strict=True):
        torch.testing.assert_close(sa, sb, atol=atol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(CORES))
def test_steps_and_chunks_equal_whole_sequence(name, dtype):
    core, x, starts, atol = make_core(name, dtype), inputs(dtype), episode_starts(), TOLERANCE[dtype]
    with torch.no_grad():
        whole, whole_state = run(core, x, starts, [T])
        for pieces in ([1] * T, [5, 7]):
            y, state = run(core, x, starts, pieces)
            torch.testing.assert_close(y, whole, atol=atol, rtol=0)
            assert_same_state(state, whole_state, atol)
    assert whole.shape == (T, B, core.out_features)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_one_layer_acting_step_equals_whole_sequence(name, grad):
    """One-layer LSTM/GRU act through their cell ops (torch.lstm_cell, torch.gru_cell)."""
    torch.manual_seed(0)
    core, x, starts = CORES[name](D, small_cfg(core_layers=1)), inputs(), episode_starts()
    with torch.set_grad_enabled(grad):
        whole, whole_state = run(core, x, starts, [T])
        y, state = run(core, x, starts, [1] * T)
    torch.testing.assert_close(y, whole, atol=1e-5, rtol=0)
    assert_same_state(state, whole_state, 1e-5)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", MEMORY)
def test_without_a_final_state_the_outputs_and_gradients_are_the_same(name, grad):
    """final_state=False lets a core skip its new state (the LSTM and GRU then run every episode segment side by
    side in one call); outputs and gradients stay those of the ordinary call."""
    core, x, starts = make_core(name), inputs(), episode_starts()
    state = tuple(torch.randn_like(s) if s.is_floating_point() else s for s in core.initial_state(B))
    results = []
    for final_state in (True, False):
        x_in = x.clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            y, _ = core(x_in, state, starts, final_state=final_state)
            if grad:
                y.square().sum().backward()
        results.append((y.detach(), x_in.grad, [p.grad.clone() for p in core.parameters() if p.grad is not None]))
        core.zero_grad(set_to_none=True)
    (y, gx, gp), (y_packed, gx_packed, gp_packed) = results
    torch.testing.assert_close(y_packed, y, atol=1e-5, rtol=0)
    if grad:
        torch.testing.assert_close(gx_packed, gx, atol=1e-4, rtol=0)
        for a, b in zip(gp_packed, gp, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", MEMORY)
def test_reset_equals_fresh_start(name):
    core, x = make_core(name), inputs()
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[6] = True
    with torch.no_grad():
        whole, _ = run(core, x, starts, [T])
        fresh, _ = run(core, x[6:], None, [T - 6])
    torch.testing.assert_close(whole[6:], fresh, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", MEMORY)
def test_memory_reaches_later_steps_but_not_across_resets(name):
    core, x = make_core(name), inputs()
    changed = x.clone()
    changed[0] += 1.0
    with torch.no_grad():
        y, _ = run(core, x, None, [T])
        y_changed, _ = run(core, changed, None, [T])
        assert (y_changed[1:4] - y[1:4]).abs().amax() > 1e-4

        starts = torch.zeros(T, B, dtype=torch.bool)
        starts[5] = True
        changed[:5] += torch.randn(5, B, D)
        y, _ = run(core, x, starts, [T])
        y_changed, _ = run(core, changed, starts, [T])
    torch.testing.assert_close(y_changed[5:], y[5:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", MEMORY)
def test_gradients_reach_every_parameter(name):
    core, x = make_core(name), inputs()
    y, _ = core(x, core.initial_state(B), episode_starts())
    (y * torch.randn_like(y)).sum().backward()
    for param_name, p in core.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), param_name
        assert p.grad.abs().amax() > 0, param_name


@pytest.mark.parametrize("name", MEMORY)
def test_state_has_envs_on_axis_1(name):
    core, x, starts = make_core(name), inputs(), episode_starts()
    state = core.initial_state(B)
    assert isinstance(state, tuple) and all(s.shape[1] == B for s in state)
    idx = torch.tensor([0, 2])
    with torch.no_grad():
        _, state = core(x[:6], state, starts[:6])
        y, _ = core(x[6:], state, starts[6:])
        y_sub, _ = core(x[6:, idx], tuple(s[:, idx] for s in state), starts[6:, idx])
    torch.testing.assert_close(y_sub, y[:, idx], atol=1e-5, rtol=0)


def naive_scan(a, b, h0):
    h, hs = h0, []
    for t in range(len(a)):
        h = a[t] * h + b[t]
        hs.append(h)
    return torch.stack(hs)


def test_parallel_scan_equals_loop():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(13, 2, 3, 4, generator=g, dtype=torch.float64)
    b = torch.randn(13, 2, 3, 4, generator=g, dtype=torch.float64)
    a[[4, 9]] = 0.0  # resets
    h0 = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(mamba._parallel_scan(a, b, h0), naive_scan(a, b, h0))


def test_selective_scan_on_cpu_equals_the_parallel_form():
    """The CPU path (`_SelectiveScan` without gradients) against the GPU path's parallel scan and contraction."""
    g = torch.Generator().manual_seed(1)
    steps, envs, e, n = 11, 2, 3, 4
    dt = torch.rand(steps, envs, e, generator=g, dtype=torch.float64)
    A = -torch.rand(e, n, generator=g, dtype=torch.float64)
    u = torch.randn(steps, envs, e, generator=g, dtype=torch.float64)
    B, C = (torch.randn(steps, envs, n, generator=g, dtype=torch.float64) for _ in range(2))
    h0 = torch.randn(envs, e, n, generator=g, dtype=torch.float64)
    starts = torch.zeros(steps, envs, dtype=torch.float64)
    starts[[0, 3, 7], [1, 0, 1]] = 1
    y, h = mamba._selective_scan(dt, A, u, B, C, h0, starts)
    decay = torch.exp(dt[..., None] * A) * (1 - starts)[..., None, None]
    hs = naive_scan(decay, u[..., None] * B[:, :, None], h0)
    torch.testing.assert_close(y, torch.einsum("tben,tbn->tbe", hs, C))
    torch.testing.assert_close(h, hs[-1])


def scan_inputs(dtype, steps=7, envs=3, e=4, n=5, with_starts=True, seed=2):
    """_selective_scan's (dt, A, u, B, C, h0) requiring gradients, and starts [T, B] (resets at t = 0 and inside)."""
    g = torch.Generator().manual_seed(seed)
    dt = torch.rand(steps, envs, e, generator=g, dtype=dtype)
    A = -torch.rand(e, n, generator=g, dtype=dtype) * 2
    u = torch.randn(steps, envs, e, generator=g, dtype=dtype)
    B, C = (torch.randn(steps, envs, n, generator=g, dtype=dtype) for _ in range(2))
    h0 = torch.randn(envs, e, n, generator=g, dtype=dtype)
    starts = torch.zeros(steps, envs, dtype=dtype)
    if with_starts:
        for t, b in [(0, 1), (2, 0), (4, 2), (5, 0)]:
            starts[t % steps, b % envs] = 1
    return [v.requires_grad_() for v in (dt, A, u, B, C, h0)], starts


def loop_scan(dt, A, u, B, C, h0, starts):
    """The scan as a loop through autograd (what `_selective_scan` did on CPU before `_SelectiveScan`)."""
    keep, h, ys = 1 - starts, h0, []
    for t in range(len(dt)):
        h = torch.exp(dt[t, :, :, None] * A) * h * keep[t, :, None, None] + u[t, :, :, None] * B[t, :, None]
        ys.append(torch.einsum("ben,bn->be", h, C[t]))
    return torch.stack(ys), h


@pytest.mark.parametrize("with_starts", [False, True])
def test_selective_scan_op_gradcheck(with_starts):
    inputs, starts = scan_inputs(torch.float64, with_starts=with_starts)
    keep = (1 - starts) if with_starts else None
    assert torch.autograd.gradcheck(lambda *args: mamba._SelectiveScan.apply(*args, keep), inputs)
    # some gradients only (ctx.needs_input_grad): dt and C; A, B and h0
    dt, A, u, B, C, h0 = inputs
    assert torch.autograd.gradcheck(lambda dt, C: mamba._SelectiveScan.apply(dt, A.detach(), u.detach(), B.detach(),
                                                                              C, h0.detach(), keep), (dt, C))
    assert torch.autograd.gradcheck(lambda A, B, h0: mamba._SelectiveScan.apply(dt.detach(), A, u.detach(), B,
                                                                                 C.detach(), h0, keep), (A, B, h0))


@pytest.mark.parametrize("with_starts", [False, True])
def test_selective_scan_op_equals_the_autograd_loop(with_starts):
    """float32 outputs, final state and the gradients of all six inputs against the loop through autograd, at
    the sizes PPO trains with (E = 128, N = 16), to 1e-5 of each tensor's largest entry (the gradients of A and B
    are sums over hundreds of steps and envs, up to 1e4 here; both sides are as close to float64)."""
    inputs, starts = scan_inputs(torch.float32, steps=32, envs=9, e=128, n=16, with_starts=with_starts)
    weights = torch.randn(32, 9, 128, generator=torch.Generator().manual_seed(3))

    def outputs_and_gradients(y, h):
        loss = (y * weights).sum() + h.square().sum()
        return (y, h, *torch.autograd.grad(loss, inputs))

    assert torch.is_grad_enabled()
    mine = outputs_and_gradients(*mamba._selective_scan(*inputs, starts))
    expected = outputs_and_gradients(*loop_scan(*inputs, starts))
    for a, b in zip(mine, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=0)


def test_selective_scan_op_buffers_outlive_later_calls():
    """Pooled buffers go back only when the graph that saved them is freed: a retained graph still gives the
    same gradients after other scans (of other sizes) ran forward and backward in between."""
    inputs, starts = scan_inputs(torch.float64, steps=9)
    y, h = mamba._selective_scan(*inputs, starts)
    loss = y.sum() + h.sum()
    first = torch.autograd.grad(loss, inputs, retain_graph=True)
    for steps in (9, 5, 12, 9):
        other, other_starts = scan_inputs(torch.float64, steps=steps, seed=steps)
        y_other, h_other = mamba._selective_scan(*other, other_starts)
        (y_other.sum() + h_other.sum()).backward()
    for a, b in zip(torch.autograd.grad(loss, inputs), first, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    with torch.no_grad():  # the forward alone, and in one step (acting)
        y_again, _ = mamba._selective_scan(*inputs, starts)
        dt, A, u, B, C, h0 = inputs
        y_step, _ = mamba._selective_scan(dt[:1], A, u[:1], B[:1], C[:1], h0, starts[:1])
    torch.testing.assert_close(y_again, y.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(y_step, y.detach()[:1], atol=1e-12, rtol=0)


@pytest.mark.parametrize("steps", [1, 6])
def test_selective_scan_under_bf16_autocast_runs_in_float32(steps):
    inputs, starts = scan_inputs(torch.float32, steps=steps)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(steps > 1):
        y, h = mamba._selective_scan(*(v.bfloat16() for v in inputs[:5]), inputs[5], starts.bfloat16())
    assert y.dtype == h.dtype == torch.float32
    if steps > 1:
        y.sum().backward()
        assert all(v.grad is not None and v.grad.dtype == torch.float32 for v in inputs)


def test_causal_conv_equals_a_step_by_step_reference():
    """Each step's taps over [window, x], zeroed before the step's episode start (the window too, where this
    call started an episode before the step); the returned window is masked for the final step's episode."""
    g = torch.Generator().manual_seed(4)
    steps, envs, channels, k = 7, 4, 3, 3
    x = torch.randn(steps, envs, channels, generator=g, dtype=torch.float64)
    window = torch.randn(k - 1, envs, channels, generator=g, dtype=torch.float64)
    weight = torch.randn(channels, k, generator=g, dtype=torch.float64)
    bias = torch.randn(channels, generator=g, dtype=torch.float64)
    starts = torch.zeros(steps, envs)
    starts[[0, 1, 3, 6], [0, 1, 2, 2]] = 1  # env 3 never starts
    last = base._last_start(starts)
    padded = torch.cat([window, x])
    expected = torch.empty_like(x)
    for t, b in itertools.product(range(steps), range(envs)):
        first = 0 if last[t, b] < 0 else k - 1 + last[t, b]
        taps = torch.stack([padded[t + j, b] if t + j >= first else torch.zeros(channels, dtype=x.dtype)
                            for j in range(k)], 1)
        expected[t, b] = (taps * weight).sum(1) + bias
    out, new_window = mamba._causal_conv(x, window, weight, bias, last)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_window[:, 3], padded[-(k - 1):, 3])
    torch.testing.assert_close(new_window[:, 2], torch.stack([torch.zeros_like(x[6, 2]), x[6, 2]]))  # start at 6
    # no starts (last = None) is the unmasked conv
    out, new_window = mamba._causal_conv(x, window, weight, bias, None)
    torch.testing.assert_close(out[:, 3], expected[:, 3])
    torch.testing.assert_close(new_window, padded[-(k - 1):])


def test_ssd_equals_loop():
    """Chunk 4 over 11 steps: padding, several chunks, and resets inside and at chunk edges."""
    g = torch.Generator().manual_seed(0)
    n_steps, envs, heads, p, n = 11, 2, 3, 2, 4
    x = torch.randn(n_steps, envs, heads, p, generator=g, dtype=torch.float64)
    log_a = -torch.rand(n_steps, envs, heads, generator=g, dtype=torch.float64)
    log_a[[2, 4, 8], 0] = float("-inf")
    Bm, Cm = torch.randn(2, n_steps, envs, n, generator=g, dtype=torch.float64)
    h0 = torch.randn(envs, heads, p, n, generator=g, dtype=torch.float64)
    y, h = mamba2._ssd(x, log_a, Bm, Cm, h0, chunk=4)

    hs = naive_scan(torch.exp(log_a)[..., None, None], x[..., None] * Bm[:, :, None, None], h0)
    torch.testing.assert_close(y, torch.einsum("tbhpn,tbn->tbhp", hs, Cm))
    torch.testing.assert_close(h, hs[-1])


def fake_selective_scan(u, delta, A, B, C, return_last_state):
    """mamba_ssm's selective_scan_fn contract (u, delta [b, d, l]; B, C [b, n, l]; h starts at 0)."""
    decay = torch.exp(delta.permute(2, 0, 1)[..., None] * A)
    hs = naive_scan(decay, (delta * u).permute(2, 0, 1)[..., None] * B.permute(2, 0, 1)[:, :, None], 0.0)
    y = torch.einsum("tbdn,tbn->bdt", hs, C.permute(2, 0, 1))
    return y, hs[-1]


def fake_chunk_scan(x, dt, A, B, C, chunk_size, initial_states, return_final_states):
    """mamba_ssm's mamba_chunk_scan_combined contract (x [b, l, h, p], dt [b, l, h], B, C [b, l, 1, n])."""
    decay = torch.exp(dt * A).transpose(0, 1)[..., None, None]
    inject = (dt[..., None] * x)[..., None] * B[:, :, None]
    hs = naive_scan(decay, inject.transpose(0, 1), initial_states)
    return torch.einsum("tbhpn,btn->bthp", hs, C[:, :, 0]), hs[-1]


@pytest.mark.parametrize("name", ["mamba", "mamba2"])
def test_kernel_path_wiring_matches_pure_path(name, monkeypatch):
    """The mamba_ssm path (CUDA only) run with reference stand-ins of the kernels on CPU."""
    core, x = make_core(name, torch.float64), inputs(torch.float64)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[4, 1] = True  # an episode start at the second call's t = 0
    with torch.no_grad():
        _, state = core(x[:4], core.initial_state(B), None)  # a non-zero carried state
        expected, expected_state = core(x[4:], state, starts[4:])
        monkeypatch.setattr(mamba, "selective_scan_fn", fake_selective_scan)
        monkeypatch.setattr(mamba2, "mamba_chunk_scan_combined", fake_chunk_scan)
        for module in (mamba, mamba2):
            monkeypatch.setattr(module, "_kernel_ok", lambda kernel, x, starts: kernel is not None)
        y, new_state = core(x[4:], state, starts[4:])
    torch.testing.assert_close(y, expected)
    assert_same_state(new_state, expected_state, 1e-10)


def gru_sequence_inputs(dtype, steps=6, envs=3, features=4, hidden=5):
    """x [T, B, D] and h0 [B, H] requiring gradients, an nn.GRU layer and its parameters in _GRUSequence's order."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(features, hidden).to(dtype)
    x = torch.randn(steps, envs, features, dtype=dtype, requires_grad=True)
    h0 = torch.randn(envs, hidden, dtype=dtype, requires_grad=True)
    return x, h0, gru, [gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]


@pytest.mark.parametrize("with_starts", [False, True])
def test_gru_sequence_op_gradcheck(with_starts):
    x, h0, _, weights = gru_sequence_inputs(torch.float64)
    keep = None
    if with_starts:
        keep = torch.ones(len(x), x.shape[1], dtype=torch.float64)
        keep[[0, 2, 4], [1, 0, 2]] = 0
    assert torch.autograd.gradcheck(lambda *args: gru_core._GRUSequence.apply(*args, keep), (x, h0, *weights))
    # without the gradient of h0 (the backward loop stops one step earlier)
    assert torch.autograd.gradcheck(lambda x, *w: gru_core._GRUSequence.apply(x, h0.detach(), *w, keep), (x, *weights))


@pytest.mark.parametrize("with_starts", [False, True])
def test_gru_sequence_op_equals_nn_gru(with_starts):
    """Outputs, final state and the gradients of x, h0 and the four parameters, against nn.GRU (cut at starts)."""
    x, h0, gru, params = gru_sequence_inputs(torch.float32, steps=9)
    starts = torch.zeros(len(x), x.shape[1], dtype=torch.bool)
    if with_starts:
        starts[[0, 3, 3, 6], [1, 0, 2, 0]] = True
    weights = torch.randn(len(x), *h0.shape)

    def outputs_and_gradients(y, state):
        loss = (y * weights).sum() + state.square().sum()
        return (y, state, *torch.autograd.grad(loss, [x, h0, *params]))

    y = gru_core._GRUSequence.apply(x, h0, *params, (~starts).float() if with_starts else None)
    mine = outputs_and_gradients(y, y[-1])
    state, ys = h0[None], []
    for t0, t1 in itertools.pairwise([0, 3, 6, 9] if with_starts else [0, 9]):
        y, state = gru(x[t0:t1], state * (~starts[t0, :, None]))
        ys.append(y)
    expected = outputs_and_gradients(torch.cat(ys), state[0])
    for a, b in zip(mine, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_gru_core_trains_through_the_sequence_op_on_cpu(monkeypatch):
    """GRUCore replays multi-step sequences with gradients through _GRUSequence, otherwise through nn.GRU."""
    calls = []
    apply = gru_core._GRUSequence.apply
    monkeypatch.setattr(gru_core._GRUSequence, "apply", lambda *args: calls.append(1) or apply(*args))
    torch.manual_seed(0)
    core, x = CORES["gru"](D, small_cfg(core_layers=1)), inputs()
    core(x, core.initial_state(B), None)
    assert len(calls) == 1
    with torch.no_grad():
        core(x, core.initial_state(B), None)
    core(x[:1], core.initial_state(B), None)
    assert len(calls) == 1
