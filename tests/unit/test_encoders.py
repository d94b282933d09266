"""The stacked MLP encoder: its hand-written backward against autograd, groups, init, the flat optimizer."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rlfoundry.algos.optim import FlatOptimizer
from rlfoundry.nets.encoders import ACTIVATIONS, MLPEncoder, _StackedMLPFunction


def net_cfg(**kw):
    base = {"activation": "tanh", "hidden_sizes": [16, 8], "ortho_init": True}
    return SimpleNamespace(**(base | kw))


def reference(encoder: MLPEncoder, x: torch.Tensor) -> torch.Tensor:
    """The same G MLPs written as plain autograd layers, one group at a time."""
    functions = {"tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu, "silu": nn.functional.silu}
    outputs = []
    for g in range(encoder.groups):
        h = x.flatten(1)
        for weight, bias in zip(encoder.weights, encoder.biases):
            h = functions[encoder.activation](h @ weight[g] + bias[g])
        outputs.append(h)
    return torch.stack(outputs)


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_backward_passes_gradcheck(activation):
    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.float64)
    params = [torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 4, 6, dtype=torch.float64),
              torch.randn(2, 1, 4, dtype=torch.float64), torch.randn(2, 1, 6, dtype=torch.float64)]
    for p in params:
        p.requires_grad_(True)
    x.requires_grad_(True)  # an input with a gradient too (SAC's critics read the actor's actions)
    # relu/elu have a kink at 0; random inputs keep pre-activations away from it
    assert torch.autograd.gradcheck(lambda x, *ps: _StackedMLPFunction.apply(x, activation, *ps), [x, *params])


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("groups", [1, 2])
def test_matches_plain_layers_forward_and_backward(activation, groups):
    torch.manual_seed(1)
    encoder = MLPEncoder((2, 3), net_cfg(activation=activation, ortho_init=False), groups)
    x = torch.randn(7, 2, 3)
    out = encoder(x)
    assert out.shape == (groups, 7, 8) and encoder.out_features == 8
    expected = reference(encoder, x)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)

    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), list(encoder.parameters()))
    expected_grads = torch.autograd.grad((expected * weights).sum(), list(encoder.parameters()))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    with torch.inference_mode():  # the acting path skips the autograd function
        torch.testing.assert_close(encoder(x), expected.detach(), atol=1e-6, rtol=1e-5)


def test_groups_are_independent_and_orthogonal():
    torch.manual_seed(2)
    encoder = MLPEncoder((4,), net_cfg(hidden_sizes=[8, 8]), 2)
    first = encoder.weights[0]
    assert not torch.equal(first[0], first[1])
    for g in range(2):
        w = first[g]  # [4, 8], orthogonal with gain √2: its 4 rows are orthonormal, scaled by √2
        torch.testing.assert_close(w @ w.T, 2 * torch.eye(4), atol=1e-5, rtol=0)
    assert torch.count_nonzero(encoder.biases[0]) == 0
    out = encoder(torch.randn(3, 4))
    grad = torch.autograd.grad(out[0].sum(), list(encoder.parameters()))
    assert all(torch.count_nonzero(g[1]) == 0 for g in grad)  # group 0's output never touches group 1


def test_no_hidden_layers_pass_the_observation_through():
    encoder = MLPEncoder((2, 2), net_cfg(hidden_sizes=[]), 2)
    x = torch.randn(3, 2, 2)
    assert encoder.out_features == 4
    torch.testing.assert_close(encoder(x), x.flatten(1).expand(2, 3, 4))


def test_flat_adam_matches_adam_with_clipping():
    torch.manual_seed(3)
    make = lambda: nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))  # noqa: E731
    flat_net, ref_net = make(), make()
    ref_net.load_state_dict(flat_net.state_dict())
    flat = FlatOptimizer(flat_net, lr=0.01, eps=1e-5, max_grad_norm=0.5)
    ref = torch.optim.Adam(ref_net.parameters(), lr=0.01, eps=1e-5)
    for step in range(5):
        x = torch.randn(8, 3) * (step + 1)
        norm = flat.update(flat_net(x).square().sum())
        ref.zero_grad()
        ref_net(x).square().sum().backward()
        ref_norm = nn.utils.clip_grad_norm_(ref_net.parameters(), 0.5)
        ref.step()
        torch.testing.assert_close(norm, ref_norm)
        for a, b in zip(flat_net.parameters(), ref_net.parameters()):
            torch.testing.assert_close(a, b)
    # parameters stay views of the flat buffer, also after loading a state dict
    flat_net.load_state_dict(make().state_dict())
    assert torch.equal(torch.cat([p.detach().flatten() for p in flat_net.parameters()]), flat.flat.detach())
    assert math.isfinite(float(norm))


def test_mlp_stays_fp32_under_bf16_autocast():
    # Acting (no grad) and learning (the autograd function) must compute the same fp32 function.
    encoder = MLPEncoder((4,), net_cfg(), 2)
    x = torch.randn(6, 4)
    expected = encoder(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        learning = encoder(x)
        with torch.inference_mode():
            acting = encoder(x)
    assert learning.dtype == acting.dtype == torch.float32
    torch.testing.assert_close(learning, expected)
    torch.testing.assert_close(acting, expected.detach(), atol=1e-6, rtol=1e-5)
