"""GAE and the discounted scan against plain reference loops, truncation and NEXT_STEP reset rows included."""

import numpy as np
import pytest
import torch

from rlfoundry.buffers.rollout import discounted_scan, gae


def scan_loop(x, coef):
    out = torch.zeros_like(x)
    running = torch.zeros_like(x[0])
    for t in reversed(range(x.shape[0])):
        running = x[t] + coef[t] * running
        out[t] = running
    return out


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 64, 129])
def test_discounted_scan_matches_loop(steps):
    gen = torch.Generator().manual_seed(steps)
    x = torch.randn(steps, 5, generator=gen, dtype=torch.float64)
    coef = torch.rand(steps, 5, generator=gen, dtype=torch.float64) * (torch.rand(steps, 5, generator=gen) > 0.2)
    torch.testing.assert_close(discounted_scan(x, coef), scan_loop(x, coef))


def reference_gae(rewards, values, last_value, terminated, truncated, valid, gamma, lam):
    """One env at a time, one step at a time, with the semantics spelled out."""
    steps, envs = rewards.shape
    adv = np.full((steps, envs), np.nan)
    for b in range(envs):
        following = 0.0  # advantage of the next valid row of the same episode
        for t in reversed(range(steps)):
            if not valid[t, b]:
                following = 0.0
                continue
            # the value of what came next: the next row's observation (the true final one after a done)
            next_value = values[t + 1, b] if t + 1 < steps else last_value[b]
            target = rewards[t, b] if terminated[t, b] else rewards[t, b] + gamma * next_value
            delta = target - values[t, b]
            episode_goes_on = not (terminated[t, b] or truncated[t, b])
            adv[t, b] = delta + (gamma * lam * following if episode_goes_on else 0.0)
            following = adv[t, b]
    return adv


def next_step_rollout(steps, envs, seed):
    """Random rollout in NEXT_STEP layout: the row after an episode end is an invalid reset row."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs))
    values = rng.normal(size=(steps, envs))
    terminated = np.zeros((steps, envs), bool)
    truncated = np.zeros((steps, envs), bool)
    valid = np.ones((steps, envs), bool)
    for b in range(envs):
        for t in range(steps):
            if t > 0 and (terminated[t - 1, b] or truncated[t - 1, b]):
                valid[t, b] = False
                rewards[t, b] = 0.0
                continue
            end = rng.random()
            terminated[t, b] = end < 0.08
            truncated[t, b] = 0.08 <= end < 0.14
    return rewards, values, rng.normal(size=envs), terminated, truncated, valid


@pytest.mark.parametrize("seed", range(4))
def test_gae_matches_reference_with_truncation(seed):
    gamma, lam = 0.97, 0.9
    rewards, values, last_value, terminated, truncated, valid = next_step_rollout(60, 4, seed)
    assert truncated.any() and terminated.any()
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)
    next_values = torch.cat([t(values)[1:], t(last_value)[None]])
    dones = t(terminated | truncated)
    got = gae(t(rewards), t(values), next_values, t(terminated), dones, gamma, lam).numpy()
    want = reference_gae(rewards, values, last_value, terminated, truncated, valid, gamma, lam)
    np.testing.assert_allclose(got[valid], want[valid], rtol=1e-10, atol=1e-10)


def test_truncation_bootstraps_and_termination_does_not():
    # one env: step 0 truncated (next row holds the final observation, value 10), row 1 is a reset row,
    # step 2 terminates.
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [10.0], [0.25]])
    terminated = torch.tensor([[0.0], [0.0], [1.0]])
    truncated = torch.tensor([[1.0], [0.0], [0.0]])
    next_values = torch.tensor([[10.0], [0.25], [99.0]])
    adv = gae(rewards, values, next_values, terminated, terminated + truncated, gamma=0.9, gae_lambda=0.8)
    assert adv[0, 0].item() == pytest.approx(1.0 + 0.9 * 10.0 - 0.5)
    assert adv[2, 0].item() == pytest.approx(2.0 - 0.25)
