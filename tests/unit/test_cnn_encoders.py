"""CNN encoders: the [G, N, out_features] contract, pixel scaling, independent groups, init, sizes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rlfoundry.nets.cnn import MINIGRID_VOCAB, GridEncoder, ImpalaCNN, NatureCNN

ATARI = (4, 84, 84)
GRID = (3, 7, 7)


def net_cfg(**overrides) -> SimpleNamespace:
    """Stand-in for NetworkConfig with the fields the CNN encoders read."""
    fields = dict(
        ortho_init=True,
        activation="tanh",  # ignored by the CNNs
        hidden_sizes=[64],
        impala_channels=[16, 32, 32],
        grid_embedding_dim=8,
        grid_channels=[16, 16],
    )
    return SimpleNamespace(**{**fields, **overrides})


def pixels(n: int, shape=ATARI, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def grid(n: int, shape=GRID, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    channels = [torch.randint(0, high, (n, 1, *shape[1:]), generator=g) for high in MINIGRID_VOCAB]
    return torch.cat(channels, 1).to(torch.uint8)


# (encoder class, its typical observation shape, a batch maker)
CASES = {
    "nature": (NatureCNN, ATARI, pixels),
    "impala": (ImpalaCNN, ATARI, pixels),
    "grid": (GridEncoder, GRID, grid),
}


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # One thread: these small convs gain nothing from more, and the tests share the machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_output_shape(case, groups):
    cls, shape, make = CASES[case]
    enc = cls(shape, net_cfg(hidden_sizes=[32, 48]), groups)
    out = enc(make(5, shape))
    assert enc.out_features == 48
    assert out.shape == (groups, 5, 48) and out.dtype == torch.float32


def test_flattened_sizes_without_hidden_layers():
    # Nature: 84 → (84-8)/4+1 = 20 → (20-4)/2+1 = 9 → 9-3+1 = 7, so 64·7·7.
    assert NatureCNN(ATARI, net_cfg(hidden_sizes=[]), 1).out_features == 64 * 7 * 7
    # IMPALA: each stage's pool halves with "SAME" rounding: 84 → 42 → 21 → 11, so 32·11·11.
    assert ImpalaCNN(ATARI, net_cfg(hidden_sizes=[]), 1).out_features == 32 * 11 * 11
    # Grid: same-padded convs keep 7×7.
    assert GridEncoder(GRID, net_cfg(hidden_sizes=[]), 1).out_features == 16 * 7 * 7


def test_nature_cnn_other_image_sizes():
    enc = NatureCNN((3, 56, 40), net_cfg(hidden_sizes=[]), 1)  # e.g. MiniGrid RGB
    # 56 → 13 → 5 → 3 and 40 → 9 → 3 → 1
    assert enc.out_features == 64 * 3 * 1
    assert enc(pixels(2, (3, 56, 40))).shape == (1, 2, 64 * 3 * 1)
    with pytest.raises(ValueError, match="too small"):
        NatureCNN((4, 30, 30), net_cfg(), 1)
    with pytest.raises(ValueError, match="channel-first"):
        NatureCNN((84, 84), net_cfg(), 1)


def test_nature_cnn_parameter_count():
    enc = NatureCNN(ATARI, net_cfg(hidden_sizes=[512], ortho_init=False), 1)
    conv1 = 32 * 4 * 8 * 8 + 32  # 8,224
    conv2 = 64 * 32 * 4 * 4 + 64  # 32,832
    conv3 = 64 * 64 * 3 * 3 + 64  # 36,928
    fc = 64 * 7 * 7 * 512 + 512  # 1,606,144
    assert conv1 + conv2 + conv3 + fc == 1_684_128
    assert sum(p.numel() for p in enc.parameters()) == 1_684_128
    two = NatureCNN(ATARI, net_cfg(hidden_sizes=[512], ortho_init=False), 2)
    assert sum(p.numel() for p in two.parameters()) == 2 * 1_684_128


@pytest.mark.parametrize("cls", [NatureCNN, ImpalaCNN])
def test_uint8_pixels_are_scaled_by_1_over_255_inside(cls):
    enc = cls(ATARI, net_cfg(), 2)
    x = pixels(3)
    out = enc(x)
    # A uint8 frame gives the features of its [0, 1] float version; floats are taken as they are.
    torch.testing.assert_close(enc(x.float() / 255), out)
    for g, net in enumerate(enc.nets):
        torch.testing.assert_close(out[g], net(x.float() / 255))


@pytest.mark.parametrize("case", CASES)
def test_groups_are_independent(case):
    cls, shape, make = CASES[case]
    enc = cls(shape, net_cfg(), 2)
    out = enc(make(4, shape))
    assert not torch.allclose(out[0], out[1])  # different parameters per group
    out[0].sum().backward()
    assert all(p.grad is not None for p in enc.nets[0].parameters())
    # stack's backward sends group 1 an all-zero gradient: nothing reaches its parameters
    assert all(p.grad is None or not p.grad.any() for p in enc.nets[1].parameters())
    assert not set(map(id, enc.nets[0].parameters())) & set(map(id, enc.nets[1].parameters()))


@pytest.mark.parametrize("case", CASES)
def test_backward(case):
    cls, shape, make = CASES[case]
    enc = cls(shape, net_cfg(), 2)
    enc(make(4, shape)).square().mean().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def weighted_layers(enc: nn.Module) -> list[nn.Module]:
    return [m for m in enc.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


@pytest.mark.parametrize("case", [case for case in CASES if CASES[case][0] is not ImpalaCNN])
def test_orthogonal_init(case):
    cls, shape, _ = CASES[case]
    layers = weighted_layers(cls(shape, net_cfg(ortho_init=True), 2))
    assert layers
    for layer in layers:
        w = layer.weight.detach().flatten(1)  # conv kernels as [out, in·kh·kw]
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(gram, 2.0 * torch.eye(gram.shape[0]), atol=1e-4, rtol=0)  # gain √2
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    # Off: PyTorch's default init (uniform biases, not zero).
    for layer in weighted_layers(cls(shape, net_cfg(ortho_init=False), 1)):
        assert layer.bias.abs().sum() > 0


def test_grid_embeddings_are_summed_per_cell():
    # No convs and no linears: the feature is the embedded grid itself, [E, H, W] flattened.
    enc = GridEncoder(GRID, net_cfg(grid_channels=[], hidden_sizes=[]), 1)
    x = grid(2)
    table = enc.nets[0].embedding.weight.detach()  # rows: 11 types, then 6 colours, then 4 states
    t, c, s = x.long().unbind(1)  # [N, H, W] each
    expected = (table[t] + table[11 + c] + table[17 + s]).permute(0, 3, 1, 2).flatten(1)
    torch.testing.assert_close(enc(x)[0], expected)


def test_grid_accepts_float_indices_and_agent_direction():
    enc = GridEncoder(GRID, net_cfg(), 2)
    x = grid(3)
    x[:, 2, 3, 6] = 3  # FullyObsWrapper: the agent's direction (0..3) in the state channel
    assert torch.equal(enc(x.float()), enc(x))


@pytest.mark.parametrize(
    ("channel", "value", "message"),
    [(0, 11, "0..10"), (1, 6, "0..5"), (2, 4, "0..3"), (0, -1, "0..10"), (1, 1.5, "not an integer")],
)
def test_grid_rejects_bad_indices(channel, value, message):
    enc = GridEncoder(GRID, net_cfg(), 1)
    x = grid(2).float()
    x[1, channel, 2, 5] = value
    with pytest.raises(ValueError, match=message) as info:
        enc(x)
    assert f"[1, {channel}, 2, 5]" in str(info.value)


def test_wrong_observation_layout_is_rejected():
    with pytest.raises(ValueError, match=r"expected observations \[N, 4, 84, 84\]"):
        NatureCNN(ATARI, net_cfg(), 1)(pixels(2, (84, 84, 4)))
    with pytest.raises(ValueError, match=r"\[3, H, W\]"):
        GridEncoder((7, 7, 3), net_cfg(), 1)


def test_impala_keeps_pytorch_default_init():
    # Orthogonal gain √2 through six residual blocks would blow the features up (see ImpalaCNN).
    for layer in weighted_layers(ImpalaCNN(ATARI, net_cfg(ortho_init=True), 1)):
        assert layer.bias.abs().sum() > 0
