"""The simple agent (SimPLe with MBARC's reward strategies) on a small pixel game: its schedules by hand, an epoch
with every reward strategy (MB's `online` crashed, docs/world-models/simple-mbarc.md §6 item 5), the reward phase training the head
alone, and the real collection's bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlfoundry.algos import Runtime
from rlfoundry.algos.simple import Simple, SimpleConfig, ppo_multiplier
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import build
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.world_models.training import Adafactor, input_noise, scheduled_sampling_probability

TINY_WORLD_MODEL = {"hidden_size": 8, "compress_steps": 2, "filter_double_steps": 1, "bottleneck_bits": 8,
                    "latent_state_size": 16, "posterior_filters": [8, 16], "reward_head_channels": 8}


pytestmark = pytest.mark.usefixtures("one_thread")


def _config(**algo) -> ExperimentConfig:
    algo = {"name": "simple", "random_steps": 400, "real_steps_per_epoch": 100, "world_model": TINY_WORLD_MODEL,
            "world_model_steps": 20, "first_epoch_multiplier": 1, "rollout_length": 10, "scheduled_sampling_steps": 10,
            "latent_warmup_steps": 20, "reward_steps": 3, "sim_envs": 3, "ppo_updates": 2,
            "ppo": {"num_steps": 5, "minibatch_size": 5}, **algo}
    return ExperimentConfig.model_validate({
        "env": {"id": "rlfoundry/Catch-v0", "num_envs": 1}, "algo": algo,
        "network": {"encoder": "impala_cnn", "hidden_sizes": [16], "shared": True},
        "train": {"total_timesteps": 600, "precision": "fp32"},
    })


def _agent(**algo) -> tuple[Simple, object]:
    cfg = _config(**algo)
    envs, spec = build(cfg.env)
    torch.manual_seed(0)
    return Simple(cfg, spec, Runtime.of(cfg.train)), envs


def test_ppo_multiplier_is_simples_z():
    z = [ppo_multiplier(epoch, 15) for epoch in range(15)]
    assert [e for e, m in enumerate(z) if m == 2] == [7, 11] and z[14] == 3
    assert sum(z) == 19  # 19 × 800K = 15.2M simulated steps (§3 of that page)
    assert SimpleConfig().epochs(102_400) == 15


def test_scheduled_sampling_by_hand():
    assert scheduled_sampling_probability(0, 100) == pytest.approx(1 - 0.01 * 0.01)
    assert scheduled_sampling_probability(25, 100) == pytest.approx(1 - 1.0 * (0.01 + 0.99 * 0.25))
    assert scheduled_sampling_probability(100, 100) == pytest.approx(0.0)
    assert scheduled_sampling_probability(500, 100) == pytest.approx(0.0)


def test_adafactor_makes_torchs_updates_and_shares_its_state():
    """The vectorised Adafactor against torch.optim.Adafactor (the oracle) on conv (4-d), linear (2-d) and bias (1-d)
    parameters, zero-gradient rows included (the clamps), with weight decay; then each loads the other's state."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(6 * 36, 5))
    with torch.no_grad():
        net[3].weight[:, :36] = 0.0  # channel 0's features are dead after a ReLU of a zeroed conv
        net[0].weight[0], net[0].bias[0] = 0.0, -1.0
    nets = [net, __import__("copy").deepcopy(net)]
    optimizers = [torch.optim.Adafactor(nets[0].parameters(), weight_decay=0.01),
                  Adafactor(nets[1].parameters(), weight_decay=0.01)]
    x = torch.randn(8, 3, 8, 8)
    for _ in range(25):
        for model, optimizer in zip(nets, optimizers):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    for theirs, ours in zip(*(model.parameters() for model in nets)):
        assert torch.allclose(theirs, ours, rtol=1e-5, atol=1e-7)
    assert not torch.equal(nets[1][3].weight, net[3].weight.new_zeros(()).expand_as(net[3].weight))
    state = optimizers[0].state_dict()
    optimizers[1].load_state_dict(state)
    assert optimizers[1].state_dict()["state"].keys() == state["state"].keys()
    torch.optim.Adafactor(nets[0].parameters()).load_state_dict(Adafactor(nets[1].parameters()).state_dict())


def test_input_noise_replaces_with_the_batch_median():
    frames = torch.arange(4, dtype=torch.uint8).view(4, 1, 1, 1).expand(4, 3, 20, 20).contiguous()  # medians: 1
    g = torch.Generator().manual_seed(0)
    assert torch.equal(input_noise(frames, 0.0, g), frames)
    assert (input_noise(frames, 1.0, g) == 1).all()
    noisy = input_noise(frames, 0.05, g)
    changed = (noisy != frames).float().mean().item()
    assert 0.02 < changed < 0.06 and set(noisy[noisy != frames].tolist()) == {1}  # p x (3 of 4 rows differ)


@pytest.mark.parametrize("strategy, cbf", [("online", False), ("online", True), ("mbarc", False),
                                           ("class_balanced", False), ("progressively_balanced", False)])
def test_an_epoch_runs_with_every_strategy(strategy, cbf):
    agent, envs = _agent(reward_strategy=strategy, cbf_loss=cbf)
    result = agent.iterate(envs, 0.0)
    assert result.steps == 500  # 400 random + 100 with the policy; reset steps are not counted
    assert agent.replay.num_steps == 500 and agent.epoch == 1
    assert all(math.isfinite(v) for v in result.metrics.values()), result.metrics
    assert ("loss/reward" in result.metrics) == (strategy == "online")
    assert ("loss/reward_head" in result.metrics) == (strategy != "online")
    assert result.metrics["diag/sim_steps"] == 2 * 3 * 5
    assert result.episode_returns and all(-10 <= r <= 10 for r in result.episode_returns)
    envs.close()


def test_the_reward_phase_trains_the_head_alone(monkeypatch):
    import rlfoundry.algos.simple as simple_module

    agent, envs = _agent(reward_strategy="mbarc")
    head = {id(p) for p in agent.model.reward_head.parameters()}
    assert not head & {id(p) for group in agent.wm_optimizer.param_groups for p in group["params"]}
    before = {name: p.detach().clone() for name, p in agent.model.named_parameters()}
    monkeypatch.setattr(simple_module, "train_world_model", lambda *args, **kwargs: {})  # isolate the reward phase
    agent.iterate(envs, 0.0)
    changed = {name for name, p in agent.model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all(name.startswith("reward_head.") for name in changed), changed
    envs.close()


def test_online_trains_the_head_with_the_world_model():
    agent, envs = _agent(reward_strategy="online")
    assert agent.reward_optimizer is None
    in_optimizer = {id(p) for group in agent.wm_optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in agent.model.reward_head.parameters()} <= in_optimizer
    envs.close()


def test_collection_starts_from_a_reset_and_restarts_from_its_first_stack():
    agent, envs = _agent()
    agent.iterate(envs, 0.0)
    first = agent.first_stack
    assert first is not None and first.shape == (12, 20, 16)
    stacks = agent._restarts(np.random.default_rng(0), 3)
    assert np.array_equal(stacks[-1], first)  # flip_first_random (MB default; §3 of that page)
    episodes = int(agent.replay.dones[:agent.replay.num_steps].sum())
    assert episodes == 500 // 199  # Catch's episodes are 199 steps; the last one is left unfinished
    assert np.isnan(agent.replay.values[agent.replay.num_steps - 1])
    envs.close()


def test_bad_settings_are_config_errors():
    with pytest.raises(ValueError, match="num_envs = 2"):
        ExperimentConfig.model_validate({**_config().model_dump(), "env": {"id": "rlfoundry/Catch-v0", "num_envs": 2}})
    cfg = ExperimentConfig.model_validate({"env": {"id": "CartPole-v1", "num_envs": 1}, "algo": {"name": "simple"}})
    envs, spec = build(cfg.env)
    with pytest.raises(ConfigError, match="frame stacks"):
        Simple(cfg, spec, Runtime.of(cfg.train))
    envs.close()
    cfg = _config(world_model={**TINY_WORLD_MODEL, "compress_steps": 5})
    envs, spec = build(cfg.env)
    with pytest.raises(ConfigError, match="too small"):
        Simple(cfg, spec, Runtime.of(cfg.train))
    envs.close()


def test_the_world_model_overfits_a_fixed_batch_of_real_transitions():
    """Real Catch transitions from the replay, rewarded ones included: next frames and reward classes learned."""
    import torch.nn.functional as F

    from rlfoundry.world_models.next_frame import LatentMixing, NextFrameConfig, NextFramePredictor
    from rlfoundry.world_models.training import world_model_loss

    agent, envs = _agent()
    agent._collect(envs, 600, None, [], [])
    envs.close()
    replay, n = agent.replay, agent.replay.num_steps
    rng = np.random.default_rng(0)
    usable = np.flatnonzero(~np.isnan(replay.values[:n]))
    rewarded = usable[replay.rewards[usable] != 1]
    assert len(rewarded) >= 4  # caught and missed balls: a -1 reward is class 0, not a wrapped 255
    picked = np.concatenate([rng.choice(rewarded, 6, replace=False),
                             rng.choice(usable[replay.rewards[usable] == 1], 10, replace=False)])
    seq = replay.gather(picked, 1)
    frames, actions = torch.from_numpy(seq.obs), torch.from_numpy(seq.actions[0])
    targets, rewards = torch.from_numpy(seq.next_frames[0]), torch.from_numpy(seq.rewards[0].astype(np.int64))
    values = torch.from_numpy(seq.values[0])

    torch.manual_seed(0)
    model = NextFramePredictor(NextFrameConfig.tiny(), 3, (3, 20, 16), 4).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):  # ≈20 s on one shared core
        out = model(frames, actions, targets, LatentMixing.hard_posterior())
        loss, _ = world_model_loss(out, targets, values, rewards, 1.0, "ce")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():  # with the bits inferred from the true next frame (a new ball's column is random)
        out = model(frames, actions, targets, LatentMixing.hard_posterior())
    predicted = out.frame_logits.argmax(1)
    changed = targets != frames[:, -3:]  # the ball and the paddle moved
    assert (predicted == targets).float().mean() >= 0.99 and (predicted == targets)[changed].float().mean() >= 0.8
    assert (out.reward_logits.argmax(1) == rewards).float().mean() >= 0.95
    assert F.mse_loss(out.values, values) < 0.1
    step = model.simulate(frames, actions, generator=torch.Generator().manual_seed(1))  # bits from the prior
    assert (step.next_frame == targets).float().mean() >= 0.98
