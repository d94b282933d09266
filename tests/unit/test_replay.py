"""Replay buffers against slow reference loops: n-step targets over NEXT_STEP streams (terminations, truncations,
reset rows, several envs, ring wrap-around), frame stacks rebuilt from single frames, the sum tree's sampling
proportions, importance weights, checkpoint round trips without pickle, and the memory footprint."""

import numpy as np
import pytest

from rlfoundry.buffers.replay import PrioritizedReplayBuffer, ReplayBuffer, SumTree

# ---------------------------------------------------------------- scripted NEXT_STEP streams

def scripted_stream(num_envs, steps, seed, p_end=0.12):
    """Rewards, terminated, truncated [T, B] of a NEXT_STEP vector env: the row after an end is a reset row
    with reward 0. Terminations and truncations can coincide."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, num_envs)).astype(np.float32)
    terminated = rng.random((steps, num_envs)) < p_end
    truncated = rng.random((steps, num_envs)) < p_end
    reset = np.zeros_like(terminated)
    for t in range(1, steps):
        reset[t] = terminated[t - 1] | truncated[t - 1]
        terminated[t, reset[t]] = truncated[t, reset[t]] = False  # a reset step never ends an episode
    rewards[reset] = 0.0
    return rewards, terminated, truncated, reset


def reference_targets(rewards, terminated, truncated, reset, n_step, gamma, capacity_rows, first_row=0):
    """{(env, row): (n-step return, discount, bootstrap row)} for every transition that may be sampled, one at a
    time: not a reset row, inside the newest `capacity_rows` rows (and from `first_row` on), window complete."""
    steps, num_envs = rewards.shape
    targets = {}
    for env in range(num_envs):
        for row in range(max(first_row, steps - capacity_rows), steps):
            if reset[row, env]:
                continue
            ret, discount, boot = 0.0, None, None
            for k in range(n_step):
                if row + k >= steps:
                    break  # the window is not complete yet
                ret += gamma**k * rewards[row + k, env]
                if terminated[row + k, env]:
                    discount, boot = 0.0, row + k + 1
                    break
                if truncated[row + k, env]:
                    discount, boot = gamma ** (k + 1), row + k + 1
                    break
                if k == n_step - 1:
                    discount, boot = gamma**n_step, row + n_step
            if boot is not None:
                targets[(env, row)] = (ret, discount, boot)
    return targets


def vector_obs(row, num_envs):
    """Observation [env, row] per env: every sample says where it came from."""
    return np.stack([np.arange(num_envs), np.full(num_envs, row)], axis=1).astype(np.float32)


def fill_vector(buffer, rewards, terminated, truncated):
    steps, num_envs = rewards.shape
    for t in range(steps):
        actions = (10 * t + np.arange(num_envs)).astype(np.int64)
        buffer.add(vector_obs(t, num_envs), actions, rewards[t], terminated[t], truncated[t], vector_obs(t + 1, num_envs))


def absolute_rows(buffer, indices):
    slots = indices // buffer.num_envs
    return buffer.step - (buffer.step - slots) % buffer.num_rows, indices % buffer.num_envs


def check_samples(buffer, targets, draws, rng, **kwargs):
    """Every sampled transition equals its reference; return the set of (env, row) drawn."""
    seen = set()
    for _ in range(draws):
        batch = buffer.sample(256, rng, **kwargs)
        envs, rows = batch.obs[:, 0].astype(int), batch.obs[:, 1].astype(int)
        idx_rows, idx_envs = absolute_rows(buffer, batch.indices)
        np.testing.assert_array_equal(idx_rows, rows)
        np.testing.assert_array_equal(idx_envs, envs)
        np.testing.assert_array_equal(batch.actions, 10 * rows + envs)
        expected = np.array([targets[(e, r)] for e, r in zip(envs, rows)])  # KeyError: not a valid transition
        np.testing.assert_allclose(batch.rewards, expected[:, 0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(batch.discounts, expected[:, 1], rtol=1e-6)
        np.testing.assert_array_equal(batch.next_obs[:, 1], expected[:, 2])
        np.testing.assert_array_equal(batch.next_obs[:, 0], envs)
        assert batch.rewards.dtype == np.float32 and batch.discounts.dtype == np.float32
        seen.update(zip(envs.tolist(), rows.tolist()))
    return seen


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("n_step", [1, 3, 5])
@pytest.mark.parametrize("steps", [9, 50, 173])  # partly filled, just wrapped, wrapped several times
def test_n_step_targets_match_reference(n_step, steps, prioritized):
    num_envs, capacity, gamma = 3, 3 * 40, 0.9
    rewards, terminated, truncated, reset = scripted_stream(num_envs, steps, seed=steps + n_step)
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    buffer = cls(capacity, num_envs, (2,), np.float32, (), np.int64, n_step=n_step, gamma=gamma)
    fill_vector(buffer, rewards, terminated, truncated)
    targets = reference_targets(rewards, terminated, truncated, reset, n_step, gamma, capacity // num_envs)
    assert len(buffer) == len(targets)
    seen = check_samples(buffer, targets, 40, np.random.default_rng(0))
    assert seen == set(targets)  # every valid transition is drawn, and nothing else (reset rows, open windows)


def test_reset_rows_never_sampled():
    num_envs = 2
    buffer = ReplayBuffer(2 * 20, num_envs, (2,), np.float32, (), np.int64, n_step=2, gamma=0.5)
    # env 0 ends every other step, so half its rows are reset rows; env 1 never ends
    steps = 30
    terminated = np.zeros((steps, num_envs), bool)
    terminated[::2, 0] = True
    rewards = np.ones((steps, num_envs), np.float32)
    rewards[1::2, 0] = 0.0
    fill_vector(buffer, rewards, terminated, np.zeros_like(terminated))
    batch = buffer.sample(5000, np.random.default_rng(1))
    rows, envs = batch.obs[:, 1].astype(int), batch.obs[:, 0].astype(int)
    assert np.all(rows[envs == 0] % 2 == 0)  # odd rows of env 0 are reset rows
    assert set(rows[envs == 0]) == set(range(10, 30, 2))
    assert np.all(batch.discounts[envs == 0] == 0) and np.all(batch.rewards[envs == 0] == 1)


def test_uniform_over_valid_transitions():
    num_envs, steps = 2, 60
    rewards, terminated, truncated, reset = scripted_stream(num_envs, steps, seed=3, p_end=0.3)
    buffer = ReplayBuffer(num_envs * 25, num_envs, (2,), np.float32, (), np.int64, n_step=3, gamma=0.9)
    fill_vector(buffer, rewards, terminated, truncated)
    targets = reference_targets(rewards, terminated, truncated, reset, 3, 0.9, 25)
    batch = buffer.sample(200_000, np.random.default_rng(2))
    keys = batch.obs[:, 0].astype(int) * steps + batch.obs[:, 1].astype(int)
    counts = np.bincount(keys, minlength=num_envs * steps)
    expected = np.zeros(num_envs * steps)
    expected[[e * steps + r for e, r in targets]] = 200_000 / len(targets)
    assert counts[expected == 0].sum() == 0
    chi2 = ((counts[expected > 0] - expected[expected > 0]) ** 2 / expected[expected > 0]).sum()
    assert chi2 < len(targets) + 5 * np.sqrt(2 * len(targets))  # mean = dof, 5 standard deviations


# ---------------------------------------------------------------- frame stacks

class StackingEnvs:
    """Frame stacks [S * C, H, W] as an Atari vector env builds them: a fresh stack (padding + first frame) after
    a game ends, the stack going on after a life loss (a termination while the game continues)."""

    def __init__(self, num_envs, stack, channels, padding, seed):
        self.num_envs, self.stack, self.channels, self.padding = num_envs, stack, channels, padding
        self.rng = np.random.default_rng(seed)
        self.count = 0
        self.stacks = [self.fresh() for _ in range(num_envs)]

    def frame(self):
        self.count += 1
        frame = np.zeros((self.channels, 3, 2), np.uint8)
        frame[:, 0, 0] = 1 + self.count % 250
        frame[:, 0, 1] = 1 + self.count // 250
        frame[:, 1, 0] = np.arange(self.channels)
        return frame

    def fresh(self):
        first = self.frame()
        pad = np.zeros_like(first) if self.padding == "zero" else first
        return np.concatenate([pad] * (self.stack - 1) + [first])

    def obs(self):
        return np.stack(self.stacks)

    def step(self, game_reset):
        """Advance every env: a fresh stack where `game_reset`, else push a new frame."""
        for env in range(self.num_envs):
            if game_reset[env]:
                self.stacks[env] = self.fresh()
            else:
                self.stacks[env] = np.concatenate([self.stacks[env][self.channels:], self.frame()])
        return self.obs()


def run_stacking(buffer, envs, steps, seed, warmup=0):
    """Drive `buffer` with `envs`; returns the stream arrays, every observation by (row, env) and where a
    fresh stack began."""
    rng = np.random.default_rng(seed)
    B = envs.num_envs
    for _ in range(warmup):  # start mid-episode: the first stack has real older frames
        envs.step(np.zeros(B, bool))
    rewards, terminated, truncated, reset = scripted_stream(B, steps, seed, p_end=0.1)
    game_over = np.zeros(B, bool)  # the step that ended the last episode ended the game, not a life
    observations, fresh = [envs.obs()], [np.full(B, warmup == 0)]
    for t in range(steps):
        obs = observations[-1]
        fresh.append(reset[t] & game_over)  # reset step after a game end: a fresh stack; after a life: going on
        next_obs = envs.step(fresh[-1])
        game_over = np.where(terminated[t] | truncated[t], truncated[t] | (rng.random(B) < 0.5), game_over)
        observations.append(next_obs)
        buffer.add(obs, np.full(B, t), rewards[t], terminated[t], truncated[t], next_obs)
    return (rewards, terminated, truncated, reset), np.stack(observations), np.stack(fresh)


@pytest.mark.parametrize("padding", ["zero", "first"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_frame_stacks_rebuilt_exactly(padding, channels, prioritized):
    B, S, n_step, gamma, steps = 3, 4, 2, 0.9, 140
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    buffer = cls(B * 50, B, (S * channels, 3, 2), np.uint8, (), np.int64, n_step=n_step, gamma=gamma,
                 frame_stack=S, frame_padding=padding)
    envs = StackingEnvs(B, S, channels, padding, seed=channels)
    stream, observations, fresh = run_stacking(buffer, envs, steps, seed=7)
    assert fresh[1:].any() and (stream[3] & ~fresh[1:]).any()  # game resets and life losses both occur
    targets = reference_targets(*stream, n_step, gamma, 50)
    seen = set()
    rng = np.random.default_rng(0)
    for _ in range(30):
        batch = buffer.sample(128, rng)
        rows, env = absolute_rows(buffer, batch.indices)
        np.testing.assert_array_equal(batch.obs, observations[rows, env])
        expected = np.array([targets[(e, r)] for e, r in zip(env, rows)])
        np.testing.assert_array_equal(batch.next_obs, observations[expected[:, 2].astype(int), env])
        np.testing.assert_allclose(batch.rewards, expected[:, 0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(batch.actions, rows)
        seen.update(zip(env.tolist(), rows.tolist()))
    assert seen == set(targets)


def test_stack_started_mid_episode_waits_for_history():
    B, S = 3, 4
    buffer = ReplayBuffer(B * 30, B, (S, 3, 2), np.uint8, (), np.int64, frame_stack=S)
    envs = StackingEnvs(B, S, 1, "zero", seed=0)
    stream, observations, fresh = run_stacking(buffer, envs, 20, seed=1, warmup=5)
    # the first S - 1 rows would need frames from before the buffer's first row, unless a fresh stack began
    known = np.maximum.accumulate(fresh, axis=0) | (np.arange(21) >= S - 1)[:, None]
    targets = {key: value for key, value in reference_targets(*stream, 1, 0.9, 30).items() if known[key[1], key[0]]}
    assert len(targets) < len(reference_targets(*stream, 1, 0.9, 30))
    batch = buffer.sample(4000, np.random.default_rng(0))
    rows, env = absolute_rows(buffer, batch.indices)
    np.testing.assert_array_equal(batch.obs, observations[rows, env])
    assert set(zip(env.tolist(), rows.tolist())) == set(targets)


def test_wrong_padding_is_an_error():
    B, S = 1, 3
    buffer = ReplayBuffer(20, B, (S, 3, 2), np.uint8, (), np.int64, frame_stack=S, frame_padding="zero")
    envs = StackingEnvs(B, S, 1, "first", seed=0)  # first-frame padding, but the buffer expects zeros
    obs = envs.obs()
    with pytest.raises(ValueError, match="frame_padding"):
        for t in range(3):  # step 0 ends the game; step 1 is the reset step returning a fresh stack
            next_obs = envs.step(np.array([t == 1]))
            buffer.add(obs, np.zeros(B), np.zeros(B), np.array([t == 0]), np.zeros(B, bool), next_obs)
            obs = next_obs


# ---------------------------------------------------------------- footprint

def atari_buffer(capacity, num_envs=1, prioritized=False):
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    return cls(capacity, num_envs, (4, 84, 84), np.uint8, (), np.int64, n_step=3, frame_stack=4)


def test_atari_footprint_under_8_gib():
    per_transition = 84 * 84 + 8 + 4 + 5  # one frame, int64 action, float32 reward, five one-byte flags
    small, large = atari_buffer(1000), atari_buffer(2000)
    assert (large.nbytes - small.nbytes) // 1000 == per_transition == 7073
    assert small.nbytes == (1000 + 4) * per_transition  # + history rows and the pending row
    million = small.nbytes + (1_000_000 - 1000) * per_transition
    assert million == 7_073_028_292 < 8 * 2**30
    # 8 envs: 125 000 rows each, plus 4 rows of history and pending per env
    assert atari_buffer(8 * 1000, 8).nbytes == 8 * (1000 + 4) * per_transition
    # the sum tree adds 16 bytes per leaf (a power of two), 16 MiB at 1M
    assert atari_buffer(1000, prioritized=True).nbytes == small.nbytes + 2 * 1024 * 8


def test_vector_buffer_stores_each_obs_once():
    buffer = ReplayBuffer(100, 4, (17,), np.float32, (6,), np.float32)
    assert buffer.frames.shape == (26, 4, 17)  # no next_obs array: row t + 1 holds it
    assert buffer.nbytes == 26 * 4 * (17 * 4 + 6 * 4 + 4 + 4)


# ---------------------------------------------------------------- sum tree and prioritisation

def test_sum_tree_sampling_proportions():
    priorities = np.array([0.5, 0.0, 3.0, 1.0, 0.0, 0.25, 2.0, 0.0, 1.25, 4.0, 0.0])  # 11 leaves: not a power of two
    tree = SumTree(priorities.size)
    tree.update(np.arange(priorities.size), priorities)
    assert tree.total == pytest.approx(priorities.sum())
    draws = 200_000
    leaves = tree.find(np.random.default_rng(0).random(draws) * tree.total)
    counts = np.bincount(leaves, minlength=priorities.size)
    probs = priorities / priorities.sum()
    np.testing.assert_allclose(counts / draws, probs, atol=0.005)
    nonzero = probs > 0
    expected = draws * probs[nonzero]
    chi2 = ((counts[nonzero] - expected) ** 2 / expected).sum()
    assert chi2 < 27.9  # chi-square, 7 degrees of freedom, p = 0.0002
    assert counts[~nonzero].sum() == 0
    # edges of the mass never land on an empty leaf
    assert priorities[tree.find(np.array([0.0, tree.total, tree.total * (1 + 1e-12)]))].min() > 0


def test_sum_tree_batched_updates():
    rng = np.random.default_rng(1)
    tree = SumTree(1000)
    reference = np.zeros(1000)
    for _ in range(50):
        idx = rng.integers(0, 1000, 64)
        idx[1] = idx[0]  # repeated index in one batch: the last value wins
        values = rng.random(64)
        tree.update(idx, values)
        for i, value in zip(idx, values):
            reference[i] = value
        np.testing.assert_array_equal(tree.leaves, reference)
        assert tree.total == pytest.approx(reference.sum())
    cumulative = np.cumsum(reference)
    values = rng.random(500) * tree.total
    np.testing.assert_array_equal(tree.find(values), np.searchsorted(cumulative, values, side="right"))


def small_prioritized(td_errors, alpha=1.0, eps=0.0):
    buffer = PrioritizedReplayBuffer(16, 1, (2,), np.float32, (), np.int64, alpha=alpha, eps=eps)
    steps = len(td_errors)
    fill_vector(buffer, np.ones((steps, 1), np.float32), np.zeros((steps, 1), bool), np.zeros((steps, 1), bool))
    buffer.update_priorities(np.arange(steps), np.asarray(td_errors))
    return buffer


def test_importance_weights_hand_example():
    buffer = small_prioritized([1.0, -2.0, 3.0, 4.0])  # alpha 1, eps 0: P = 0.1, 0.2, 0.3, 0.4
    # stratified: one draw per quarter of the mass 10; quarters [0, 2.5) [2.5, 5) [5, 7.5) [7.5, 10) hit
    # leaves (0 or 1), (1 or 2), (2 or 3), 3
    batch = buffer.sample(4, np.random.default_rng(0), beta=0.5)
    rows = batch.obs[:, 1].astype(int)
    assert rows[0] in (0, 1) and rows[1] in (1, 2) and rows[2] in (2, 3) and rows[3] == 3
    hand = {0: (4 * 0.1) ** -0.5, 1: (4 * 0.2) ** -0.5, 2: (4 * 0.3) ** -0.5, 3: (4 * 0.4) ** -0.5}
    expected = np.array([hand[r] for r in rows]) / max(hand[r] for r in rows)
    np.testing.assert_allclose(batch.weights, expected, rtol=1e-6)
    assert batch.weights.max() == 1.0
    # beta = 0: no correction
    np.testing.assert_array_equal(buffer.sample(4, np.random.default_rng(0), beta=0.0).weights, 1.0)


def test_priorities_alpha_eps_and_max_for_new():
    buffer = small_prioritized([0.5, 2.0, 0.0], alpha=0.6, eps=0.01)
    np.testing.assert_allclose(buffer.tree.leaves[:3], (np.array([0.5, 2.0, 0.0]) + 0.01) ** 0.6)
    assert buffer.max_priority == pytest.approx(2.01**0.6)
    buffer.add(vector_obs(3, 1), np.array([30]), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), vector_obs(4, 1))
    assert buffer.tree.leaves[3] == pytest.approx(2.01**0.6)  # a new transition gets the largest priority so far
    assert buffer.tree.leaves[4:].sum() == 0  # the pending row and empty rows are not sampleable


def test_prioritized_sampling_follows_priorities():
    td = np.array([0.1, 1.0, 2.0, 0.5, 3.0, 0.0, 1.5])
    buffer = small_prioritized(td)
    probs = td / td.sum()
    rng = np.random.default_rng(3)
    rows = np.concatenate([buffer.sample(1000, rng, beta=0.4).obs[:, 1] for _ in range(200)]).astype(int)
    np.testing.assert_allclose(np.bincount(rows, minlength=td.size) / rows.size, probs, atol=0.003)


def test_prioritized_wraps_and_forgets_left_transitions():
    buffer = PrioritizedReplayBuffer(2 * 10, 2, (2,), np.float32, (), np.int64, n_step=2, gamma=0.9)
    rewards, terminated, truncated, reset = scripted_stream(2, 47, seed=5)
    fill_vector(buffer, rewards, terminated, truncated)
    targets = reference_targets(rewards, terminated, truncated, reset, 2, 0.9, 10)
    ready = set(zip(*[a.tolist() for a in absolute_rows(buffer, np.flatnonzero(buffer.tree.leaves))][::-1]))
    assert ready == set(targets)
    assert buffer.tree.total == pytest.approx(len(targets))  # all at the initial max priority 1


# ---------------------------------------------------------------- checkpoints

def roundtrip(state, tmp_path):
    np.savez(tmp_path / "replay.npz", **state)
    with np.load(tmp_path / "replay.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("steps", [30, 130])  # before and after the ring wrapped
def test_state_dict_roundtrip_gives_identical_samples(tmp_path, prioritized, steps):
    B, S = 2, 4
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer

    def make():
        return cls(B * 40, B, (S, 3, 2), np.uint8, (), np.int64, n_step=3, gamma=0.9, frame_stack=S)

    buffer = make()
    envs = StackingEnvs(B, S, 1, "zero", seed=0)
    run_stacking(buffer, envs, steps, seed=2)
    if prioritized:
        batch = buffer.sample(32, np.random.default_rng(9), beta=0.4)
        buffer.update_priorities(batch.indices, np.random.default_rng(9).normal(size=32))
    state = buffer.state_dict()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    restored = make()
    restored.load_state_dict(roundtrip(state, tmp_path))
    kwargs = {"beta": 0.5} if prioritized else {}
    for a, b in zip(buffer.sample(64, np.random.default_rng(4), **kwargs), restored.sample(64, np.random.default_rng(4), **kwargs)):
        np.testing.assert_array_equal(a, b)
    # both go on identically
    obs = envs.obs()
    for t in range(15):
        next_obs = envs.step(np.zeros(B, bool))
        for target in (buffer, restored):
            target.add(obs, np.full(B, t), np.ones(B), np.array([t == 5, False]), np.zeros(B, bool), next_obs)
        obs = next_obs
    for a, b in zip(buffer.sample(64, np.random.default_rng(5), **kwargs), restored.sample(64, np.random.default_rng(5), **kwargs)):
        np.testing.assert_array_equal(a, b)


def test_load_state_dict_refuses_foreign_state_and_changes_nothing(tmp_path):
    buffer = ReplayBuffer(40, 2, (2,), np.float32, (), np.int64, n_step=3)
    rewards, terminated, truncated, _ = scripted_stream(2, 12, seed=0)
    fill_vector(buffer, rewards, terminated, truncated)
    state = roundtrip(buffer.state_dict(), tmp_path)
    other = ReplayBuffer(40, 2, (2,), np.float32, (), np.int64, n_step=2)
    with pytest.raises(ValueError, match="n_step"):
        other.load_state_dict(state)
    assert other.step == 0 and len(other) == 0
    same = ReplayBuffer(40, 2, (2,), np.float32, (), np.int64, n_step=3)
    with pytest.raises(ValueError, match="rewards"):
        same.load_state_dict({**state, "rewards": state["rewards"].astype(np.float64)})
    with pytest.raises(ValueError, match="lacks ready"):
        same.load_state_dict({k: v for k, v in state.items() if k != "ready"})
    assert same.step == 0 and not same.frames.any()
    with pytest.raises(ValueError, match="priorities"):
        PrioritizedReplayBuffer(40, 2, (2,), np.float32, (), np.int64, n_step=3).load_state_dict(state)


def test_sample_from_empty_buffer_is_an_error():
    buffer = ReplayBuffer(40, 2, (2,), np.float32, (), np.int64, n_step=3)
    with pytest.raises(ValueError, match="no complete transition"):
        buffer.sample(4, np.random.default_rng(0))
