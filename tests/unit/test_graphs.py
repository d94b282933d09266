"""CUDA graphs on the CPU: every gradient step meant for a graph runs 20 steps without reading a tensor on the host
(the check that a graph can capture it), `train.cuda_graphs` resolves as documented, and the optimizers keep a
learning rate that is a tensor across set_lr and a checkpoint. tests/unit/test_graphs_cuda.py replays the graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfoundry.algos import Memory, Runtime, algorithm
from rlfoundry.algos.graphs import HostSync, no_host_syncs
from rlfoundry.algos.optim import load_optimizer_state, optimizer_state, set_lr
from rlfoundry.envs import build
from rlfoundry.experiment.load import load_config
from rlfoundry.nets.cores import CORES
from rlfoundry.run import hardware
from rlfoundry.world_models.latent import acting_inputs
from rlfoundry.world_models.rssm import State

# Every algorithm with graphed steps, in the variants whose steps differ (discrete SAC, prioritised double dueling DQN).
GRAPHED = {
    "td3": ("Pendulum-v1:td3", []),
    "ddpg": ("Pendulum-v1:ddpg", []),
    "sac": ("Pendulum-v1:sac", []),
    "sac-discrete": ("CartPole-v1:sac", []),
    "sac-fixed-alpha": ("Pendulum-v1:sac", ["algo.ent_coef=0.1"]),
    "dqn": ("CartPole-v1:dqn", []),
    "dqn-per": ("CartPole-v1:dqn", ["algo.prioritized=true", "algo.double=true", "algo.dueling=true"]),
}


def filled_agent(case: str, device: str = "cpu", overrides: list[str] = ()):
    """The agent of a GRAPHED case, seeded, with 64 env steps in its replay and no update taken."""
    spec_name, extra = GRAPHED[case]
    cfg = load_config(spec_name, [f"train.device={device}", "env.num_envs=1", "algo.learning_starts=100000",
                                  "algo.train_freq=64", "algo.batch_size=16", "network.hidden_sizes=[32,32]",
                                  *extra, *overrides])
    envs, spec = build(cfg.env, 1)
    torch.manual_seed(0)
    agent = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train, device))
    agent.iterate(envs, 0.0)
    envs.close()
    return agent


def test_the_guard_catches_host_reads_and_value_shaped_tensors():
    x = torch.randn(8, requires_grad=True)
    with no_host_syncs():
        y = (x * 2).clamp(max=1.0).square().sum()
        y.backward()  # autograd and in-place arithmetic are fine
    for read in (lambda: y.item(), lambda: float(y), lambda: bool(y > 0), lambda: x.nonzero(),
                 lambda: x[x > 0], lambda: int(x.argmax())):
        with pytest.raises(HostSync), no_host_syncs():
            read()


@pytest.mark.parametrize("case", GRAPHED)
def test_every_graphed_step_runs_20_updates_without_a_host_read(case):
    agent = filled_agent(case)
    assert agent.graphs
    with no_host_syncs():
        steps = [agent.update(0.5) for _ in range(20)]
    assert all(torch.isfinite(value).all() for step in steps for value in step.values())
    assert {"loss/critic", "loss/q"} & set(steps[-1])


@pytest.mark.parametrize("case", GRAPHED)
def test_every_acting_step_runs_20_steps_without_a_host_read(case):
    """The acting network's step (a graph of its own on CUDA): observations in, the policy's actions out."""
    agent = filled_agent(case)
    obs = torch.as_tensor(np.stack([agent.spec.observation_space.sample() for _ in range(3)]))
    with no_host_syncs():
        actions = [agent.act_step(obs)["actions"] for _ in range(20)]
    space = agent.spec.action_space
    assert all(a.shape == (3, *space.shape) for a in actions)
    assert all(space.contains(a[0].numpy().astype(space.dtype)) for a in actions)
    if case in ("sac", "sac-discrete"):  # sampled: the steps differ
        assert len({tuple(a.flatten().tolist()) for a in actions}) > 1


ON_POLICY_ACTING = [("CartPole-v1:ppo", []), ("Pendulum-v1:ppo", []), ("CartPole-v1:a2c", []),
                    ("Pendulum-v1:reinforce", [])] + [
    ("CartPole-v1:ppo-masked", [f"network.core={core}", "network.core_hidden=16", "network.memory_length=4",
                                "network.num_heads=2", "network.mamba2_head_dim=8"]) for core in CORES if core != "identity"]




def acting_id(value) -> str:
    """A test id of ON_POLICY_ACTING: the spec, then the core (ff: feed-forward)."""
    return value if isinstance(value, str) else next((o.split("=")[1] for o in value if o.startswith("network.core=")),
                                                     "ff")


@pytest.mark.parametrize(("spec_name", "extra"), ON_POLICY_ACTING, ids=acting_id)
def test_every_on_policy_acting_step_runs_20_steps_without_a_host_read(spec_name, extra):
    """The acting step of PPO, A2C and REINFORCE with every memory core, episode starts given or not, its memory
    fed back as the collector does."""
    cfg = load_config(spec_name, ["train.device=cpu", "network.hidden_sizes=[32,32]", *extra])
    envs, spec = build(cfg.env, 1)
    envs.close()
    agent = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train))
    obs = torch.as_tensor(np.stack([spec.observation_space.sample() for _ in range(3)]))
    state = agent.policy.initial_state(3) if agent.policy.recurrent else None
    with torch.inference_mode(), no_host_syncs():
        for t in range(20):
            starts = torch.tensor([t % 5 == 0, False, t % 7 == 0]) if t % 2 and state is not None else None
            out, state = agent.act(obs, state, starts)
    assert out.actions.shape == (3, *spec.action_space.shape) and out.logprobs.shape == out.values.shape == (3,)
    assert agent.graphs and torch.isfinite(out.values).all()


@pytest.mark.parametrize("spec_name", ["CartPole-v1:ppo", "Pendulum-v1:ppo"])
def test_ppo_minibatch_steps_run_20_updates_without_a_host_read(spec_name):
    """PPO's minibatch step (loss, backward, clipped Adam step) on random minibatches of a fixed size."""
    from rlfoundry.buffers.rollout import Minibatch

    cfg = load_config(spec_name, ["train.device=cpu", "network.hidden_sizes=[32,32]"])
    envs, spec = build(cfg.env, 1)
    envs.close()
    agent = algorithm("ppo")(cfg, spec, Runtime.of(cfg.train))
    rng = np.random.default_rng(0)
    coefs = torch.tensor([0.2, 0.01])
    with no_host_syncs():
        for _ in range(20):
            obs = torch.as_tensor(np.stack([spec.observation_space.sample() for _ in range(64)]), dtype=torch.float32)
            actions = torch.as_tensor(np.stack([spec.action_space.sample() for _ in range(64)]))
            targets = tuple(torch.as_tensor(rng.normal(size=64), dtype=torch.float32) for _ in range(4))
            stats = agent.minibatch_step(Minibatch(obs, actions, targets), coefs, True)
    assert agent.graphs and not agent.graphs_by_default  # auto leaves PPO eager until a GPU measures it
    assert all(torch.isfinite(value) for value in stats.values()) and "diag/grad_norm" in stats


TINY_DREAMER = ["algo.model.rssm.deter=32", "algo.model.rssm.hidden=16", "algo.model.rssm.blocks=4",
                "algo.model.units=32", "algo.units=32", "algo.batch_size=4", "algo.batch_length=8",
                "algo.train_ratio=16", "algo.collect_steps=8"]


def filled_dreamer(spec_name: str, device: str = "cpu", overrides: list[str] = ()):
    """A tiny DreamerV3 agent that has collected 64 steps (and taken its first updates)."""
    cfg = load_config(spec_name, [f"train.device={device}", *TINY_DREAMER, *overrides])
    envs, spec = build(cfg.env, 1)
    torch.manual_seed(0)
    agent = algorithm("dreamer")(cfg, spec, Runtime.of(cfg.train, device))
    while len(agent.replay) < 64:
        agent.iterate(envs, 0.0)
    envs.close()
    return agent


@pytest.mark.parametrize("spec_name", ["MountainCarContinuous-v0:dreamer", "CartPole-v1:dreamer"])
def test_dreamer_gradient_steps_run_20_updates_without_a_host_read(spec_name):
    """The whole DreamerV3 update (world model, imagination, actor-critic, LaProp as on CUDA, slow critic); the
    replay's sampling and the latents written back stay outside it."""
    from rlfoundry.world_models.latent import time_major

    agent = filled_dreamer(spec_name)
    for group in agent.optimizer.param_groups:
        group["capturable"] = True  # LaProp's CUDA path, here on the CPU
    algo = agent.algo
    for _ in range(20):
        batch = agent.replay.sample(algo.batch_size, algo.batch_length, agent.rng)
        context = torch.as_tensor(batch.latents[:, 0] * batch.has_latent[:, 0, None])
        with no_host_syncs():
            out = agent.gradient_step(*time_major(batch, agent.device), context)
    assert torch.isfinite(out["loss/total"]) and out["feats"].shape[:2] == (algo.batch_length, algo.batch_size)
    assert agent.graphs and not agent.graphs_by_default


def test_cuda_graphs_resolve_by_device_algorithm_debug_and_processes():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert hardware.resolve_cuda_graphs("auto", "sac", cpu, False, 1) == (False, None)
    on, warning = hardware.resolve_cuda_graphs(True, "sac", cpu, False, 1)
    assert not on and "on the CPU" in warning
    on, warning = hardware.resolve_cuda_graphs(True, "simple", cuda, False, 1)
    assert on and warning is None and not algorithm("simple").graphs_by_default
    on, warning = hardware.resolve_cuda_graphs(True, "dqn", cuda, True, 1)
    assert not on and "train.debug" in warning
    on, warning = hardware.resolve_cuda_graphs(True, "dqn", cuda, False, 2)
    assert not on and "processes" in warning
    assert hardware.resolve_cuda_graphs(True, "td3", cuda, False, 1) == (True, None)
    assert hardware.resolve_cuda_graphs(False, "td3", cuda, False, 1) == (False, None)
    for name in ("sac", "td3", "ddpg", "dqn", "ppo", "dreamer"):  # auto: what the GPU measurements found to pay
        assert hardware.resolve_cuda_graphs("auto", name, cuda, False, 1)[0] is algorithm(name).graphs_by_default


def test_a_cpu_run_records_cuda_graphs_off(tmp_path):
    from rlfoundry.run.trainer import Trainer

    trainer = Trainer(load_config("Pendulum-v1:td3", ["train.device=cpu", "train.cuda_graphs=true",
                                                      "train.total_timesteps=1"]), tmp_path / "run")
    assert trainer.run_cfg.train.cuda_graphs is False
    assert any("train.cuda_graphs=true: the run is on the CPU" in w for w in trainer.warnings)


def test_a_learning_rate_tensor_survives_set_lr_and_a_checkpoint():
    param = torch.nn.Parameter(torch.zeros(3))
    rate = torch.tensor(1e-3)
    optimizer = torch.optim.Adam([param], lr=rate)
    set_lr(optimizer, 5e-4)
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(5e-4)
    state = optimizer_state(optimizer)
    assert state["param_groups"][0]["lr"] == pytest.approx(5e-4) and isinstance(state["param_groups"][0]["lr"], float)
    set_lr(optimizer, 1.0)
    load_optimizer_state(optimizer, state)
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(5e-4)
    plain = torch.optim.Adam([param], lr=1e-3)
    set_lr(plain, 2e-3)
    assert plain.param_groups[0]["lr"] == 2e-3


def test_a_sample_reaches_the_step_as_the_replay_holds_it():
    agent = filled_agent("td3")
    arrays = (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], np.int64))
    tensors = agent.to_device(*arrays)
    assert [t.dtype for t in tensors] == [torch.float32, torch.int64]
    assert all(np.array_equal(t.numpy(), a) for t, a in zip(tensors, arrays, strict=True))


def test_train_deterministic_turns_deterministic_kernels_on_for_its_run_only(tmp_path):
    """On the CPU the numbers are the same either way; what the setting changes is torch's kernel choice on CUDA
    (checked there by tests/unit/test_graphs_cuda.py)."""
    import rlfoundry
    from rlfoundry.run.hooks import Callback

    seen = []

    class Record(Callback):
        def on_start(self, ctx):
            seen.append(torch.are_deterministic_algorithms_enabled())

    quick = ["train.device=cpu", "train.total_timesteps=64", "algo.train_freq=64", "algo.learning_starts=32",
             "algo.batch_size=16", "network.hidden_sizes=[16]", "logging.progress=false", "logging.tensorboard=false",
             "eval.every_steps=0", "eval.at_end=false"]
    try:
        for flag in ("true", "false"):
            rlfoundry.train("CartPole-v1:sac", [*quick, f"train.deterministic={flag}"], tmp_path / flag,
                            callbacks=[Record()])
    finally:
        torch.use_deterministic_algorithms(False)
    assert seen == [True, False]


def filled_planet(device: str = "cpu", overrides: list[str] = ()):
    """A tiny PlaNet agent whose replay holds a window to train on."""
    cfg = load_config("rlfoundry/Reach-v0:planet", [
        f"train.device={device}", *overrides, "algo.model.rssm.deter=32", "algo.model.rssm.hidden=32", "algo.model.rssm.stoch=8",
        "algo.model.units=32", "algo.batch_size=4", "algo.batch_length=8", "algo.seed_episodes=2",
        "algo.candidates=20", "algo.top_k=5", "algo.iterations=2", "algo.plan_horizon=4", "algo.collect_steps=8"])
    envs, spec = build(cfg.env, 1)
    torch.manual_seed(0)
    agent = algorithm("planet")(cfg, spec, Runtime.of(cfg.train, device))
    while agent.replay.starts(agent.algo.batch_length - 1) == 0:
        agent.iterate(envs, 0.0)
    envs.close()
    return agent


def test_planet_gradient_steps_run_20_updates_without_a_host_read():
    from rlfoundry.world_models.latent import time_major

    agent = filled_planet()
    # on CUDA its Adam is capturable; the CPU has no capturable Adam, and the fused one reads nothing on the host
    agent.optimizer = torch.optim.Adam(agent.model.parameters(), lr=agent.algo.lr, fused=True)
    for _ in range(20):
        batch = agent.replay.sample(agent.algo.batch_size, agent.algo.batch_length - 1, agent.rng)
        with no_host_syncs():
            out = agent.gradient_step(*time_major(batch, agent.device))
    assert torch.isfinite(out["loss/world_model"]) and agent.graphs


LATENT_ACTING = {  # agent, the options of its acting step (DreamerV3: sample; PlaNet: noise, seeding)
    "dreamer-box": (lambda *a: filled_dreamer("MountainCarContinuous-v0:dreamer", *a), [(True,), (False,)]),
    "dreamer-discrete": (lambda *a: filled_dreamer("CartPole-v1:dreamer", *a), [(True,), (False,)]),
    "planet": (filled_planet, [(0.3, False), (0.0, False), (0.3, True)]),
}


@pytest.mark.parametrize("case", LATENT_ACTING)
def test_latent_acting_steps_run_20_steps_without_a_host_read(case):
    """DreamerV3's acting step (encoder, posterior, policy) and PlaNet's (posterior, then its whole CEM plan), the
    new state fed back, with and without episode starts."""
    build, options = LATENT_ACTING[case]
    agent = build()
    obs = torch.as_tensor(np.stack([agent.spec.observation_space.sample() for _ in range(3)]))
    for option in options:
        state, prev, _ = acting_inputs(agent.model, Memory(), 3, agent.replay.action_shape)
        with no_host_syncs():
            for t in range(20):
                out = agent.act_step(obs, state.deter, state.stoch, prev, torch.tensor([t % 4 == 0, False, True]),
                                     *option)
                state, prev = State(out["deter"], out["stoch"]), out["actions"]
        assert torch.isfinite(prev.float()).all() and len(prev) == 3


def test_the_simulated_env_step_runs_20_steps_without_a_host_read():
    """SimPLe's simulated env step (the world model's forward pass, the prior's bits from the env's own generator,
    the next stacks and rewards), its stacks fed back; the frame's argmax as on CUDA (the CPU's blocked argmax
    checks the logits on the host, on the CPU only)."""
    from tests.unit.test_simulated_env import ENVS, NUM_ACTIONS, _env

    env, _ = _env()
    env.reset(seed=0)
    model = env.model
    model._next_frame = lambda x: model._frame_logits(x).argmax(1).to(torch.uint8)
    stacks, first = env.stacks, env.stacks
    with no_host_syncs():
        for _ in range(20):
            out = env.advance(stacks, torch.arange(ENVS) % NUM_ACTIONS, 1.0)
            stacks = out["stacks"]
    assert stacks.shape == first.shape and stacks.dtype == torch.uint8 and not torch.equal(stacks, first)
    assert set(out["reward"].tolist()) <= {-1.0, 0.0, 1.0} and torch.isfinite(out["values"]).all()
