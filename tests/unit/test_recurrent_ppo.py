"""Recurrent PPO's plumbing (shared by A2C and REINFORCE): the update replays exactly what acting computed.

Acting runs a core one step at a time over the envs, carrying memory across rollouts and resetting it at
episode starts; the update replays stored sequences (chunks of `sequence_length`, cut again at episode
starts) from the memory stored at their start. If the two disagree, PPO's first ratio is not 1 and the
policy silently trains on the wrong gradient — so for every core, before any update, the replayed
log-probabilities and values must equal the collected ones (float32, atol 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlfoundry
from rlfoundry.algos import Runtime
from rlfoundry.algos.base import Memory
from rlfoundry.algos.ppo import PPO
from rlfoundry.buffers.rollout import (
    evaluate_minibatch,
    memory_columns,
    minibatches,
    split_at_episode_starts,
    to_sequences,
)
from rlfoundry.envs import build
from rlfoundry.experiment.load import load_config
from rlfoundry.run import checkpoint
from rlfoundry.run.evaluate import evaluate

CORES = ["lstm", "gru", "trxl", "gtrxl", "mamba", "mamba2"]


def test_to_sequences_cuts_each_env_into_chunks():
    x = torch.arange(12).view(6, 2)  # [T=6, B=2]: x[t, b] = 2t + b
    seq = to_sequences(x, 3)  # [3, 4]: column c·B + b is env b's chunk c
    assert seq[:, 0].tolist() == [0, 2, 4] and seq[:, 1].tolist() == [1, 3, 5]
    assert seq[:, 2].tolist() == [6, 8, 10] and seq[:, 3].tolist() == [7, 9, 11]
    states = [((torch.tensor([[10, 20]]),),), ((torch.tensor([[30, 40]]),),)]  # chunk 0, chunk 1; B on dim 1
    assert memory_columns(states)[0][0].tolist() == [[10, 20, 30, 40]]


def test_split_at_episode_starts_moves_each_episode_piece_to_its_own_sequence():
    starts = torch.tensor([[1, 0], [0, 0], [1, 0], [0, 1]], dtype=torch.bool)  # [L=4, S=2]
    pieces = split_at_episode_starts(starts)
    # column 0 has a start at row 2 → pieces rows 0–1 and 2–3; column 1 at row 3 → rows 0–2 and 3
    assert pieces.count == 4 and pieces.first.tolist() == [0, 2] and pieces.length == 3
    assert pieces.column.T.tolist() == [[0, 0, 1, 1], [2, 2, 2, 3]]
    assert pieces.row.T.tolist() == [[0, 1, 0, 1], [0, 1, 2, 0]]


@pytest.mark.parametrize("spec", ["CartPole-v1:a2c", "CartPole-v1:reinforce"])
def test_a2c_and_reinforce_train_with_a_memory_core(tmp_path, quiet, spec):
    _, summary = rlfoundry.train(spec, [*quiet, "network.core=gru", "network.core_hidden=16", "env.num_envs=2",
                                        "algo.num_steps=40", "train.total_timesteps=400", "eval.episodes=2"],
                                 tmp_path / "run")
    assert summary["status"] == "finished" and summary["total_steps"] == 400


@pytest.mark.parametrize("core", CORES)
def test_every_core_trains_in_bf16_and_keeps_float32_memory(tmp_path, quiet, core):
    run, summary = rlfoundry.train("CartPole-v1:ppo-masked", [
        *quiet, f"network.core={core}", "network.core_hidden=16", "network.num_heads=2", "network.mamba2_head_dim=8",
        "train.precision=bf16", "env.num_envs=2", "algo.num_steps=32", "algo.minibatch_size=32",
        "algo.update_epochs=2", "train.total_timesteps=128", "eval.episodes=1"], tmp_path / "run")
    assert summary["status"] == "finished" and summary["total_steps"] == 128
    saved = checkpoint.load(checkpoint.resolve(run, "last")).weights
    memory = [tensor for key, tensor in saved.items() if key.startswith("collector.memory.")]
    assert memory and all(tensor.dtype == torch.float32 for tensor in memory)


def agent_for(core: str, sequence_length: int):
    cfg = load_config("CartPole-v1:ppo-masked", [
        f"network.core={core}", "network.core_hidden=32", "network.memory_length=4", "network.num_heads=2",
        "network.mamba2_head_dim=16", "env.num_envs=4", "algo.num_steps=32", "algo.minibatch_size=32",
        f"algo.sequence_length={sequence_length}", "train.device=cpu", "env.normalize_reward=false",
    ])
    envs, spec = build(cfg.env)
    torch.manual_seed(0)
    return PPO(cfg, spec, Runtime.of(cfg.train)), envs


@pytest.mark.parametrize("core", CORES)
def test_replayed_sequences_reproduce_the_collected_logprobs_and_values(core):
    agent, envs = agent_for(core, sequence_length=8)
    reset_at_chunk_start = 0  # chunks whose stored memory is not zero but whose first row starts an episode
    try:
        for rollout_index in range(4):  # later rollouts start from memory carried over from the one before
            rollout, _ = agent._collector(envs).collect(agent.policy)
            assert bool(rollout.starts[1:].any()), "the check needs episode starts inside the rollout"
            stored = memory_columns(rollout.states)[0][0].transpose(0, 1).flatten(1).ne(0).any(1)
            reset_at_chunk_start += int((stored & to_sequences(rollout.starts, 8)[0]).sum())
            epoch = minibatches(rollout, (rollout.logprobs, rollout.values), rollout.valid, agent.policy,
                                minibatch_rows=32, sequence_length=8)
            checked = 0
            for mb in epoch():
                with torch.no_grad():
                    logprobs, _, values = evaluate_minibatch(agent.policy, mb)
                collected_logprobs, collected_values = mb.targets
                torch.testing.assert_close(logprobs, collected_logprobs, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(values, collected_values, atol=1e-5, rtol=1e-5)
                checked += len(logprobs)
            assert checked == int(rollout.valid.sum()), rollout_index
        assert reset_at_chunk_start > 0, "the check needs a stored memory that the update must not use"
    finally:
        envs.close()


def test_collector_memory_travels_in_the_agent_state():
    agent, envs = agent_for("lstm", sequence_length=32)
    try:
        agent.iterate(envs, 0.0)
        state = agent.state_dict()
        assert any(key.startswith("memory.") for key in state["collector"])
        fresh, _ = agent_for("lstm", sequence_length=32)
        fresh.load_state_dict(state)
        restored = fresh._collector(envs).memory
        for got, want in zip(restored, agent.collector.memory):
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b)
    finally:
        envs.close()


def test_memory_resets_on_the_step_after_an_episode_ended():
    memory = Memory()
    memory.ended(np.array([False, True]))  # env 1 ended: the next observation is its final one
    assert memory.starts is None  # the final observation still belongs to the old episode
    memory.ended(np.array([False, False]))  # the reset step: the next observation begins a new episode
    assert memory.starts.tolist() == [False, True]
    memory.ended(np.array([False, False]))
    assert memory.starts.tolist() == [False, False]


def test_evaluation_of_a_recurrent_agent_runs_whole_episodes():
    agent, envs = agent_for("gru", sequence_length=32)
    try:
        returns, lengths = evaluate(agent, envs, episodes=4, seed=0)
        assert len(returns) == 4 and all(length >= 1 for length in lengths)
        with pytest.raises(ValueError, match="needs a Memory"):
            agent.predict(np.zeros((4, 2), dtype=np.float32))
    finally:
        envs.close()
