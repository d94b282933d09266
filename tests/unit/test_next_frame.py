"""SimPLe's next-frame predictor (world_models/next_frame.py): shapes, the discrete latent and its warm-up, dropout
off in the simulator, the simulator's block-wise colour choice equal to the full logits' argmax, the clipped frame
loss, and that the tiny model learns a small synthetic world."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import rlfoundry.world_models.next_frame as next_frame
from rlfoundry.run.hardware import detect
from rlfoundry.world_models.next_frame import (
    BITS_PER_CHUNK,
    NUM_COLOURS,
    BitsPrior,
    LatentMixing,
    NextFrameConfig,
    NextFramePredictor,
    bits_to_chunks,
    chunks_to_bits,
    colour_argmax,
    frame_loss,
    latent_mixing,
    standardise,
)

NUM_ACTIONS = 5  # noop, up, down, left, right in the synthetic world
FRAME, STACKING = (3, 20, 16), 4  # a small RGB frame, stacked as MB stacks them
HARD = LatentMixing.hard_posterior()


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: these ops are small and memory-bound, and on a shared 2-core machine a second thread
    that waits on a busy core made the learning test 15× slower (58 s against 3.6 s for 50 steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(seed: int = 0, **changes) -> NextFramePredictor:
    torch.manual_seed(seed)
    return NextFramePredictor(NextFrameConfig.tiny(**changes), NUM_ACTIONS, FRAME, STACKING)


def _batch(batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    c, h, w = FRAME
    frames = torch.randint(0, 256, (batch, STACKING * c, h, w), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, NUM_ACTIONS, (batch,), generator=g)
    target = torch.randint(0, 256, (batch, c, h, w), dtype=torch.uint8, generator=g)
    return frames, actions, target


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_shapes_and_dtypes():
    model = _model().train()
    cfg = model.cfg
    frames, actions, target = _batch(3)
    out = model(frames, actions, target, HARD, generator=_gen())
    assert out.frame_logits.shape == (3, NUM_COLOURS, *FRAME) and out.frame_logits.dtype == torch.float32
    assert out.reward_logits.shape == (3, 3) and out.values.shape == (3,)
    assert out.bit_loss.shape == () and out.bit_loss.item() > 0
    assert out.bits.shape == (3, cfg.bottleneck_bits)
    assert torch.equal(out.bits.abs(), torch.ones_like(out.bits))  # hard bits, flips included
    assert out.reward_inputs[0].shape == (3, model.level_channels[-1], *model.level_sizes[-1])
    assert out.reward_inputs[1].shape == (3, cfg.hidden_size, *FRAME[1:])

    step = model.simulate(frames, actions, generator=_gen())
    assert step.next_frame.shape == (3, *FRAME) and step.next_frame.dtype == torch.uint8
    assert step.reward_class.shape == (3,) and step.reward_class.dtype == torch.long
    assert step.values.shape == (3,) and step.values.dtype == torch.float32
    assert torch.equal(step.bits.abs(), torch.ones_like(step.bits))
    assert model.training  # simulate leaves the module's mode alone

    with pytest.raises(ValueError, match="mixing"):
        model(frames, actions, target)
    with pytest.raises(ValueError, match="uint8"):
        model.simulate(frames.float(), actions)


def test_straight_through_gradients_reach_posterior():
    model = _model().train()
    frames, actions, target = _batch(2)
    out = model(frames, actions, target, HARD, generator=_gen())
    (frame_loss(out.frame_logits, target) + out.bit_loss).backward()
    assert model.posterior.logits.weight.grad.abs().sum() > 0  # through sign(tanh(·)) straight through
    assert model.posterior.embed.weight.grad.abs().sum() > 0
    assert model.prior.cell.weight_ih.grad.abs().sum() > 0  # the teacher-forced bit loss trains the prior


def test_prior_emits_bits_in_chunks_of_eight():
    cfg = NextFrameConfig()  # MB: 128 bits as 16 chunks of 8, LSTM state 128
    prior = BitsPrior(cfg, bottleneck_size=24)
    assert prior.num_chunks == 16 and prior.embed.num_embeddings == 256 and prior.cell.hidden_size == 128
    calls = []
    prior.cell.register_forward_hook(lambda *args: calls.append(1))
    bits = prior.sample(torch.randn(5, 24), 1.0, _gen())
    assert len(calls) == 16 and bits.shape == (5, 128) and set(bits.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(chunks_to_bits(bits_to_chunks(bits), bits.dtype), bits)
    chunks = torch.tensor([[0, 1, 128, 255]])
    assert chunks_to_bits(chunks, torch.float32)[0, BITS_PER_CHUNK: 2 * BITS_PER_CHUNK].tolist() == [1] + [-1] * 7
    assert torch.equal(bits_to_chunks(chunks_to_bits(chunks, torch.float32)), chunks)
    assert torch.equal(prior.sample(torch.ones(2, 24), 1.0, _gen(3)), prior.sample(torch.ones(2, 24), 1.0, _gen(3)))


def test_full_model_size_and_one_step():
    torch.manual_seed(0)
    model = NextFramePredictor(NextFrameConfig(), num_actions=18)
    total = sum(p.numel() for p in model.parameters())
    posterior = sum(p.numel() for p in model.posterior.parameters())
    # docs/world-models/simple-mbarc.md §2.1 "Size": ≈63–64 M on the inference path, ≈5 M more in the posterior net
    assert (total, posterior) == (69_522_796, 5_398_856)
    assert model.level_channels == (96, 192, 384, 768, 768, 768)
    assert model.level_sizes == ((105, 80), (52, 40), (26, 20), (13, 10), (6, 5), (3, 2))
    frames = torch.randint(0, 256, (1, 12, 105, 80), dtype=torch.uint8)
    step = model.simulate(frames, torch.tensor([3]), generator=_gen())
    assert step.next_frame.shape == (1, 3, 105, 80) and step.bits.shape == (1, 128)


def test_simulate_is_deterministic_and_never_drops_out():
    model = _model().train()  # training mode: dropout 0.15 / 0.5 would be active in forward
    assert model.cfg.dropout > 0 and model.cfg.residual_dropout > 0
    frames, actions, _ = _batch(4)
    # forward in training mode with the same bits does differ between calls: dropout is really there
    torch.manual_seed(1)
    a = model(frames, actions, generator=_gen()).frame_logits
    b = model(frames, actions, generator=_gen()).frame_logits
    assert not torch.equal(a, b)

    first = model.simulate(frames, actions, generator=_gen(7))
    second = model.simulate(frames, actions, generator=_gen(7))  # global RNG has moved on: dropout would differ
    for x, y in zip(first, second):
        assert torch.equal(x, y)
    bits = first.bits.flip(0)
    assert torch.equal(model.simulate(frames, actions, bits=bits).next_frame,
                       model.simulate(frames, actions, bits=bits).next_frame)
    # and it is what the eval-mode network gives with the same prior samples
    model.eval()
    logits = model(frames, actions, generator=_gen(7)).frame_logits
    assert torch.equal(logits.argmax(1).to(torch.uint8), first.next_frame)
    assert not torch.equal(model.simulate(frames, actions, generator=_gen(8)).bits, first.bits)


BF16 = pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    not detect().cpu_bf16, reason="bf16 autocast is only chosen where the CPU has native bf16"))


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("frame, compress_steps, block", [
    (FRAME, 2, None),  # one block per sample
    (FRAME, 2, NUM_COLOURS * 3 * 48),  # 320 pixels in 7 blocks of 45-46
    ((1, 52, 40), 3, None),  # the simple-tiny preset's grey frames: 2,080 pixels in 3 blocks of 693-694
    ((3, 105, 80), 3, None),  # MB's frames: 8,400 pixels in 25 blocks of 336
])
def test_simulate_picks_the_full_logits_argmax(frame, compress_steps, block, dtype, monkeypatch):
    """The simulator's block-wise colour choice (on the CPU: the logits never materialised, `_first_max` instead of
    torch.argmax) gives exactly the argmax of the training path's full logits, ties (first index) included."""
    if block is not None:
        monkeypatch.setattr(next_frame, "CPU_ARGMAX_BLOCK", block)
    torch.manual_seed(0)
    model = NextFramePredictor(NextFrameConfig.tiny(compress_steps=compress_steps), NUM_ACTIONS, frame, STACKING)
    model.eval()
    g = torch.Generator().manual_seed(0)
    batch = 3
    frames = torch.randint(0, 256, (batch, STACKING * frame[0], *frame[1:]), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, NUM_ACTIONS, (batch,), generator=g)

    def both(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            logits = model(frames, actions, generator=_gen(seed)).frame_logits
            step = model.simulate(frames, actions, generator=_gen(seed))
        assert logits.dtype == dtype
        return logits.argmax(1).to(torch.uint8), step.next_frame

    for seed in range(2):
        full, blocks = both(seed)
        assert torch.equal(blocks, full)
        assert full.unique().numel() > 100  # a spread of colours, not one constant answer

    # Ties: the output layer's weights zeroed and its biases equal in pairs, so each odd colour's logit equals the
    # even one's before it (exactly: a matmul's rows may round differently, a bias alone does not). torch.argmax
    # takes the first.
    weight, bias = model.logits.weight, model.logits.bias.view(NUM_COLOURS, -1)
    with torch.no_grad():
        weight.zero_()
        bias[1::2] = bias[0::2].clone()
    full, blocks = both(0)
    assert torch.equal(blocks, full) and not (full % 2).any()

    # A logit that is not finite (a diverged model): torch.argmax's answer (NaN counts as the maximum).
    with torch.no_grad():
        bias[7, 0], bias[9, -1] = float("nan"), float("inf")
    full, blocks = both(0)
    assert torch.equal(blocks, full) and (full[:, 0] == 7).all()


def test_colour_argmax_is_torch_argmax():
    """`colour_argmax` (training's fed-back frame) is frame_logits.argmax(1): ties, infinities and NaN included."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 4, (2, NUM_COLOURS, 3, 9, 7), generator=g).float()  # ties everywhere
    logits[1, 200, 0, 0, 0], logits[1, 3, 2, 8, 6], logits[1, 9, 2, 8, 6] = float("-inf"), float("inf"), float("inf")
    logits[0, :, 0, 0, 0] = float("-inf")  # a column of -inf alone: torch.argmax gives 0
    with_nan = logits.clone()
    with_nan[0, 5, 1, 2, 3] = float("nan")  # torch.argmax's NaN is the maximum: the fall-back to it answers
    bf16 = torch.randn(2, NUM_COLOURS, 1, 5, 5, generator=g).bfloat16()
    for x in (logits, logits[:, :, :, :, :4], with_nan, bf16):
        result = colour_argmax(x)
        assert result.dtype == torch.uint8 and torch.equal(result, x.argmax(1).to(torch.uint8))
    assert colour_argmax(logits)[1, 2, 8, 6] == 3 and colour_argmax(with_nan)[0, 1, 2, 3] == 5


def test_latent_warmup_ramps_up_from_zero():
    cfg = NextFrameConfig()
    assert latent_mixing(0, cfg) == (0.0, 0.0, 0.0)
    assert latent_mixing(20_000, cfg) == pytest.approx((0.5, 0.25, 0.8))
    assert latent_mixing(40_000, cfg) == pytest.approx((1.0, 0.5, 0.8))
    assert latent_mixing(10**9, cfg) == pytest.approx((1.0, 0.5, 0.8))
    ramps = [latent_mixing(step, cfg) for step in range(0, 50_000, 1000)]
    assert all(b >= a for before, after in zip(ramps, ramps[1:]) for a, b in zip(before, after))


def test_latent_mixing_probabilities_mean_what_they_say():
    model = _model().eval()  # no dropout, no posterior noise: the mixing alone decides
    frames, actions, target = _batch(4)
    other_target = target.flip(0)

    def run(mixing, tgt, seed=0):
        return model(frames, actions, tgt, LatentMixing(*mixing), generator=_gen(seed))

    # posterior bits, always applied: the bits are the posterior's signs and the target matters
    used = run((1.0, 0.0, 1.0), target)
    logits = model.posterior(standardise(frames, torch.float32), standardise(target, torch.float32),
                             F.one_hot(actions, NUM_ACTIONS).float(), model.get_buffer("timing0"))
    assert torch.equal(used.bits, torch.where(logits > 0, 1.0, -1.0))
    assert not torch.equal(used.frame_logits, run((1.0, 0.0, 1.0), other_target).frame_logits)

    # latent-use probability 0 (the start of the ramp): the latent is skipped, the target cannot matter,
    # and no gradient reaches the posterior. The port's inverted ramp would apply it here.
    skipped = run((1.0, 0.0, 0.0), target)
    assert torch.equal(skipped.frame_logits, run((1.0, 0.0, 0.0), other_target).frame_logits)
    assert not torch.equal(skipped.frame_logits, used.frame_logits)
    model.zero_grad()
    frame_loss(run((1.0, 0.0, 0.0), target).frame_logits, target).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.posterior.parameters())

    # hard-bit probability 0 (start of the ramp): continuous tanh codes, not ±1 (the port ends its warm-up here)
    soft = run((0.0, 0.0, 1.0), target)
    assert soft.bits.abs().max() < 1 and torch.allclose(soft.bits, torch.tanh(logits))

    # LSTM-bit probability 1: every bit comes from the prior, so the target no longer matters; at 0 none do
    prior = run((1.0, 1.0, 1.0), target, seed=5)
    assert torch.equal(prior.frame_logits, run((1.0, 1.0, 1.0), other_target, seed=5).frame_logits)
    assert torch.equal(prior.bits, model.simulate(frames, actions, generator=_gen(5)).bits)


def test_frame_loss_by_hand():
    logits = torch.zeros(1, NUM_COLOURS, 1, 1, 3)
    target = torch.tensor([[[[7, 9, 200]]]], dtype=torch.uint8)
    logits[0, 9, 0, 0, 1] = 30.0  # CE ≈ 255·e^-30: clipped up to 0.03
    logits[0, 200, 0, 0, 2] = 5.0  # CE = log(255 + e^5) - 5
    ces = [math.log(256), 0.03, math.log(255 + math.exp(5)) - 5]
    expected = sum(ces) / 3 - 0.03
    assert frame_loss(logits, target).item() == pytest.approx(expected, rel=1e-6)
    assert frame_loss(logits, target, clip=0.0).item() == pytest.approx((ces[0] + ces[2]) / 3, rel=1e-5)


def test_standardise_per_frame_channel():
    frames = torch.zeros(1, 2, 4, 5, dtype=torch.uint8)
    frames[0, 1, :2] = 255
    x = standardise(frames, torch.float32)
    assert torch.equal(x[0, 0], torch.zeros(4, 5))  # constant channel: the 1/√N floor avoids 0/0
    assert x[0, 1].mean().abs() < 1e-6 and x[0, 1].std(correction=0).item() == pytest.approx(1.0, rel=1e-5)


def _moving_blocks(n: int, seed: int = 0):
    """n transitions of a world with one 4×4 block of a random colour on a dark background: an action moves it
    3 pixels (noop, up, down, left, right), clamped at the border; reward class 2 (+1) when the block ends on an
    edge, else 1. A third of the positions lie near each edge of each axis. The 4 input frames show the block's
    last positions."""
    g = torch.Generator().manual_seed(seed)
    c, h, w = FRAME
    size, speed = 4, 3
    moves = torch.tensor([[0, 0], [-speed, 0], [speed, 0], [0, -speed], [0, speed]])
    low, limit = torch.zeros(2, dtype=torch.long), torch.tensor([h - size, w - size])

    def draw(pos, colour):
        frame = torch.empty(c, h, w, dtype=torch.uint8)
        frame[:] = torch.tensor([10, 20, 30], dtype=torch.uint8)[:, None, None]
        frame[:, pos[0]: pos[0] + size, pos[1]: pos[1] + size] = colour[:, None, None]
        return frame

    frames, actions, targets, rewards = [], [], [], []
    for _ in range(n):
        colour = torch.randint(80, 256, (c,), generator=g).to(torch.uint8)
        pos = (torch.rand(2, generator=g) * (limit + 1)).long()
        near = torch.randint(0, speed + 1, (2,), generator=g)  # a third near each end: rewards are not rare
        side = torch.randint(0, 3, (2,), generator=g)
        pos = torch.where(side == 0, near, torch.where(side == 1, limit - near, pos))
        history = [pos]
        for _ in range(STACKING - 1):
            history.append((history[-1] - moves[torch.randint(0, NUM_ACTIONS, (), generator=g)]).clamp(low, limit))
        action = torch.randint(0, NUM_ACTIONS, (), generator=g)
        new = (pos + moves[action]).clamp(low, limit)
        frames.append(torch.cat([draw(p, colour) for p in reversed(history)]))
        actions.append(action)
        targets.append(draw(new, colour))
        rewards.append(2 if bool(((new == 0) | (new == limit)).any()) else 1)
    return torch.stack(frames), torch.stack(actions), torch.stack(targets), torch.tensor(rewards)


def test_tiny_model_learns_moving_blocks():
    torch.manual_seed(0)
    cfg = NextFrameConfig.tiny()
    frames, actions, targets, rewards = _moving_blocks(16)
    assert 0.2 < (rewards == 2).float().mean() < 0.8
    values = (rewards - 1).float()
    model = NextFramePredictor(cfg, NUM_ACTIONS, FRAME, STACKING).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    steps, g = 250, _gen(0)  # ≈16 s on one thread of a shared AMD EPYC core
    for step in range(steps):
        out = model(frames, actions, targets, latent_mixing(step, cfg, warmup_steps=steps // 2), generator=g)
        loss = (frame_loss(out.frame_logits, targets) + F.cross_entropy(out.reward_logits, rewards)
                + F.mse_loss(out.values, values) + out.bit_loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step = model.simulate(frames, actions, generator=_gen(1))
    correct = step.next_frame == targets
    changed = targets != frames[:, -3:]  # pixels the block left or entered
    assert correct.float().mean() >= 0.95
    assert correct[changed].float().mean() >= 0.75  # the block moved, not just the background (0.91 measured)
    # 16 of 16 on an AMD EPYC and with 2 threads on an AMX Xeon; 15 of 16 with one thread there (seeds 1-3: 16)
    assert (step.reward_class == rewards).float().mean() >= 0.9
