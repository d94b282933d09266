"""DeepMind Control Suite ids (`rlfoundry.envs.dm_control`): the flattened observation's order, rendered frames and
their errors, seeding, episode ends under action repeat, Gymnasium's checker, exact env state, a short PPO run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from rollouts import rollout  # tests/envs/rollouts.py

from rlfoundry.config import cores
from rlfoundry.config.cores import SHARE_VARIABLE
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build as build_envs
from rlfoundry.envs import env_fn, load_family, make_kwargs
from rlfoundry.envs.state import capture, restore
from rlfoundry.envs.wrappers import ActionRepeat

dmc = pytest.importorskip("rlfoundry.envs.dm_control", exc_type=ImportError)

CARTPOLE, WALKER = "dm_control/cartpole-swingup-v0", "dm_control/walker-walk-v0"


@pytest.fixture
def build():
    """One env (`single`) or a vector env (`vector`) from an EnvConfig; closes them all afterwards."""
    built = []

    def single(env_id=CARTPOLE, **cfg_kwargs) -> gym.Env:
        cfg = EnvConfig(id=env_id, **cfg_kwargs)
        env = env_fn(env_id, make_kwargs(cfg), cfg)()
        built.append(env)
        return env

    def vector(env_id=CARTPOLE, num_envs=2, **cfg_kwargs):
        envs, spec = build_envs(EnvConfig(id=env_id, num_envs=num_envs, vectorization="sync", **cfg_kwargs))
        built.append(envs)
        return envs, spec

    single.vector = vector
    yield single
    for env in built:
        env.close()


def test_importing_the_family_registers_its_ids():
    module = load_family(CARTPOLE)
    assert module is dmc and callable(module.make_env)
    for env_id in (CARTPOLE, WALKER, "dm_control/cheetah-run-v0"):
        assert gym.spec(env_id).id == env_id


def test_every_id_has_a_string_entry_point_of_ours_that_builds_what_shimmy_builds():
    """shimmy's partials cannot go through `EnvSpec.to_json`; ours are strings, and build shimmy's env class around
    the same dm_control env (same spaces, same first observation)."""
    from shimmy.dm_control_compatibility import DmControlCompatibilityV0
    from shimmy.registration import DM_CONTROL_MANIPULATION_ENVS, DM_CONTROL_SUITE_ENVS

    ids = [env_id for env_id in gym.registry if env_id.startswith("dm_control/")]
    assert len(ids) == len(DM_CONTROL_SUITE_ENVS) + len(DM_CONTROL_MANIPULATION_ENVS) + 9 + 1  # 9 locomotion
    kinds = {gym.spec(env_id).entry_point for env_id in ids}
    assert kinds == {f"rlfoundry.envs.dm_control:{name}" for name in ("SuiteTask", "ManipulationTask",
                                                                       "LocomotionTask")} | {
        gym.spec("dm_control/compatibility-env-v0").entry_point}  # wraps an env object handed to it: shimmy's
    assert gym.spec(CARTPOLE).kwargs == {"domain_name": "cartpole", "task_name": "swingup"}
    assert gym.spec("dm_control/RodentTwoTouch-v0").kwargs == {"example": "basic_rodent_2020.rodent_two_touch"}
    assert gym.spec("dm_control/RodentTwoTouch-v0").nondeterministic  # shimmy's registration, kept

    from dm_control import suite

    theirs = DmControlCompatibilityV0(suite.load("cartpole", "swingup"))
    ours = gym.make(gym.envs.registration.EnvSpec.from_json(gym.spec(CARTPOLE).to_json()))
    try:
        assert isinstance(ours.unwrapped, DmControlCompatibilityV0)
        assert ours.observation_space == theirs.observation_space and ours.action_space == theirs.action_space
        first, again = ours.reset(seed=3)[0], theirs.reset(seed=3)[0]
        assert first.keys() == again.keys()
        for key in first:
            np.testing.assert_array_equal(first[key], again[key])
    finally:
        ours.close()
        theirs.close()


def test_observation_is_flattened_in_the_tasks_order(build):
    """Walker's task lists orientations (14), height (a scalar: 1 entry), velocity (9); shimmy's Dict space sorts
    them (height first), which is the order a flattening by the space would take."""
    env = build(WALKER)
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (24,), np.float64)
    base = env.unwrapped
    assert list(base.observation_space.spaces) == ["height", "orientations", "velocity"]
    assert env.keys == ("orientations", "height", "velocity")
    obs, _ = env.reset(seed=0)
    physics = base.physics
    assert obs[14] == physics.torso_height()
    np.testing.assert_array_equal(obs[:14], physics.orientations())
    np.testing.assert_array_equal(obs[15:], physics.velocity())
    obs, *_ = env.step(env.action_space.sample())
    expected = base.task.get_observation(physics)  # the dict of this step, in the task's order
    np.testing.assert_array_equal(obs, np.concatenate([np.ravel(v) for v in expected.values()]))


@pytest.mark.parametrize("img_size, camera, shape", [(64, 0, (3, 64, 64)), ([48, 80], "lookatcart", (3, 48, 80)),
                                                     (32, -1, (3, 32, 32))])
def test_pixels_are_channel_first_uint8_frames(build, img_size, camera, shape):
    env = build(dm_control={"pixels": True, "img_size": img_size, "camera": camera})
    assert env.observation_space == gym.spaces.Box(0, 255, shape, np.uint8)
    obs, info = env.reset(seed=0)
    assert obs.shape == shape and obs.dtype == np.uint8 and obs.std() > 0  # a picture, not a blank frame
    assert "timestep.step_type" not in info
    direct = env.unwrapped.physics.render(*shape[1:], camera_id=env.camera_id)
    np.testing.assert_array_equal(obs, direct.transpose(2, 0, 1))


def test_videos_are_rendered_from_the_configured_camera(build):
    env = build(kwargs={"render_mode": "rgb_array"}, dm_control={"camera": "lookatcart"})
    assert env.unwrapped.render_kwargs == {"camera_id": 1}  # shimmy's default would be the free camera (-1)
    env.reset(seed=0)
    assert env.render().shape == (240, 320, 3)


def test_pixels_render_only_the_frames_the_agent_sees(build):
    """Under action repeat k a frame is rendered once per agent step (not k times), and it is the current one."""
    repeated = build(action_repeat=4, dm_control={"pixels": True, "img_size": 32})
    every = build(dm_control={"pixels": True, "img_size": 32})
    pixels = repeated.env
    assert isinstance(repeated, ActionRepeat) and pixels.render_every == 4
    renders = []
    render = pixels.render_frame
    pixels.render_frame = lambda: renders.append(1) or render()
    obs_a, _ = repeated.reset(seed=3)
    obs_b, _ = every.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        action = rng.uniform(-1, 1, (1,))
        obs_a, *_ = repeated.step(action)
        for _ in range(4):
            obs_b, *_ = every.step(action)
        np.testing.assert_array_equal(obs_a, obs_b)
    assert len(renders) == 1 + 5


def test_camera_and_size_errors_are_config_errors(build):
    with pytest.raises(ConfigError, match=r"env\.dm_control\.camera = 'top'.*fixed, lookatcart"):
        build(dm_control={"pixels": True, "camera": "top"})
    with pytest.raises(ConfigError, match=r"env\.dm_control\.camera = 2: .*out of range.*-1 \(free camera\) to 1"):
        build(dm_control={"pixels": True, "camera": 2})
    with pytest.raises(ConfigError, match=r"env\.dm_control\.img_size = \[1000, 1000\]: .* at most 480x640"):
        build(dm_control={"pixels": True, "img_size": 1000})  # over the model's 640x480 offscreen buffer


def test_pixels_never_render_in_a_process_forked_after_rendering(build, monkeypatch):
    """A worker forked from a process that has rendered would hang in OpenGL: it fails at once, and pixel envs ask
    their async workers to be spawned instead (vectors fork safely)."""
    monkeypatch.setattr(dmc, "_RENDERING_PID", os.getpid() + 1)  # as seen from a forked child
    with pytest.raises(ConfigError, match=r"env\.vectorization = async: .*forked from one that has rendered"):
        build(dm_control={"pixels": True, "img_size": 32})
    assert dmc.async_context(EnvConfig(id=CARTPOLE, dm_control={"pixels": True})) == "spawn"
    assert dmc.async_context(EnvConfig(id=CARTPOLE)) is None


def test_pixel_envs_step_in_spawned_worker_processes(monkeypatch):
    monkeypatch.setenv(SHARE_VARIABLE, "1")  # auto: processes where the run has cores of its own (2 on CI)
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    envs, spec = build_envs(EnvConfig(id=CARTPOLE, num_envs=2, dm_control={"pixels": True, "img_size": 32}))
    assert spec.vectorization == "async" and envs.unwrapped.context == "spawn"  # auto: one render costs ~18 ms
    obs, _ = envs.reset(seed=0)
    obs2 = envs.step(np.zeros((envs.num_envs, 1), np.float32))[0]
    envs.close()
    assert obs.shape == obs2.shape == (2, 3, 32, 32) and obs.dtype == np.uint8 and obs.any()


def test_options_that_do_not_fit_are_refused(build):
    with pytest.raises(ConfigError, match=r"env\.dm_control = \{'pixels': True\}: Pendulum-v1 is not a dm_control id"):
        build.vector("Pendulum-v1", dm_control={"pixels": True})
    with pytest.raises(ConfigError, match=r"env\.normalize_obs = true:.*uint8 images"):
        build.vector(normalize_obs=True, dm_control={"pixels": True, "img_size": 32})


def test_same_seed_same_observations(build):
    envs, _ = build.vector()
    first, again, other = rollout(envs, seed=7), rollout(envs, seed=7), rollout(envs, seed=8)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], other[0])  # the initial states are drawn from the seed
    assert not np.array_equal(first[0, 0], first[0, 1])  # sub-env i is seeded with seed + i


@pytest.mark.parametrize("repeat, length", [(1, 1000), (8, 125), (3, 334)])
def test_episodes_end_by_truncation_at_1000_control_steps(build, repeat, length):
    """dm_control's time limit ends an episode with discount 1: truncated, not terminated; `episode` counts agent
    steps (the last one of a repeat that does not divide 1000 is cut short) and sums every control step's reward."""
    envs, _ = build.vector(num_envs=1, action_repeat=repeat)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    total = 0.0
    for step in range(1, length + 1):
        _, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        total += float(reward[0])
        assert not terminated[0] and truncated[0] == (step == length) and ("episode" in info) == (step == length)
    assert info["episode"]["l"][0] == length and info["episode"]["r"][0] == pytest.approx(total, rel=1e-6)
    assert envs.unwrapped.envs[0].unwrapped._env._step_count == 1000


@pytest.mark.parametrize("name, options", [("vector", {}), ("vector, repeat 2", {"action_repeat": 2}),
                                           ("pixels", {"dm_control": {"pixels": True, "img_size": 32}}),
                                           ("pixels, repeat 8", {"action_repeat": 8,
                                                                 "dm_control": {"pixels": True, "img_size": 32}})])
def test_check_env_passes(build, name, options):
    env = build(**options)
    check_env(env, skip_render_check=True)
    assert env.spec is not None and env.spec.id == CARTPOLE


@pytest.mark.parametrize("env_id, options", [(WALKER, {}), (CARTPOLE, {"action_repeat": 4, "dm_control":
                                                                       {"pixels": True, "img_size": 32}})])
def test_capture_step_restore_step_repeats_exactly(build, env_id, options):
    """One env rewound to a captured state replays the same observations, rewards and flags for the same actions."""
    env = build(env_id, **options)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(12):
        env.step(rng.uniform(-1, 1, env.action_space.shape))
    envs = gym.vector.SyncVectorEnv([lambda: env])
    state, arrays, why = capture(envs)
    assert why is None and '"_physics": {"physics": ' in json.dumps(state) and '"random_state"' in json.dumps(state)
    actions = rng.uniform(-1, 1, (25, *env.action_space.shape))
    first = [env.step(a)[:4] for a in actions]
    restore(envs, json.loads(json.dumps(state)), arrays)
    second = [env.step(a)[:4] for a in actions]
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_restored_envs_continue_exactly(build):
    """A fresh vector env restored from a captured one (as on resume) continues as the original, across an episode
    end (125 agent steps at repeat 8) and the autoreset that follows, whose initial state the task's RNG draws."""
    a, _ = build.vector(action_repeat=8)
    b, _ = build.vector(action_repeat=8)
    a.reset(seed=5)
    a.action_space.seed(1)
    for _ in range(100):
        a.step(a.action_space.sample())
    state, arrays, why = capture(a)
    assert why is None
    restore(b, json.loads(json.dumps(state)), {k: np.array(v) for k, v in arrays.items()})
    ended = False
    for _ in range(60):
        action = a.action_space.sample()
        (oa, ra, ta, ua, ia), (ob, rb, tb, ub, _) = a.step(action), b.step(action)
        for x, y in ((oa, ob), (ra, rb), (ta, tb), (ua, ub)):
            np.testing.assert_array_equal(x, y)
        ended |= "episode" in ia
    assert ended

SCRIPT = """
import os, sys
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build as build_envs
try:
    build_envs(EnvConfig(id="dm_control/cartpole-swingup-v0", num_envs=1, dm_control={"pixels": True}))
except ConfigError as exc:
    print("ConfigError:", exc)
print("MUJOCO_GL =", os.environ.get("MUJOCO_GL"))
"""


@pytest.mark.parametrize("gl, expected", [("disable", "MuJoCo cannot render here with MUJOCO_GL=disable"),
                                          ("bogus", "MUJOCO_GL = 'bogus': Environment variable MUJOCO_GL must be")])
def test_a_backend_that_cannot_render_is_one_config_error(tmp_path, gl, expected):
    """The user's MUJOCO_GL is kept; one that cannot render (or that dm_control refuses) is a ConfigError naming it."""
    env = {**os.environ, "MUJOCO_GL": gl}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ConfigError: ") and expected in lines[0], proc.stdout
    assert lines[-1] == f"MUJOCO_GL = {gl}"


def test_composer_ids_build_and_say_why_their_state_is_not_captured(build):
    envs, spec = build.vector("dm_control/stack_2_bricks_features-v0", num_envs=1)
    assert spec.obs_shape == (68,)
    envs.reset(seed=0)
    envs.step(envs.action_space.sample())
    state, arrays, why = capture(envs)
    assert state is None and arrays == {} and "composer environments" in why
