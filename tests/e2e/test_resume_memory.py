"""Exact resume with a memory core: the collector's memory (the LSTM state of every env mid-episode) travels in
the checkpoint, so a run killed with SIGKILL and resumed writes the same metrics.csv rows as the run never
stopped. Without it, the first rollout after the resume would start from fresh memory and diverge."""

from tests.e2e import test_resume as resume

resume.CASES["lstm"] = ("CartPole-v1:ppo-lstm", 10_240, ["checkpoint.every_steps=2048", "eval.every_steps=4096",
                                                         "eval.episodes=2"], 4_200)


def test_resumed_lstm_run_equals_uninterrupted(tmp_path):
    resume.test_resumed_run_equals_uninterrupted(tmp_path, "lstm", "SIGKILL")
