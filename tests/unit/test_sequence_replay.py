"""The sequence replay of latent world models (`buffers/sequences.py`): rows as the env stream gives them, windows
with their context row, stored latents, online windows served first, and the checkpoint round trip."""

import numpy as np
import pytest

from rlfoundry.buffers.sequences import SequenceReplay

B = 2


def stream(replay: SequenceReplay, steps: int, episode_length: int = 5, latents: bool = True):
    """A fake NEXT_STEP vector env: obs = the global step (env e adds 1000·e); env e's episodes end every
    `episode_length + e` steps, by termination in env 0 and truncation in env 1; the step after an end is the reset
    step. Rewards are obs / 10; actions are -obs; latents are obs + 0.5."""
    t = 0
    obs = np.array([[0.0], [1000.0]], np.float32)
    replay.start(obs)
    since = np.zeros(B, int)
    done = np.zeros(B, bool)
    for _ in range(steps):
        t += 1
        actions = -obs[:, 0]
        next_obs = np.array([[t], [1000.0 + t]], np.float32)
        since = np.where(done, 0, since + 1)
        ends = since == episode_length + np.arange(B)
        rewards = np.where(done, 0.0, next_obs[:, 0] / 10).astype(np.float32)
        terminated = ends & (np.arange(B) == 0)
        truncated = ends & (np.arange(B) == 1)
        replay.add(actions, obs + 0.5 if latents else None, next_obs, rewards, terminated, truncated)
        done = terminated | truncated
        obs = next_obs


def make(capacity=2 * 40, latent_size=1, online_length=None):
    return SequenceReplay(capacity, B, (1,), np.float32, (), np.float32, latent_size, online_length)


def test_rows_follow_the_stream_with_resets_as_episode_starts():
    replay = make()
    stream(replay, 20)
    assert replay.step == 20 and len(replay) == 21 * B
    obs = replay.obs[:21, 0, 0]
    assert obs.tolist() == list(range(21))
    # env 0: the episode's 5th step terminates (rows 5, 11, 17), the row after is its reset row
    assert np.flatnonzero(replay.is_terminal[:21, 0]).tolist() == [5, 11, 17]
    assert np.flatnonzero(replay.is_first[:21, 0]).tolist() == [0, 6, 12, 18]
    assert np.all(replay.rewards[[0, 6, 12, 18], 0] == 0)
    assert replay.rewards[3, 0] == pytest.approx(0.3)
    # env 1 truncates: episode starts, never terminal
    assert not replay.is_terminal[:21, 1].any()
    assert np.flatnonzero(replay.is_first[:21, 1]).tolist() == [0, 7, 14]
    # actions and latents belong to the row they were taken at; the pending row has none yet
    assert replay.actions[:20, 0].tolist() == [-x for x in range(20)]
    assert replay.has_latent[:20].all() and not replay.has_latent[20].any()
    assert replay.latents[4, 1, 0] == 1004.5


def test_windows_are_consecutive_rows_of_one_env_with_their_context():
    replay = make()
    stream(replay, 30)
    batch = replay.sample(64, 8, np.random.default_rng(0))
    assert batch.obs.shape == (64, 9, 1) and batch.latents.shape == (64, 9, 1)
    offset = 1000.0 * batch.envs
    assert np.array_equal(batch.obs[:, 0, 0], batch.rows + offset)
    assert np.array_equal(batch.obs[..., 0], batch.rows[:, None] + np.arange(9)[None] + offset[:, None])
    assert np.array_equal(batch.actions[:, :-1], -batch.obs[:, :-1, 0])  # the last row's action is not needed
    assert batch.rows.min() >= 0 and batch.rows.max() <= 30 - 8  # the last row may be the pending one


def test_windows_never_reach_overwritten_rows():
    replay = make(capacity=2 * 12)
    stream(replay, 50)
    assert replay.starts(8) == 12 - 8
    batch = replay.sample(500, 8, np.random.default_rng(1))
    assert set(batch.rows.tolist()) == set(range(50 - 11, 50 - 8 + 1))
    assert np.array_equal(batch.obs[..., 0] - 1000.0 * batch.envs[:, None], batch.rows[:, None] + np.arange(9)[None])
    with pytest.raises(ValueError, match="no window of 13 steps"):
        replay.sample(1, 12, np.random.default_rng(0))


def test_written_latents_replace_the_stored_ones_unless_overwritten():
    replay = make(capacity=2 * 12)
    stream(replay, 20, latents=False)
    assert not replay.has_latent.any()
    rows, envs = np.array([9, 12]), np.array([0, 1])
    replay.write_latents(rows, envs, np.full((2, 3, 1), 7.0, np.float32))
    assert replay.latents[[9 % 12, 10 % 12, 11 % 12], 0, 0].tolist() == [7.0] * 3
    assert replay.has_latent[[0, 1, 2], 1].all()  # rows 12-14 of env 1 are slots 0-2
    # rows 9.. of env 1 were overwritten by rows 21..: a stale window writes nothing there
    stream_more = make(capacity=2 * 12)
    stream(stream_more, 30, latents=False)
    stream_more.write_latents(np.array([10]), np.array([1]), np.full((1, 3, 1), 7.0, np.float32))
    assert not stream_more.has_latent.any()


def test_the_checkpoint_round_trip_keeps_the_rows_exactly():
    replay = make(capacity=2 * 12)
    stream(replay, 30)
    state = {name: np.array(value) for name, value in replay.state_dict().items()}
    restored = make(capacity=2 * 12)
    restored.load_state_dict(state)
    assert len(restored) == len(replay) and restored.step == replay.step
    for name, array in replay._storage().items():
        assert np.array_equal(getattr(restored, name), array), name
    first = replay.sample(32, 6, np.random.default_rng(3))
    again = restored.sample(32, 6, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    # loading twice changes nothing (no duplicated rows)
    restored.load_state_dict(state)
    assert len(restored) == len(replay)
    # a replay before its first wrap saves only what it wrote
    young = make(capacity=2 * 40)
    stream(young, 7)
    assert young.state_dict()["obs"].shape == (8, B, 1)


def test_a_state_for_another_buffer_is_refused_and_changes_nothing():
    replay = make(capacity=2 * 12)
    stream(replay, 5)
    other = make(capacity=2 * 16)
    stream(other, 3)
    with pytest.raises(ValueError, match="capacity, num_envs, latent_size"):
        replay.load_state_dict(other.state_dict())
    assert replay.step == 5


def test_online_windows_cover_each_step_once_and_are_served_first():
    """DreamerV3's `replay.online`: every complete window of L + 1 rows starting at a multiple of L + 1 (each step in
    one of them), for every env, served once, oldest first, before uniform sampling fills the batch."""
    replay = make(capacity=2 * 40, online_length=4)
    stream(replay, 4)  # rows 0..4: the first window just completed
    assert list(replay.queue) == [(0, 0), (0, 1)]
    stream_more = make(capacity=2 * 40, online_length=4)
    stream(stream_more, 16)  # windows at rows 0, 5, 10 (15..19 is not complete yet)
    assert [start for start, env in stream_more.queue if env == 0] == [0, 5, 10]
    batch = stream_more.sample(4, 4, np.random.default_rng(0))
    assert batch.rows[:4].tolist() == [0, 0, 5, 5] and batch.envs[:4].tolist() == [0, 1, 0, 1]
    batch = stream_more.sample(5, 4, np.random.default_rng(0))  # the last 2 online, then 3 uniform
    assert batch.rows[:2].tolist() == [10, 10] and not stream_more.queue
    assert np.array_equal(batch.obs[..., 0] - 1000.0 * batch.envs[:, None], batch.rows[:, None] + np.arange(5)[None])
    # another length, or a replay without online windows, samples uniformly only
    other = make(capacity=2 * 40, online_length=4)
    stream(other, 16)
    other.sample(6, 3, np.random.default_rng(0))
    assert len(other.queue) == 6
    # windows overwritten before they were served are skipped
    small = make(capacity=2 * 12, online_length=4)
    stream(small, 30)
    batch = small.sample(8, 4, np.random.default_rng(0))
    assert batch.rows.min() >= 30 - 11 and not small.queue
    # the queue travels in the checkpoint
    saved = make(capacity=2 * 40, online_length=4)
    stream(saved, 16)
    restored = make(capacity=2 * 40, online_length=4)
    restored.load_state_dict({name: np.array(value) for name, value in saved.state_dict().items()})
    assert list(restored.queue) == list(saved.queue)
