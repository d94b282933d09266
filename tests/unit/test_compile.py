"""train.compile: the compiled acting and learning functions compute what the eager ones do, and `auto` resolves
by the measured rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfoundry.algos import Runtime
from rlfoundry.algos.ppo import PPO
from rlfoundry.buffers.rollout import Minibatch
from rlfoundry.envs import build
from rlfoundry.experiment.load import load_config
from rlfoundry.run import hardware
from rlfoundry.run.trainer import Trainer


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_compiled_ppo_gives_the_eager_losses_and_actions(env_id):
    torch.manual_seed(0)
    agents = {}
    for setting in (False, True):
        cfg = load_config(f"{env_id}:ppo", ["train.device=cpu", f"train.compile={str(setting).lower()}"])
        envs, spec = build(cfg.env, 1)
        envs.close()
        agents[setting] = PPO(cfg, spec, Runtime.of(cfg.train))
    agents[True].policy.load_state_dict(agents[False].policy.state_dict())

    rng = np.random.default_rng(0)
    n = 64
    obs = torch.as_tensor(np.stack([spec.observation_space.sample() for _ in range(n)]), dtype=torch.float32)
    if spec.discrete:
        actions = torch.as_tensor(rng.integers(spec.action_space.n, size=n))
    else:
        actions = torch.as_tensor(rng.uniform(-1, 1, size=(n, *spec.action_space.shape)), dtype=torch.float32)
    targets = tuple(torch.as_tensor(rng.normal(size=n), dtype=torch.float32) for _ in range(4))
    batch = Minibatch(obs, actions, targets)
    coefs = torch.tensor([0.2, 0.01])
    results = {}
    for setting, agent in agents.items():
        loss, stats = agent.minibatch_loss(batch, coefs, True)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in agent.policy.parameters()])
        results[setting] = (loss.detach(), stats, grads)
    eager, compiled = results[False], results[True]
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    for key in eager[1]:
        torch.testing.assert_close(compiled[1][key], eager[1][key], rtol=1e-5, atol=1e-6, msg=key)
    torch.testing.assert_close(compiled[2], eager[2], rtol=1e-4, atol=1e-6)

    with torch.no_grad():  # acting: the same distribution, so the same log-probabilities and values
        torch.manual_seed(1)
        eager_out = agents[False].policy.act(obs[:8])[0]
        torch.manual_seed(1)
        compiled_out = agents[True].policy.act(obs[:8])[0]
    torch.testing.assert_close(compiled_out.values, eager_out.values, rtol=1e-5, atol=1e-6)
    eager_lp = agents[False].policy.evaluate(obs[:8], compiled_out.actions)[0]
    torch.testing.assert_close(compiled_out.logprobs, eager_lp, rtol=1e-5, atol=1e-5)


def test_compile_auto_resolves_by_algorithm_core_and_budget(monkeypatch):
    monkeypatch.setattr(hardware, "has_cpp_compiler", lambda: True)
    cfg = load_config("CartPole-v1:ppo")
    long, short = hardware.COMPILE_PAYS_FROM, hardware.COMPILE_PAYS_FROM - 1
    def resolved(*args):
        return hardware.resolve_compile(*args)[0]

    assert resolved("auto", "ppo", cfg.network, long) is True
    assert resolved("auto", "ppo", cfg.network, long, torch.device("cuda")) is False  # graphs there, not compile
    assert resolved("auto", "ppo", cfg.network, short) is False
    assert resolved("auto", "dqn", cfg.network, long) is False
    lstm = cfg.network.model_copy(update={"core": "lstm"})
    assert resolved("auto", "ppo", lstm, long) is False
    assert resolved(True, "dqn", cfg.network, 1) is True
    assert resolved(False, "ppo", cfg.network, long) is False
    monkeypatch.setattr(hardware, "has_cpp_compiler", lambda: False)  # inductor could not build its kernels
    assert resolved("auto", "ppo", cfg.network, long) is False


def test_compile_true_for_an_agent_without_a_compiled_path_runs_eager_with_a_warning(tmp_path):
    """Every agent either compiles something or says it does not: `true` is never silently ignored."""
    from rlfoundry.algos import algorithms

    assert [name for name, agent in algorithms().items() if not agent.compiles] == ["dreamer", "planet"]
    cfg = load_config("CartPole-v1:ppo")
    assert hardware.resolve_compile(True, "ppo", cfg.network, 1) == (True, None)
    compile_, warning = hardware.resolve_compile(True, "dreamer", cfg.network, 1)
    assert compile_ is False and "dreamer has no compiled path" in warning
    assert hardware.resolve_compile("auto", "dreamer", cfg.network, 10**9) == (False, None)
    trainer = Trainer(load_config("rlfoundry/Reach-v0:dreamer", ["train.compile=true", "train.total_timesteps=1"]),
                      tmp_path / "run")
    assert trainer.run_cfg.train.compile is False
    assert any("dreamer has no compiled path" in w for w in trainer.warnings)


def _agents(spec_name: str):
    """The same agent eager and compiled, with the same weights."""
    from rlfoundry.algos import algorithm

    agents = {}
    for setting in (False, True):
        cfg = load_config(spec_name, ["train.device=cpu", f"train.compile={str(setting).lower()}"])
        envs, spec = build(cfg.env, 1)
        envs.close()
        torch.manual_seed(0)
        agents[setting] = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train))
    agents[True].load_state_dict(agents[False].state_dict())
    return agents, spec


def _batch(spec, n: int = 32):
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(np.stack([spec.observation_space.sample() for _ in range(n)]), dtype=torch.float32)
    if spec.discrete:
        return obs, torch.as_tensor(rng.integers(spec.action_space.n, size=n))
    return obs, torch.as_tensor(rng.uniform(-1, 1, size=(n, *spec.action_space.shape)), dtype=torch.float32)


def _forward(algo: str, agent, obs, actions) -> list[torch.Tensor]:
    """What each agent's update computes with its compiled parts (seeded where it samples)."""
    torch.manual_seed(3)
    if algo in ("a2c", "reinforce"):
        return list(agent.policy.evaluate(obs, actions))
    if algo == "dqn":
        return [agent.q(obs), agent.target(obs)]
    if agent.spec.discrete:
        return [agent.actor(obs), *agent.critic(obs)]
    new_actions, logp = agent.actor(obs)
    return [new_actions, logp, *agent.critic(obs, actions)]


@pytest.mark.parametrize("spec_name", ["CartPole-v1:a2c", "CartPole-v1:reinforce", "CartPole-v1:dqn",
                                       "Pendulum-v1:sac", "CartPole-v1:sac"])
def test_compiled_agents_compute_what_eager_ones_do(spec_name):
    """train.compile for A2C and REINFORCE (acting and the update's forward pass) and for DQN and SAC (every
    network's forward pass): the same outputs and gradients as eager on the same batch. (Compiled kernels draw
    random numbers their own way; SAC's sampled actions are compared with inductor's eager-RNG fallback.)"""
    import torch._inductor.config as inductor

    with inductor.patch(fallback_random=True):
        _compare_compiled(spec_name)


def _compare_compiled(spec_name: str) -> None:
    agents, spec = _agents(spec_name)
    algo = spec_name.split(":")[1]
    obs, actions = _batch(spec)
    results = {}
    for setting, agent in agents.items():
        outputs = _forward(algo, agent, obs, actions)
        sum(out.float().sum() for out in outputs).backward()
        params = [p for module in vars(agent).values() if isinstance(module, torch.nn.Module)
                  for p in module.parameters() if p.grad is not None]
        results[setting] = ([out.detach() for out in outputs], torch.cat([p.grad.flatten() for p in params]))
    for eager, compiled_out in zip(results[False][0], results[True][0]):
        torch.testing.assert_close(compiled_out, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-4, atol=1e-5)
    assert agents[True].predict(obs[:4].numpy()).shape == agents[False].predict(obs[:4].numpy()).shape
