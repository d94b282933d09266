"""The frame replay of SimPLe's real experience against a scripted single env whose every frame says which it is:
stacks rebuilt from single frames, the footprint, retroactive values (a hand computation and a reference loop),
windows within episodes, restart states, a full buffer, and checkpoint round trips without pickle."""

import numpy as np
import pytest

from rlfoundry.buffers.frames import FrameReplay

FRAME = (3, 6, 5)
S = 4


def frame(number):
    """A frame that carries its number (1-based; the zero frame is padding) in its first two pixels."""
    out = np.full(FRAME, (number * 37) % 256, np.uint8)
    out[0, 0, 0], out[0, 0, 1] = number % 256, number // 256
    return out


def numbers(frames):
    """The numbers of frames [..., C, H, W] (0 for padding)."""
    return frames[..., 0, 0, 0].astype(np.int64) + 256 * frames[..., 0, 0, 1].astype(np.int64)


class ScriptedEnv:
    """One env with frame-stacked observations [S * C, H, W]: each new frame gets the next number. A reset stack
    has zero padding ("zero") or S fresh frames ("noop": SimPLe's no-op steps after a reset)."""

    def __init__(self, reset="noop"):
        self.reset_mode, self.count, self.stack = reset, 0, None

    def _new(self):
        self.count += 1
        return frame(self.count)

    def reset(self):
        if self.reset_mode == "zero":
            frames = [np.zeros(FRAME, np.uint8)] * (S - 1) + [self._new()]
        else:
            frames = [self._new() for _ in range(S)]
        self.stack = np.concatenate(frames)
        return self.stack.copy()

    def step(self):
        self.stack = np.concatenate([self.stack[FRAME[0]:], self._new()])
        return self.stack.copy()


def run(buffer, env, lengths, rewards=None, last_unfinished=False, seed=0):
    """Episodes of `lengths` steps (the last one left unfinished and interrupted if `last_unfinished`); returns
    the added steps (obs, action, reward, next_obs, done, episode) in order."""
    rng = np.random.default_rng(seed)
    added = []
    for episode, length in enumerate(lengths):
        obs = env.reset()
        for t in range(length):
            action = int(rng.integers(buffer.num_actions))
            reward = float(rewards[len(added)] if rewards is not None else rng.choice([-2.5, 0.0, 0.0, 1.0, 3.0]))
            next_obs = env.step()
            done = t == length - 1 and not (last_unfinished and episode == len(lengths) - 1)
            buffer.add(obs, action, reward, next_obs, done)
            added.append((obs, action, reward, next_obs, done, episode))
            obs = next_obs
    if last_unfinished:
        buffer.interrupt()
    return added


def reference_values(added, gamma):
    """v per step by the port's rule, one step at a time (NaN for an unfinished episode)."""
    values = np.full(len(added), np.nan)
    end = None
    for i in range(len(added) - 1, -1, -1):
        done = added[i][4]
        if done:
            end, value = added[i][5], 0.0
        elif end is None or added[i][5] != end:
            end = None
            continue
        else:
            value = np.sign(added[i][2]) + gamma * value
        values[i] = value
    return values


# ---------------------------------------------------------------- stacks and memory

@pytest.mark.parametrize("reset", ["noop", "zero"])
def test_stacks_rebuilt_from_single_frames_equal_the_added_ones(reset):
    buffer = FrameReplay(100, FRAME, num_actions=6, max_episodes=10)
    added = run(buffer, ScriptedEnv(reset), [5, 1, 7, 2, 3], last_unfinished=True)
    n = len(added)
    assert buffer.num_steps == n
    stacks = buffer.stack(np.arange(n))
    assert stacks.dtype == np.uint8 and stacks.shape == (n, S * FRAME[0], *FRAME[1:])
    windows = buffer.gather(np.arange(n), 1)
    for i, (obs, action, reward, next_obs, done, _episode) in enumerate(added):
        np.testing.assert_array_equal(stacks[i], obs)
        np.testing.assert_array_equal(windows.next_frames[0, i], next_obs[-FRAME[0]:])
        assert windows.actions[0, i] == action and windows.dones[0, i] == done
        assert windows.rewards[0, i] == np.sign(reward) + 1
    # right after an episode start the stack holds only the reset observation's frames, none of the episode before
    firsts = [i for i in range(n) if i == 0 or added[i][5] != added[i - 1][5]]
    for i in firsts[1:]:
        before = set(numbers(np.stack([added[j][3] for j in range(i) if added[j][5] == added[i - 1][5]])
                             .reshape(-1, *FRAME)).tolist()) - {0}
        assert not before & set(numbers(stacks[i].reshape(S, *FRAME)).tolist())


def test_frames_stored_once():
    buffer = FrameReplay(100, FRAME, num_actions=4, max_episodes=10)
    lengths = [6, 1, 9, 4]
    run(buffer, ScriptedEnv(), lengths, last_unfinished=True)
    steps, episodes = sum(lengths), len(lengths)
    # one frame per step plus the S frames of each reset observation, not S (+ 1) frames per step
    assert buffer.num_frames == steps + S * episodes
    assert buffer.state_dict()["frames"].shape == (steps + S * episodes, *FRAME)


def test_memory_near_one_frame_per_step():
    shape, capacity = (3, 105, 80), 200  # SimPLe's frames; a small capacity: the ratio is what matters
    buffer = FrameReplay(capacity, shape, num_actions=18, max_episodes=2)
    frame_bytes = int(np.prod(shape))
    assert buffer.frames.nbytes == (capacity + S * 2) * frame_bytes
    assert buffer.nbytes == (capacity + S * 2) * frame_bytes + capacity * (8 + 1 + 1 + 1 + 4)
    assert buffer.nbytes / (capacity * frame_bytes) < 1.05  # stacks stored whole: (S + 1) = 5 frames per step
    assert FrameReplay(100_000, shape, num_actions=18).frames.shape[0] == 104_000  # 2.62e9 bytes, calloc'ed


# ---------------------------------------------------------------- values

def test_values_by_hand_keep_negative_targets():
    gamma = 0.99
    buffer = FrameReplay(50, FRAME, num_actions=3, gamma=gamma)
    rewards = [-3.0, 0.0, 2.5, -1.0, 0.0, 1.0, -1.0, 1.0]  # episode of 5 steps, then 3 steps left unfinished
    run(buffer, ScriptedEnv(), [5, 3], rewards=rewards, last_unfinished=True)
    np.testing.assert_array_equal(buffer.rewards[:8], [0, 1, 2, 0, 1, 2, 0, 2])  # classes sign(r) + 1
    # v4 = 0; v3 = -1 + 0.99 * 0 = -1; v2 = 1 + 0.99 * -1 = 0.01; v1 = 0 + 0.99 * 0.01 = 0.0099;
    # v0 = -1 + 0.99 * 0.0099 = -0.990199. The port's uint8 `class - 1` made -1 into 255.
    expected = [-0.990199, 0.0099, 0.01, -1.0, 0.0]
    assert buffer.values.dtype == np.float32
    np.testing.assert_allclose(buffer.values[:5], expected, rtol=1e-6, atol=1e-7)
    assert buffer.values[0] < 0 and buffer.values[3] == -1.0 and buffer.values[:5].max() < 1
    assert np.isnan(buffer.values[5:8]).all()  # the unfinished episode
    assert len(buffer) == 5
    rng = np.random.default_rng(0)
    assert set(buffer.subsequences(rng, 2000, 1).indices.tolist()) == set(range(5))
    assert set(buffer.subsequences(rng, 2000, 2).indices.tolist()) == set(range(4))
    restarts = buffer.restart_states(rng, 500)
    unfinished = set(numbers(buffer.stack(np.arange(5, 8)).reshape(-1, *FRAME)).ravel().tolist())
    assert not unfinished & set(numbers(buffer.stack(np.arange(5)).reshape(-1, *FRAME)).ravel().tolist())
    assert not unfinished & set(numbers(restarts.reshape(-1, *FRAME)).ravel().tolist())


@pytest.mark.parametrize("gamma", [0.99, 0.5, 1.0])
def test_values_match_a_reference_loop(gamma):
    lengths = [1, 2, 3, 64, 100, 257, 5, 40]
    buffer = FrameReplay(sum(lengths), FRAME, num_actions=4, gamma=gamma, max_episodes=len(lengths))
    added = run(buffer, ScriptedEnv(), lengths, last_unfinished=True, seed=3)
    expected = reference_values(added, gamma)
    np.testing.assert_allclose(buffer.values, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isnan(buffer.values), np.isnan(expected))


def test_an_interrupted_episode_stays_unusable():
    buffer = FrameReplay(50, FRAME, num_actions=2)
    env = ScriptedEnv()
    run(buffer, env, [4, 3], last_unfinished=True)  # a collection phase ends mid-episode
    run(buffer, env, [6])  # the next phase resets the env and finishes an episode
    assert np.isfinite(buffer.values[:4]).all() and np.isnan(buffer.values[4:7]).all()
    assert np.isfinite(buffer.values[7:13]).all()
    starts = buffer.subsequences(np.random.default_rng(1), 3000, 3).indices
    assert set(starts.tolist()) == {0, 1} | set(range(7, 11))


# ---------------------------------------------------------------- sampling

def test_subsequences_stay_within_finished_episodes():
    lengths = [12, 3, 1, 20, 7, 9]
    buffer = FrameReplay(100, FRAME, num_actions=5, max_episodes=len(lengths))
    added = run(buffer, ScriptedEnv("zero"), lengths, last_unfinished=True, seed=5)
    episode = np.array([a[5] for a in added])
    finished = np.array([episode[i] < len(lengths) - 1 for i in range(len(added))])
    T = 4
    valid = {i for i in range(len(added) - T + 1)
             if finished[i] and episode[i + T - 1] == episode[i] and not any(added[j][4] for j in range(i, i + T - 1))}
    batch = buffer.subsequences(np.random.default_rng(2), 3000, T)
    N = 3000
    assert batch.obs.shape == (N, S * FRAME[0], *FRAME[1:]) and batch.next_frames.shape == (T, N, *FRAME)
    assert batch.actions.shape == batch.rewards.shape == batch.values.shape == batch.dones.shape == (T, N)
    assert batch.actions.dtype == np.int64 and batch.rewards.dtype == np.uint8 and batch.values.dtype == np.float32
    assert set(batch.indices.tolist()) == valid  # each valid window is drawn, nothing else
    assert np.isfinite(batch.values).all() and not batch.dones[:-1].any()
    for n in range(0, N, 7):
        start = int(batch.indices[n])
        np.testing.assert_array_equal(batch.obs[n], added[start][0])
        for t in range(T):
            obs, action, reward, next_obs, done, _ = added[start + t]
            np.testing.assert_array_equal(batch.next_frames[t, n], next_obs[-FRAME[0]:])
            assert batch.actions[t, n] == action and batch.dones[t, n] == done
    # the observation of every later step follows from the first one and the next frames (no episode end between)
    n = 0
    stack = batch.obs[n]
    for t in range(T - 1):
        stack = np.concatenate([stack[FRAME[0]:], batch.next_frames[t, n]])
        np.testing.assert_array_equal(stack, added[int(batch.indices[n]) + t + 1][0])


def test_restart_states_come_from_usable_transitions():
    lengths = [5, 8, 6]
    buffer = FrameReplay(100, FRAME, num_actions=3, max_episodes=len(lengths))
    added = run(buffer, ScriptedEnv(), lengths, last_unfinished=True, seed=7)
    usable = {added[i][0].tobytes() for i in range(13)}
    unusable = {added[i][0].tobytes() for i in range(13, 19)}
    restarts = buffer.restart_states(np.random.default_rng(3), 1000)
    assert restarts.shape == (1000, S * FRAME[0], *FRAME[1:]) and restarts.dtype == np.uint8
    drawn = {r.tobytes() for r in restarts}
    assert drawn == usable and not drawn & unusable


def test_nothing_to_sample_is_an_error():
    buffer = FrameReplay(20, FRAME, num_actions=2)
    run(buffer, ScriptedEnv(), [5], last_unfinished=True)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="finished episode"):
        buffer.subsequences(rng, 4, 2)
    with pytest.raises(ValueError, match="finished episode"):
        buffer.restart_states(rng, 4)
    run(buffer, ScriptedEnv(), [3])
    with pytest.raises(ValueError, match="window of 4 steps"):
        buffer.subsequences(rng, 4, 4)  # the only finished episode is shorter


# ---------------------------------------------------------------- errors

def test_full_buffer_raises_and_changes_nothing():
    buffer = FrameReplay(5, FRAME, num_actions=2, max_episodes=3)
    env = ScriptedEnv()
    run(buffer, env, [5], last_unfinished=True)
    obs = env.reset()
    before = buffer.state_dict()
    before = {k: v.copy() for k, v in before.items()}
    with pytest.raises(ValueError, match="full"):
        buffer.add(obs, 0, 0.0, env.step(), False)
    after = buffer.state_dict()
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)
    # too many episode starts for the frames: room for 10 + 4 * 2 = 18, one-step episodes take 5 each
    short = FrameReplay(10, FRAME, num_actions=2, max_episodes=2)
    run(short, env, [1, 1, 1])
    with pytest.raises(ValueError, match="max_episodes"):
        run(short, env, [1])
    assert short.num_steps == 3 and short.num_frames == 15


def test_add_refuses_observations_that_do_not_continue():
    buffer = FrameReplay(10, FRAME, num_actions=2)
    env = ScriptedEnv()
    obs = env.reset()
    buffer.add(obs, 1, 0.0, env.step(), False)
    with pytest.raises(ValueError, match="interrupt"):
        buffer.add(env.reset(), 1, 0.0, env.step(), False)  # the env was reset without telling the buffer
    with pytest.raises(ValueError, match="uint8"):
        buffer.add(obs.astype(np.float32), 1, 0.0, obs, False)
    with pytest.raises(ValueError, match="action"):
        buffer.add(env.stack, 2, 0.0, env.step(), False)
    assert buffer.num_steps == 1


# ---------------------------------------------------------------- checkpoints

def roundtrip(state, tmp_path):
    np.savez(tmp_path / "frames.npz", **state)
    with np.load(tmp_path / "frames.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def test_state_dict_roundtrip_gives_identical_samples(tmp_path):
    def make():
        return FrameReplay(200, FRAME, num_actions=5, gamma=0.9, max_episodes=20)

    buffer, env = make(), ScriptedEnv()
    run(buffer, env, [10, 4, 15, 6], seed=1)
    obs = env.reset()
    for t in range(3):  # stop mid-episode: the next step continues the pending observation
        next_obs = env.step()
        buffer.add(obs, t, -1.0, next_obs, False)
        obs = next_obs
    state = buffer.state_dict()
    assert state["frames"].shape[0] == buffer.num_frames and state["values"].shape[0] == buffer.num_steps
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    restored = make()
    restored.load_state_dict(roundtrip(state, tmp_path))
    for a, b in zip(buffer.subsequences(np.random.default_rng(4), 16, 5),
                    restored.subsequences(np.random.default_rng(4), 16, 5)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(buffer.restart_states(np.random.default_rng(6), 8),
                                  restored.restart_states(np.random.default_rng(6), 8))
    # both go on identically, finishing the pending episode
    for t in range(4):
        next_obs = env.step()
        for target in (buffer, restored):
            target.add(obs, t, 1.0, next_obs, t == 3)
        obs = next_obs
    np.testing.assert_array_equal(buffer.values[:buffer.num_steps], restored.values[:restored.num_steps])
    for a, b in zip(buffer.subsequences(np.random.default_rng(5), 16, 3),
                    restored.subsequences(np.random.default_rng(5), 16, 3)):
        np.testing.assert_array_equal(a, b)


def test_load_state_dict_refuses_foreign_state_and_changes_nothing(tmp_path):
    buffer = FrameReplay(40, FRAME, num_actions=3, max_episodes=5)
    run(buffer, ScriptedEnv(), [6, 4])
    state = roundtrip(buffer.state_dict(), tmp_path)
    other = FrameReplay(40, FRAME, num_actions=3, max_episodes=5, gamma=0.9)
    with pytest.raises(ValueError, match="gamma"):
        other.load_state_dict(state)
    same = FrameReplay(40, FRAME, num_actions=3, max_episodes=5)
    with pytest.raises(ValueError, match="values"):
        same.load_state_dict({**state, "values": state["values"].astype(np.float64)})
    with pytest.raises(ValueError, match="lacks counters"):
        same.load_state_dict({k: v for k, v in state.items() if k != "counters"})
    bad_index = state["obs_index"].copy()
    bad_index[-1] = 10_000
    with pytest.raises(ValueError, match="frame indices"):
        same.load_state_dict({**state, "obs_index": bad_index})
    assert same.num_steps == 0 and same.num_frames == 0 and not same.frames.any()
