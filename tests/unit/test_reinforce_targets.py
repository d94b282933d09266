"""REINFORCE's Monte-Carlo targets against a plain loop over episodes, reset rows and cut episodes included."""

import numpy as np
import pytest
import torch

from rlfoundry.algos.reinforce import monte_carlo_targets, reinforce_loss


def reference(rewards, dones, valid, first_row_starts, gamma, whole_episode):
    """Walk each env's rows, split them into episodes, and give each step its return if the episode is complete."""
    steps, envs = rewards.shape
    returns, mask = np.zeros((steps, envs)), np.zeros((steps, envs), dtype=bool)
    for b in range(envs):
        episode, started = [], bool(first_row_starts[b])
        for t in range(steps):
            if not valid[t, b]:  # a reset row: the next row starts a new episode
                episode, started = [], True
                continue
            episode.append(t)
            if dones[t, b]:
                g, rtg = 0.0, {}
                for u in reversed(episode):
                    g = rewards[u, b] + gamma * g
                    rtg[u] = g
                for u in episode:
                    if whole_episode and not started:
                        continue
                    returns[u, b] = rtg[episode[0]] if whole_episode else rtg[u]
                    mask[u, b] = True
                episode, started = [], False  # the row after a done is a reset row
    return returns, mask


@pytest.mark.parametrize("whole_episode", [False, True])
def test_targets_match_the_reference_loop(whole_episode):
    rng = np.random.default_rng(0)
    steps, envs = 40, 5
    dones = rng.random((steps, envs)) < 0.15
    valid = np.ones((steps, envs), dtype=bool)
    valid[1:] = ~dones[:-1]  # NEXT_STEP: the row after an episode end is a reset row
    first_valid = rng.random(envs) < 0.5  # some envs begin the rollout with a reset row
    valid[0] = first_valid
    dones &= valid  # a reset row never ends an episode
    rewards = rng.normal(size=(steps, envs)) * valid
    first_row_starts = rng.random(envs) < 0.5  # did row 0 begin an episode?
    expected_returns, expected_mask = reference(rewards, dones, valid, first_row_starts, 0.9, whole_episode)

    tensor = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    returns, mask = monte_carlo_targets(tensor(rewards), tensor(dones), torch.as_tensor(valid),
                                        torch.as_tensor(first_row_starts), 0.9, whole_episode)
    np.testing.assert_array_equal(mask.numpy(), expected_mask)
    np.testing.assert_allclose(returns.numpy()[expected_mask], expected_returns[expected_mask], rtol=1e-5, atol=1e-5)
    assert expected_mask.any() and not expected_mask.all()  # the case has both kept and dropped steps


def test_loss_by_hand():
    logprobs, targets = torch.tensor([-1.0, -0.5]), torch.tensor([2.0, -1.0])
    values, returns, entropy = torch.tensor([1.0, 0.0]), torch.tensor([3.0, 1.0]), torch.tensor([0.5, 0.7])
    loss, stats = reinforce_loss(logprobs, targets, values, returns, entropy, vf_coef=0.5, ent_coef=0.1)
    assert stats["loss/policy"].item() == pytest.approx(-(2.0 * -1.0 + -1.0 * -0.5) / 2)
    assert stats["loss/value"].item() == pytest.approx((4.0 + 1.0) / 2)
    assert loss.item() == pytest.approx(0.75 + 0.5 * 2.5 - 0.1 * 0.6)
    no_baseline, stats = reinforce_loss(logprobs, targets, None, returns, entropy, vf_coef=0.5, ent_coef=0.0)
    assert "loss/value" not in stats and no_baseline.item() == pytest.approx(0.75)
