"""λ-returns and the percentile return scale (`world_models/imagination.py`) against reference computations."""

import numpy as np
import pytest
import torch

from rlfoundry.world_models.imagination import PercentileScale, lambda_returns


def n_step_mixture(rewards, live, boot, lam):
    """The λ-return as its definition: (1-λ)·Σ λ^(n-1)·G^n over the n-step returns that fit, the rest of the weight
    on the longest one. [T+1] arrays for one trajectory -> [T]."""
    T = len(boot) - 1
    out = []
    for t in range(T):
        def g(n, t=t):
            total, discount = 0.0, 1.0
            for k in range(1, n + 1):
                total += discount * rewards[t + k]
                discount *= live[t + k]
            return total + discount * boot[t + n]
        longest = T - t
        value = sum((1 - lam) * lam ** (n - 1) * g(n) for n in range(1, longest)) + lam ** (longest - 1) * g(longest)
        out.append(value)
    return np.array(out)


def test_lambda_returns_equal_the_mixture_of_n_step_returns():
    rng = np.random.default_rng(0)
    T, N = 15, 6
    rewards, boot = rng.normal(size=(T + 1, N)), rng.normal(size=(T + 1, N))
    live = rng.uniform(0.5, 1.0, size=(T + 1, N))
    got = lambda_returns(*(torch.tensor(x) for x in (rewards, live, boot)), 0.95).numpy()
    assert got.shape == (T, N)
    for n in range(N):
        assert np.allclose(got[:, n], n_step_mixture(rewards[:, n], live[:, n], boot[:, n], 0.95))


def test_lambda_zero_and_one_are_td_and_monte_carlo():
    rewards = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    live = torch.tensor([[1.0], [0.5], [0.5], [0.5]])
    boot = torch.tensor([[9.0], [10.0], [20.0], [30.0]])
    assert lambda_returns(rewards, live, boot, 0.0)[:, 0].tolist() == [1 + 5, 2 + 10, 3 + 15]
    mc = lambda_returns(rewards, live, boot, 1.0)[:, 0].tolist()
    assert mc == pytest.approx([1 + 0.5 * (2 + 0.5 * (3 + 0.5 * 30)), 2 + 0.5 * (3 + 15), 3 + 15])


def test_replay_returns_stop_at_episode_ends():
    # DreamerV3's replay value target: λ cut at each episode's last step, γ·(1 - terminal) as the discount
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([0.0, 1.0, 2.0, 0.0, 4.0])[:, None]  # state 3 begins a new episode (reward 0)
    last = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])[:, None]
    terminal = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])[:, None]
    boot = torch.tensor([5.0, 6.0, 7.0, 8.0, 9.0])[:, None]
    got = lambda_returns(rewards, gamma * (1 - terminal), boot, lam * (1 - last))[:, 0]
    r3 = 4 + gamma * 9
    r2 = 0 + gamma * (0.5 * 8 + 0.5 * r3)
    r1 = 2.0  # the episode terminates at state 2: nothing after it counts
    r0 = 1 + gamma * (0.5 * 6 + 0.5 * r1)
    assert got.tolist() == pytest.approx([r0, r1, r2, r3])


def test_percentile_scale_is_updated_before_it_is_read_and_floored_at_one():
    scale = PercentileScale(rate=0.5)
    returns = torch.arange(101, dtype=torch.float32)  # P5 = 5, P95 = 95
    assert scale(returns).item() == pytest.approx(0.5 * 90)  # averages start at 0, no bias correction
    assert scale(returns).item() == pytest.approx(0.75 * 90)
    assert scale(returns, update=False).item() == pytest.approx(0.75 * 90)
    small = PercentileScale()
    assert small(torch.tensor([0.1, 0.2, 0.3])).item() == 1.0  # never divides returns up
    restored = PercentileScale(rate=0.5)
    restored.load_state_dict(scale.state_dict())
    assert restored(returns).item() == pytest.approx(scale(returns).item())
