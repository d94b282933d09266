"""Rendering without a display: a MuJoCo env observed from pixels (or filmed) on a machine with no display and no
`MUJOCO_GL` renders through EGL or OSMesa instead of failing inside MuJoCo; a user's MUJOCO_GL is kept; the
Gymnasium-Robotics mazes can be observed from pixels, and the families without frames say so."""

import os
import subprocess
import sys

import pytest

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import check_pixels
from rlfoundry.envs.wrappers import headless_gl

FRAMES = """
import os
import rlfoundry.envs
envs = rlfoundry.envs.make({env_id!r}, 1, pixels={{"enabled": True, "img_size": 32}}, normalize_obs=False)
obs, _ = envs.reset(seed=1)
obs, *_ = envs.step(envs.action_space.sample())
print(obs.shape, obs.dtype, int(obs.std() > 0), os.environ.get("MUJOCO_GL"))
"""


def frames_of(env_id: str, **environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([sys.executable, "-c", FRAMES.format(env_id=env_id)], env={**env, **environ},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


needs_gl = pytest.mark.skipif(headless_gl() is None, reason="neither libEGL nor libOSMesa is installed")


@needs_gl
@pytest.mark.parametrize("env_id", ["Hopper-v5", "PointMaze_UMazeDense-v3"])
def test_a_mujoco_env_from_pixels_renders_without_a_display(env_id):
    if env_id.startswith("PointMaze"):
        pytest.importorskip("gymnasium_robotics")
    assert frames_of(env_id) == f"(1, 3, 32, 32) uint8 1 {headless_gl()}"


@needs_gl
def test_the_users_mujoco_gl_is_kept():
    assert frames_of("Hopper-v5", MUJOCO_GL=headless_gl()).endswith(headless_gl())
    failed = subprocess.run([sys.executable, "-c", FRAMES.format(env_id="Hopper-v5")],
                            env={**os.environ, "MUJOCO_GL": "bogus"}, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "bogus" in failed.stderr


@pytest.mark.parametrize("env_id, family", [("popgym-RepeatPreviousEasy-v0", "POPGym"), ("brax/ant", "Brax")])
def test_a_family_without_frames_refuses_pixels_naming_itself(env_id, family):
    with pytest.raises(ConfigError, match=f"env.pixels.enabled = true: {env_id} is a {family} id, whose envs give no"):
        check_pixels(EnvConfig(id=env_id, pixels={"enabled": True}))
