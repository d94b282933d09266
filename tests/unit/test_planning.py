"""PlaNet's cross-entropy method (`world_models/planning.py`) on scores whose optimum is known."""

import pytest
import torch

from rlfoundry.world_models.planning import cross_entropy_method


def test_cem_finds_the_optimum_of_a_quadratic_for_every_env():
    torch.manual_seed(0)
    targets = torch.tensor([[[0.3, -0.6], [0.1, 0.9], [-0.2, 0.0]],
                            [[-0.8, 0.5], [0.0, 0.0], [0.7, -0.4]]])  # [envs, horizon, A]
    calls = []

    def score(actions):  # [envs, J, H, A]
        calls.append(actions.shape)
        return -(actions - targets[:, None]).square().sum((-2, -1))

    first = cross_entropy_method(score, batch=2, horizon=3, action_dim=2, candidates=1000, top_k=100, iterations=10,
                                 generator=torch.Generator().manual_seed(1))
    assert first.shape == (2, 2)
    assert torch.allclose(first, targets[:, 0], atol=0.03)
    assert calls == [(2, 1000, 3, 2)] * 10  # one batched score per iteration


def test_cem_respects_the_action_bounds():
    def score(actions):  # the optimum lies outside [-1, 1] in dim 0 and outside [low, high] in dim 1
        return -(actions - torch.tensor([3.0, -0.9])).square().sum((-2, -1))

    first = cross_entropy_method(score, 1, 2, 2, candidates=500, top_k=50, iterations=8,
                                 low=torch.tensor([-1.0, -0.5]), high=torch.tensor([1.0, 0.5]),
                                 generator=torch.Generator().manual_seed(2))
    assert first[0].tolist() == pytest.approx([1.0, -0.5], abs=1e-3)


def test_cem_refuses_more_elites_than_candidates():
    with pytest.raises(ValueError, match="top_k"):
        cross_entropy_method(lambda a: a.sum((-2, -1)), 1, 2, 1, candidates=10, top_k=20, iterations=1)
