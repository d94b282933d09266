"""Environment construction: one `build()` for every family, returning a Gymnasium `VectorEnv` and the `EnvInfo` an
agent is built for; `make()` returns the same vector env in one call, for a training loop of one's own.

All vector envs here use Gymnasium's NEXT_STEP autoreset: the step that ends an episode returns the
episode's true final observation, and the following step resets that sub-env (its action is ignored,
its reward is 0). Collection relies on that: the final observation sits in the next row of the
rollout, so bootstrapping on truncation needs no extra forward pass, and the reset row is dropped
from learning (see `rlfoundry.buffers.rollout`).
"""

from rlfoundry.envs.factory import (
    ASYNC_STEP_SECONDS,
    FAMILIES,
    EnvInfo,
    Family,
    build,
    check_obs_options,
    check_pixels,
    check_renders,
    check_spaces,
    choose_vectorization,
    copy_obs_stats,
    declared_render_modes,
    env_fn,
    env_seed,
    family_of,
    family_vectorization,
    find_wrapper,
    frame_family,
    frame_stack,
    is_minigrid,
    load_family,
    make,
    make_kwargs,
    make_single,
    obs_stats,
    probe_spaces,
    register_optional_families,
    set_obs_stats,
    single_env_option,
    size_option,
)
from rlfoundry.envs.wrappers import is_image_space

__all__ = [
    "ASYNC_STEP_SECONDS",
    "build",
    "check_obs_options",
    "check_pixels",
    "check_renders",
    "check_spaces",
    "choose_vectorization",
    "copy_obs_stats",
    "declared_render_modes",
    "env_fn",
    "env_seed",
    "EnvInfo",
    "FAMILIES",
    "Family",
    "family_of",
    "family_vectorization",
    "find_wrapper",
    "frame_family",
    "frame_stack",
    "is_image_space",
    "is_minigrid",
    "load_family",
    "make",
    "make_kwargs",
    "make_single",
    "obs_stats",
    "probe_spaces",
    "register_optional_families",
    "set_obs_stats",
    "single_env_option",
    "size_option",
]
