"""Exact resume with a memory core: the collector's memory (the LSTM state of every env mid-episode) travels in
the checkpoint, so a run killed with SIGKILL and resumed writes the same metrics.csv rows as the run never
stopped. Without it, the first rollout after the resume would start from fresh memory and diverge. For a recurrent
DQN the checkpoint also holds the sequence replay's stored states, its priorities and the acting state."""

from tests.e2e import test_resume as resume

resume.CASES["lstm"] = ("CartPole-v1:ppo-lstm", 10_240, ["checkpoint.every_steps=2048", "eval.every_steps=4096",
                                                         "eval.episodes=2"], 4_200)
# MountainCar: an unskilled policy's episodes all last 200 steps, so the checkpoint falls mid-episode and the acting
# state it holds decides the next ~180 steps' actions and stored states (CartPole's short episodes would reset it
# within a few steps, and a resume that dropped it would pass unnoticed).
resume.CASES["dqn-lstm"] = ("MountainCar-v0:dqn", 3_072, [
    "env.num_envs=1", "network.core=lstm", "network.core_hidden=16", "network.hidden_sizes=[32]",
    "algo.prioritized=true", "algo.train_freq=64", "algo.gradient_steps=16", "algo.learning_starts=256",
    "algo.exploration_fraction=0.05", "algo.exploration_final_eps=0",
    "checkpoint.every_steps=512", "eval.every_steps=1024", "eval.episodes=2"], 1_100)


def test_resumed_lstm_run_equals_uninterrupted(tmp_path):
    resume.test_resumed_run_equals_uninterrupted(tmp_path, "lstm", "SIGKILL")


def test_resumed_recurrent_dqn_run_equals_uninterrupted(tmp_path):
    resume.test_resumed_run_equals_uninterrupted(tmp_path, "dqn-lstm", "SIGKILL")
