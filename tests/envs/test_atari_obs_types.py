"""`env.atari.obs_type` ram and objects: their spaces, what they hold (the RAM ALE reports after each step; OCAtari's
objects, checked against OCAtari's own env), that they change nothing else (the same games, life losses, clipped
rewards and statistics as pixels under one seed), Gymnasium's `check_env`, exact resume of RAM runs, a few training
iterations on each, and the config errors.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import SyncVectorEnv

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import AtariConfig, EnvConfig
from rlfoundry.envs import build, find_wrapper, probe_spaces, register_optional_families
from rlfoundry.envs.atari import make_env
from rlfoundry.envs.state import capture, restore

pytest.importorskip("ale_py")
register_optional_families()

# No randomness and no life-loss reset steps: the emulator runs exactly the actions given, so a plain AtariEnv (or
# OCAtari's env) given the same actions is in the same state after every step.
PLAIN = {"noop_max": 0, "fire_reset": False, "repeat_action_probability": 0.0, "episodic_life": False}




def sub_envs(envs) -> list:
    return find_wrapper(envs, SyncVectorEnv).envs


def random_steps(envs, steps: int, seed: int):
    envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.integers(0, envs.single_action_space.n, size=envs.num_envs)
        yield actions, envs.step(actions)


# ---------------------------------------------------------------- spaces


def test_ram_space_is_uint8_bytes_stacked_frame_major(build):
    envs, spec = build(obs_type="ram")
    assert spec.observation_space == spaces.Box(0, 255, (4 * 128,), np.uint8)
    assert spec.obs_dtype == np.uint8  # stays uint8 until the network, as frames do
    assert spec.vectorization == "atari" and envs.single_observation_space == spec.observation_space
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 512) and obs.dtype == np.uint8
    assert not obs[:, :384].any() and obs[:, 384:].any()  # zeros before the reset snapshot, as frames
    _, spec = build(obs_type="ram", frame_stack=1)
    assert spec.obs_shape == (128,)


def test_objects_space_is_float32_slots_of_four(build):
    pytest.importorskip("ocatari")
    envs, spec = build("ALE/Pong-v5", obs_type="objects")
    slots = 3  # Pong: the player's paddle, the ball, the enemy's paddle
    assert spec.observation_space == spaces.Box(-np.inf, np.inf, (4 * slots * 4,), np.float32)
    assert spec.obs_dtype == np.float32
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 48) and obs.dtype == np.float32
    assert not obs[:, :36].any()
    for _, (obs, *_) in random_steps(envs, 60, seed=0):
        assert obs.dtype == np.float32 and np.isfinite(obs).all()
    boxes = obs[:, -12:].reshape(2, slots, 4)
    np.testing.assert_array_equal(boxes[:, [0, 2], 2:], [[[4, 15]] * 2] * 2)  # both paddles, 4x15 pixels


@pytest.mark.parametrize("obs_type", ["ram", "objects"])
def test_probe_spaces_match_make_and_default_to_the_single_backend(build, obs_type):
    if obs_type == "objects":
        pytest.importorskip("ocatari")
    cfg = EnvConfig(id="ALE/Pong-v5", atari={"obs_type": obs_type, "frame_stack": 2})
    assert cfg.atari.backend == "single"  # AtariVectorEnv observes frames only
    _, spec = build("ALE/Pong-v5", obs_type=obs_type, frame_stack=2)
    assert probe_spaces("ALE/Pong-v5", env_cfg=cfg) == (spec.observation_space, spec.action_space)
    assert AtariConfig(obs_type=obs_type, backend="vector").backend == "vector"  # explicit: kept, then refused


# ---------------------------------------------------------------- what they hold


def test_ram_is_what_ale_reports_after_the_step(build):
    """The newest 128 bytes are the emulator's RAM after the step (its last skipped frame), the older ones the
    previous steps' (or zeros before the reset)."""
    envs, _ = build(num_envs=2, frame_stack=3, obs_type="ram")
    subs = sub_envs(envs)
    previous, _ = envs.reset(seed=1)
    for _, (obs, _, _terminated, _truncated, _) in random_steps(envs, 80, seed=1):
        for i, sub in enumerate(subs):
            np.testing.assert_array_equal(obs[i, -128:], sub.unwrapped.ale.getRAM())
        np.testing.assert_array_equal(obs[:, :-128], previous[:, 128:])  # no game reset in 80 Breakout steps
        previous = obs


@pytest.mark.parametrize("frame_skip", [1, 4])
def test_ram_follows_a_plain_ale_env_frame_skip_included(build, frame_skip):
    """Against ALE's own AtariEnv with the same frame skip (no sticky actions, no no-ops, no FIRE): the same RAM."""
    envs, _ = build("ALE/Pong-v5", num_envs=1, frame_stack=1, frame_skip=frame_skip, obs_type="ram", **PLAIN)
    plain = gym.make("ALE/Pong-v5", obs_type="ram", frameskip=frame_skip, repeat_action_probability=0.0)
    try:
        ours, _ = envs.reset(seed=3)
        theirs, _ = plain.reset(seed=3)
        np.testing.assert_array_equal(ours[0], theirs)
        rng = np.random.default_rng(3)
        for _ in range(100):
            action = int(rng.integers(0, 6))
            ours, *_ = envs.step(np.array([action]))
            theirs, *_ = plain.step(action)
            np.testing.assert_array_equal(ours[0], theirs)
    finally:
        plain.close()


@pytest.mark.parametrize("game", ["Pong", "Breakout"])
def test_objects_match_ocatari(build, game):
    """Step for step, our vector holds (x, y, w, h) of each entry of OCAtari's object list, and its (x, y) columns are
    OCAtari's own object observation (`obs_mode="obj"`, positions of the same objects in the same order)."""
    ocatari_core = pytest.importorskip("ocatari.core")
    envs, spec = build(f"ALE/{game}-v5", num_envs=1, frame_stack=1, obs_type="objects", **PLAIN)
    theirs = ocatari_core.OCAtari(f"ALE/{game}-v5", mode="ram", hud=False, obs_mode="obj", frameskip=4,
                                  repeat_action_probability=0.0)

    def boxes() -> np.ndarray:
        return np.array([obj.xywh if obj else (0, 0, 0, 0) for obj in theirs.objects], np.float32)

    try:
        ours, _ = envs.reset(seed=5)
        theirs.reset(seed=5)
        np.testing.assert_array_equal(ours[0].reshape(-1, 4), boxes())
        rng = np.random.default_rng(5)
        moved = 0
        for _ in range(120):
            action = int(rng.integers(0, spec.action_space.n))
            before = ours
            ours, _, terminated, truncated, _ = envs.step(np.array([action]))
            their_obs, *_ = theirs.step(action)
            np.testing.assert_array_equal(ours[0].reshape(-1, 4), boxes())
            np.testing.assert_array_equal(ours[0].reshape(-1, 4)[:, :2], np.reshape(their_obs[-1], (-1, 2)))
            moved += not np.array_equal(before, ours)
            if terminated[0] or truncated[0]:
                break
        assert moved > 10  # objects moved: not a trivially constant vector
    finally:
        theirs.close()


def test_objects_survive_ocataris_numpy_1_arithmetic():
    """OCAtari 2.2.1 computes with RAM bytes as NumPy 1 did; given uint8 RAM under NumPy 2, Seaquest's extraction
    raises OverflowError within a few dozen steps. Ours gives it int64 RAM and plays on."""
    pytest.importorskip("ocatari")
    env = make_env("ALE/Seaquest-v5", AtariConfig(obs_type="objects", frame_stack=1))
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(300):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        assert np.isfinite(obs).all()
    finally:
        env.close()


# ---------------------------------------------------------------- nothing else changes


def trajectory(envs, steps: int, seed: int) -> list[tuple]:
    """All that the learner and the statistics see of random play, but the observations."""
    out = []
    for actions, (_, rewards, terminated, truncated, info) in random_steps(envs, steps, seed):
        games = (info["_episode"], info["episode"]["r"], info["episode"]["l"]) if "_episode" in info else ()
        out.append((actions, rewards, terminated, truncated, info["lives"], info["episode_frame_number"], *games))
    return out


def test_ram_and_objects_play_the_same_games_as_pixels(build):
    """One seed, the same actions, sticky actions and no-ops on: the same rewards (clipped), life-loss terminations,
    truncations (a short time limit) and whole-game statistics whatever the observation."""
    pytest.importorskip("ocatari")
    options = {"backend": "single", "max_episode_frames": 400}  # 100 steps at frame_skip 4
    runs = {obs_type: trajectory(build(num_envs=2, obs_type=obs_type, **options)[0], 300, seed=2)
            for obs_type in ("pixels", "ram", "objects")}
    pixels = runs["pixels"]
    for obs_type in ("ram", "objects"):
        assert len(runs[obs_type]) == len(pixels)
        for t, (a, b) in enumerate(zip(pixels, runs[obs_type])):
            assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b)), f"{obs_type}: step {t}"
    terminations = sum(int(row[2].sum()) for row in pixels)
    truncations = sum(int(row[3].sum()) for row in pixels)
    games = sum(int(row[6].sum()) for row in pixels if len(row) > 6)
    assert truncations >= 2 and terminations >= 10 and games >= 2  # time limits, life losses, whole games
    assert {float(r) for row in pixels for r in row[1]} <= {0.0, 1.0}  # clipped


def test_ram_runs_restore_exactly(build):
    envs, _ = build(num_envs=2, obs_type="ram")
    for _ in random_steps(envs, 50, seed=4):
        pass
    state, arrays, why = capture(envs)
    assert why is None
    actions = np.random.default_rng(9).integers(0, 4, size=(120, 2))
    first = [envs.step(a)[:4] for a in actions]
    restore(envs, state, arrays)
    again = [envs.step(a)[:4] for a in actions]
    for x, y in zip(first, again):
        assert all(np.array_equal(u, v) for u, v in zip(x, y))


def test_ram_envs_render_for_videos():
    envs, _ = build(EnvConfig(id="ALE/Breakout-v5", num_envs=1, atari={"obs_type": "ram"}), render_mode="rgb_array")
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (1, 512) and envs.render()[0].shape == (210, 160, 3)
    finally:
        envs.close()


# ---------------------------------------------------------------- Gymnasium's checker and env.spec


@pytest.mark.filterwarnings("ignore:.*infinity")  # objects: coordinates have no bounds (rlfoundry.envs.ocatari)
@pytest.mark.parametrize("obs_type", ["ram", "objects"])
def test_single_backend_wrapper_passes_check_env(obs_type):
    if obs_type == "objects":
        pytest.importorskip("ocatari")
    env = make_env("ALE/Pong-v5", AtariConfig(obs_type=obs_type, frame_stack=2))
    try:
        with pytest.warns(UserWarning, match="different from the unwrapped"):  # checked as the wrapper it is
            check_env(env, skip_render_check=True)
        rebuilt = gym.make(env.spec)
        assert rebuilt.observation_space == env.observation_space
        first, _ = env.reset(seed=4)
        again, _ = rebuilt.reset(seed=4)
        np.testing.assert_array_equal(first, again)
        rebuilt.close()
    finally:
        env.close()


# ---------------------------------------------------------------- training


@pytest.mark.parametrize(("variant", "obs_type"), [("ppo", "ram"), ("ppo", "objects"), ("dqn", "ram")])
def test_a_few_iterations_train(tmp_path, variant, obs_type):
    """PPO (and DQN, whose replay stores each stacked RAM vector once) on vectors through an MLP. The ALE presets'
    networks are CNNs, so the run names its MLP."""
    if obs_type == "objects":
        pytest.importorskip("ocatari")
    from rlfoundry.run.smoke import smoke

    network = ["network.encoder=mlp", "network.hidden_sizes=[32,32]"]
    result = smoke("ALE/Pong-v5", variant, tmp_path / "run", [f"env.atari.obs_type={obs_type}", *network])
    assert result.ok, result.detail


# ---------------------------------------------------------------- config errors


@pytest.mark.parametrize("obs_type", ["ram", "objects"])
def test_vector_backend_is_refused_naming_the_single_one(obs_type):
    with pytest.raises(ConfigError, match=r"env\.atari\.backend = vector: .*allowed: single"):
        build(EnvConfig(id="ALE/Pong-v5", num_envs=1, atari={"obs_type": obs_type, "backend": "vector"}))


@pytest.mark.parametrize(("option", "match"), [({"img_size": 64}, "img_size = 64"),
                                               ({"grayscale": False}, "grayscale = false"),
                                               ({"max_pool": False}, "max_pool = false")])
def test_frame_options_with_ram_are_errors(option, match):
    with pytest.raises(ConfigError, match=rf"env\.atari\.{match}: a frame option, meaningless for obs_type ram"):
        probe_spaces("ALE/Pong-v5", env_cfg=EnvConfig(id="ALE/Pong-v5", atari={"obs_type": "ram", **option}))


@pytest.mark.parametrize(("env_id", "match"), [
    ("ALE/Surround-v5", r"no RAM object extraction for ALE/Surround-v5; supported games .*Pong"),
    ("ALE/Adventure-v5", "no RAM object extraction"),  # listed by OCAtari, but without a RAM extraction module
    ("ALE/AirRaid-v5", r"fails on ALE/AirRaid-v5 \(.*\); use obs_type pixels or ram"),
])
def test_games_ocatari_cannot_read_are_config_errors(env_id, match):
    pytest.importorskip("ocatari")
    with pytest.raises(ConfigError, match=match) as error:
        build(EnvConfig(id=env_id, num_envs=1, atari={"obs_type": "objects"}))
    assert "\n" not in str(error.value)


def test_missing_ocatari_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ocatari.core", None)  # import ocatari.core now raises ImportError
    with pytest.raises(ConfigError, match=r"needs the ocatari package .*pip install 'rlfoundry\[ocatari\]' and then "
                                          r"pip install --no-deps ocatari") as error:
        build(EnvConfig(id="ALE/Pong-v5", num_envs=1, atari={"obs_type": "objects"}))
    assert "\n" not in str(error.value)


def test_obs_type_loads_from_overrides():
    from rlfoundry.experiment.load import load_config

    cfg = load_config("ALE/Pong-v5:ppo", ["env.atari.obs_type=ram", "network.encoder=mlp"])
    assert cfg.env.atari.obs_type == "ram" and cfg.env.atari.backend == "single"
    with pytest.raises(ConfigError, match="obs_type"):
        load_config("ALE/Pong-v5:ppo", ["env.atari.obs_type=screen"])
    with pytest.raises(ConfigError, match=r"env\.atari\.backend = vector"):
        load_config("ALE/Pong-v5:ppo", ["env.atari.obs_type=ram", "env.atari.backend=vector"])
