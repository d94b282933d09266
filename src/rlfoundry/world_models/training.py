"""Training SimPLe's world model and its reward head on real transitions (docs/world-models/simple-mbarc.md §2.3, §4.1; MB
`Trainer.train_world_model`, `Trainer.train_reward_model`).

World model, one optimizer step per predicted frame, no gradient through time:

    for each window of `length` consecutive real steps (batch of `batch` windows, within one finished episode):
        x = the window's first frame stack
        for t in 0 .. length-1:
            loss = frame_loss(model(noise(x), a_t, target = frame_{t+1})) + MSE(value, v_t) + bit_loss / length
                   (+ the reward head's cross-entropy, or MBARC's class-balanced focal loss, for strategy `online`)
            one Adafactor step, gradient norm clipped to 1
            x = x without its oldest frame + (frame_{t+1} with P(feed truth), else the model's argmax frame)

P(feed truth) follows MB's scheduled sampling in epoch 0 and is 0 afterwards; noise(x) replaces each input pixel by
the batch median with probability 0.05, fed-back frames included (MB `preprocess_state`). The reward head (every
strategy but `online`) then trains alone, on the strategy's draws (`reward_strategies`), the body frozen and without
gradients. What this decides where MB is silent or wasteful: §2.6 of that page.

`Adafactor` is torch.optim.Adafactor's update (whose defaults are MB's relative-step Adafactor) written in vectorised
operations: the same state and, to float rounding, the same update, with no host reads on CUDA. Why torch's own step
is slow on the CPU and what this saves: docs/guide/model-based.md, "The next-frame predictor: cost and size".
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

from rlfoundry.buffers.frames import FrameReplay, FrameSequences
from rlfoundry.world_models.next_frame import (
    LatentMixing,
    NextFramePredictor,
    colour_argmax,
    frame_loss,
    latent_mixing,
)
from rlfoundry.world_models.reward_strategies import class_balanced_focal_loss


class Adafactor(torch.optim.Adafactor):
    """torch.optim.Adafactor's update in vectorised operations (module docstring); every argument is torch's."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, row_vars, col_vars, variances, steps = [], [], [], [], [], []
            if self._init_group(group, params, grads, row_vars, col_vars, variances, steps):
                raise RuntimeError("Adafactor does not support complex parameters")
            eps1, eps2 = group["eps"]
            for param, grad, row_var, col_var, variance, step_t in zip(params, grads, row_vars, col_vars, variances,
                                                                       steps):
                grad = -grad if group["maximize"] else grad
                step_t += 1
                step = float(step_t)  # torch keeps `step` on the host: no device read
                decay = step ** group["beta2_decay"]
                rho = min(float(group["lr"]), step ** -0.5)
                tiny = torch.finfo(param.dtype).eps if eps1 is None else eps1
                scale = torch.linalg.vector_norm(param) / param.numel() ** 0.5  # RMS(param) before the decay
                if group["weight_decay"] != 0:
                    param.mul_(1 - float(group["lr"]) * group["weight_decay"])
                squared = grad.square()
                if grad.dim() > 1:
                    row_var.lerp_(squared.mean(-1, keepdim=True), decay)
                    col_var.lerp_(squared.mean(-2, keepdim=True), decay)
                    estimate = (row_var * col_var).div_(row_var.mean(-2, keepdim=True).clamp(min=tiny))
                else:
                    variance.lerp_(squared, decay)
                    estimate = variance.clone()
                update = estimate.clamp_(min=tiny * tiny).rsqrt_().mul_(grad)
                denom = (torch.linalg.vector_norm(update) / (update.numel() ** 0.5 * group["d"])).clamp_(min=1.0)
                param.sub_(update.mul_(scale.clamp_(min=eps2).mul_(rho).div_(denom)))
        return loss


MAX_GRAD_NORM = 1.0  # MB: grad-norm clip 1.0 on the world model and on the reward head (§2.3, §4.1)


def scheduled_sampling_probability(step: int, decay_steps: int) -> float:
    """P(the next input frame is the true frame rather than the model's own) at world-model step `step` of epoch 0:
    1 - e·l, e = 0.01^(max(0, D/4 - step) / (D/4)), l = 0.01 + 0.99·min(step / D, 1), D = `decay_steps` (MB
    22,250; §2.3). Starts at 0.9999, reaches 0 at step D."""
    quarter = decay_steps / 4
    exponential = 0.01 ** (max(0.0, quarter - step) / quarter)
    linear = 0.01 + 0.99 * min(step / decay_steps, 1.0)
    return 1.0 - exponential * linear


def input_noise(frames: torch.Tensor, probability: float, generator: torch.Generator | None) -> torch.Tensor:
    """Each element replaced by the batch's per-element median with `probability` (MB `--input-noise` 0.05)."""
    if probability <= 0:
        return frames
    median = frames.median(dim=0, keepdim=True).values.expand_as(frames)
    mask = torch.rand(frames.shape, generator=generator, device=frames.device) < probability
    return torch.where(mask, median, frames)


def world_model_loss(out, target_frame: torch.Tensor, value_targets: torch.Tensor, reward_classes: torch.Tensor,
                     bit_weight: float, reward_loss: str | None,
                     class_counts: np.ndarray | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of one predicted frame (module docstring) and its detached parts. `reward_loss`: None (the head
    trains apart), "ce" or "cbf" (strategy `online`: cross-entropy, or the class-balanced focal loss with the
    replay's `class_counts`)."""
    frame = frame_loss(out.frame_logits, target_frame)
    value = F.mse_loss(out.values.float(), value_targets)
    loss = frame + value + bit_weight * out.bit_loss
    stats = {"loss/frame": frame.detach(), "loss/value": value.detach(), "loss/bits": out.bit_loss.detach()}
    if reward_loss is not None:
        logits = out.reward_logits.float()
        reward = (F.cross_entropy(logits, reward_classes) if reward_loss == "ce"
                  else class_balanced_focal_loss(logits, reward_classes, class_counts))
        loss = loss + reward
        stats["loss/reward"] = reward.detach()
    return loss, stats


def _device_sequences(seq: FrameSequences, device: torch.device) -> dict[str, torch.Tensor]:
    return {"obs": torch.from_numpy(seq.obs).to(device), "actions": torch.from_numpy(seq.actions).to(device),
            "next_frames": torch.from_numpy(seq.next_frames).to(device),
            "rewards": torch.from_numpy(seq.rewards.astype(np.int64)).to(device),
            "values": torch.from_numpy(seq.values).to(device)}


def train_world_model(model: NextFramePredictor, optimizer: torch.optim.Optimizer, replay: FrameReplay,
                      rng: np.random.Generator, *, steps: int, batch: int, length: int, first_step: int,
                      scheduled_sampling_steps: int | None, noise: float, warmup_steps: int,
                      reward_loss: str | None, autocast) -> dict[str, float]:
    """`steps` optimizer steps (whole windows: at least one) from world-model step `first_step` (which drives the
    latent warm-up and, with `scheduled_sampling_steps` = D, the scheduled sampling; None: always the model's own
    frames). Returns the mean loss parts, the next-frame pixel accuracy and the reward accuracy."""
    model.train()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    device, channels = next(model.parameters()).device, model.frame_shape[0]
    generator = torch.Generator(device).manual_seed(int(rng.integers(2**63)))
    counts = np.bincount(replay.rewards[:replay.num_steps], minlength=3) if reward_loss == "cbf" else None
    totals: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), device=device))
    step = first_step
    windows = max(1, steps // length)
    for _ in range(windows):
        seq = _device_sequences(replay.subsequences(rng, batch, length), device)
        frames = seq["obs"]
        for t in range(length):
            target = seq["next_frames"][t]
            with autocast():
                out = model(input_noise(frames, noise, generator), seq["actions"][t], target,
                            latent_mixing(step, model.cfg, warmup_steps), generator=generator)
                loss, stats = world_model_loss(out, target, seq["values"][t], seq["rewards"][t], 1.0 / length,
                                               reward_loss, counts)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
            optimizer.step()
            with torch.no_grad():
                predicted = colour_argmax(out.frame_logits)  # = argmax(1), bit for bit; ≈2× faster on the CPU
                stats["diag/pixel_accuracy"] = (predicted == target).float().mean()
                stats["diag/reward_accuracy"] = (out.reward_logits.argmax(1) == seq["rewards"][t]).float().mean()
                for key, value in stats.items():
                    totals[key] += value
                feed = predicted
                if scheduled_sampling_steps is not None:
                    truth = scheduled_sampling_probability(step, scheduled_sampling_steps)
                    use = torch.rand(batch, generator=generator, device=device) < truth
                    feed = torch.where(use[:, None, None, None], target, predicted)
                frames = torch.cat([frames[:, channels:], feed], dim=1)
            step += 1
    return {key: float(value) / (windows * length) for key, value in totals.items()}


def train_reward_head(model: NextFramePredictor, optimizer: torch.optim.Optimizer, replay: FrameReplay,
                      indices: np.ndarray, batch: int, autocast) -> dict[str, float]:
    """One reward-training phase on transitions `indices` (in order, `batch` at a time): the head alone learns."""
    model.eval()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    device = next(model.parameters()).device
    totals = torch.zeros(2, device=device)
    chunks = np.array_split(indices, max(1, len(indices) // batch))
    for chunk in chunks:
        seq = _device_sequences(replay.gather(chunk, 1), device)
        classes = seq["rewards"][0]
        with autocast():
            with torch.no_grad():
                out = model(seq["obs"], seq["actions"][0], seq["next_frames"][0], LatentMixing.hard_posterior(),
                            frame_logits=False)  # the head reads (mid, fin): the frame logits would go unused
            logits = model.reward_head(*out.reward_inputs, train=True).float()
            loss = F.cross_entropy(logits, classes)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        totals += torch.stack([loss.detach(), (logits.argmax(1) == classes).float().mean()])
    loss, accuracy = (totals / len(chunks)).tolist()
    return {"loss/reward_head": loss, "diag/reward_head_accuracy": accuracy}
