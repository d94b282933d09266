"""DreamerV3's optimizer (`world_models/laprop.py`) against the update written out per tensor."""

import copy

import numpy as np
import torch

from rlfoundry.world_models.laprop import LaProp


def reference(params, grads_per_step, lr, warmup, agc=0.3, pmin=1e-3, b1=0.9, b2=0.999, eps=1e-20):
    params = [p.copy() for p in params]
    nu = [np.zeros_like(p) for p in params]
    mu = [np.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        lr_t = lr * min(t - 1, warmup) / warmup
        for i, (p, g) in enumerate(zip(params, grads)):
            g = g / max(1.0, np.linalg.norm(g) / (agc * max(pmin, np.linalg.norm(p))))
            nu[i] = b2 * nu[i] + (1 - b2) * g * g
            u = g / (np.sqrt(nu[i] / (1 - b2**t)) + eps)
            mu[i] = b1 * mu[i] + (1 - b1) * u
            params[i] = p - lr_t * mu[i] / (1 - b1**t)
    return params


def test_laprop_with_agc_matches_the_update_written_out():
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(4, 3)), np.zeros(3), rng.normal(size=5) * 0.01]  # a zero bias: AGC clips it hardest
    grads = [[rng.normal(size=p.shape) * scale for p, scale in zip(start, (0.01, 1.0, 5.0))] for _ in range(4)]
    tensors = [torch.tensor(p, requires_grad=True) for p in start]
    optimizer = LaProp(tensors, lr=0.1, warmup=2)
    for step, step_grads in enumerate(grads):
        for tensor, g in zip(tensors, step_grads):
            tensor.grad = torch.tensor(g)
        optimizer.step()
        if step == 0:  # the warm-up starts at lr 0
            assert all(np.array_equal(t.detach().numpy(), p) for t, p in zip(tensors, start))
    expected = reference(start, grads, lr=0.1, warmup=2)
    for tensor, p in zip(tensors, expected):
        assert np.allclose(tensor.detach().numpy(), p, rtol=1e-10, atol=1e-12)


def test_laprop_state_round_trips():
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2).double()
    b = torch.nn.Linear(3, 2).double()
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = LaProp(a.parameters(), lr=0.01, warmup=1), LaProp(b.parameters(), lr=0.01, warmup=1)
    x = torch.randn(8, 3, dtype=torch.float64)
    for _ in range(3):
        opt_a.zero_grad()
        a(x).square().sum().backward()
        opt_a.step()
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as from a checkpoint file: no shared tensors
    b.load_state_dict(a.state_dict())
    for model, opt in ((a, opt_a), (b, opt_b)):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_the_capturable_path_matches_the_update_written_out_and_resumes_either_way():
    """capturable (the step count and the corrections on the parameters' device, as a CUDA graph needs them): the
    same update to float32 rounding of the corrections; a checkpoint of either kind loads into the other."""
    rng = np.random.default_rng(1)
    start = [rng.normal(size=(4, 3)), rng.normal(size=5) * 0.01]
    grads = [[rng.normal(size=p.shape) for p in start] for _ in range(6)]
    tensors = [torch.tensor(p, requires_grad=True) for p in start]
    optimizer = LaProp(tensors, lr=0.1, warmup=3, capturable=True)
    for step_grads in grads[:3]:
        for tensor, g in zip(tensors, step_grads):
            tensor.grad = torch.tensor(g)
        optimizer.step()
    plain = LaProp([torch.tensor(p, requires_grad=True) for p in start], lr=0.1, warmup=3)
    plain.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert not plain.param_groups[0]["capturable"] and float(plain.state[plain.param_groups[0]["params"][0]]["step"]) == 3
    for step_grads in grads[3:]:
        for tensor, g in zip(tensors, step_grads):
            tensor.grad = torch.tensor(g)
        optimizer.step()
    expected = reference(start, grads, lr=0.1, warmup=3)
    for tensor, p in zip(tensors, expected):
        assert np.allclose(tensor.detach().numpy(), p, rtol=1e-6, atol=1e-9)
