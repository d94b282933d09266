"""Atari: `ALE/<Game>-v5` ids with the preprocessing of `env.atari`, on one of two backends (`env.atari.backend`).

`vector` is ale_py's `AtariVectorEnv`, whose C++ threads step and preprocess the emulators: the fastest, but without
a state API or rendering. `single` is a SyncVectorEnv of Gymnasium ALE envs, each preprocessed by `AtariFrames`, a
Python copy of ale-py 0.12's C++ per-env loop (`src/ale/vector/preprocessed_env.cpp`), whose state can be captured
and which renders. `AtariEpisodes` does episodic life and reward clipping here rather than in ALE, whose own
episodic life restarts the whole game at every life loss. docs/environments/atari.md describes all three.

Closing an env frees its emulators at once (`free_emulators`) rather than when the env object is collected: a run's
agent sits in reference cycles that hold its envs, and the `rlfoundry` command freezes the garbage collector on its
way out, so an emulator left to the env's collection outlives the interpreter, and ale_py's nanobind bindings
print "nanobind: leaked N instances" for each one at exit.
"""

from __future__ import annotations

import difflib
import json
import time
from functools import partial
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.wrappers import vector as vw

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import AtariConfig
from rlfoundry.envs.wrappers import ChannelsFirst

VECTOR_ENTRY_POINT = "ale_py.vector_env:AtariVectorEnv"


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def rom_name(env_id: str) -> str:
    """The snake_case ROM name that AtariVectorEnv takes, from ale_py's registration (ALE/SpaceInvaders-v5 →
    space_invaders)."""
    try:
        import ale_py  # noqa: F401  (registers the ALE/ ids)
    except ImportError:
        raise ConfigError(f"env.id = '{env_id}': Atari ids need the ale-py package, which is not installed") from None
    spec = gym.registry.get(env_id)
    if spec is None or spec.vector_entry_point != VECTOR_ENTRY_POINT or "game" not in spec.kwargs:
        known = [name for name, s in gym.registry.items() if s.vector_entry_point == VECTOR_ENTRY_POINT]
        close = difflib.get_close_matches(env_id, known, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"env.id = '{env_id}': not an ALE id{hint}; Atari ids look like ALE/Breakout-v5")
    return spec.kwargs["game"]


def check_options(env_cfg, mode: str = "atari", render_mode: str | None = None) -> None:
    """EnvConfig options that mean nothing for ALE ids are errors, not silently ignored."""
    if render_mode not in (None, "rgb_array", "human"):
        raise ConfigError(f"render_mode = {render_mode!r}: ALE ids render 'rgb_array' or 'human'")
    # "atari" is what a run records as its vectorization, and what a resumed run asks for again
    if env_cfg.vectorization not in ("auto", "atari") or mode != "atari":
        shown = env_cfg.vectorization if env_cfg.vectorization != "auto" else mode
        raise ConfigError(
            f"env.vectorization = '{shown}': {env_cfg.id} runs on the backend set by env.atari.backend "
            "(vector or single); allowed: auto"
        )
    if env_cfg.kwargs:
        raise ConfigError(
            f"env.kwargs = {env_cfg.kwargs}: not used for ALE ids; set the options in env.atari "
            f"(allowed: {', '.join(type(env_cfg.atari).model_fields)})"
        )
    if env_cfg.wrappers:
        raise ConfigError("env.wrappers: not applied to ALE ids yet (ale_py's vector env has no sub-envs to wrap); "
                          "use env.atari's preprocessing options")
    if env_cfg.action_repeat != 1:
        raise ConfigError(f"env.action_repeat = {env_cfg.action_repeat}: ALE ids repeat actions with "
                          "env.atari.frame_skip (emulator frames a step, max-pooled); allowed: 1")
    if env_cfg.max_episode_steps is not None:
        raise ConfigError(
            f"env.max_episode_steps = {env_cfg.max_episode_steps}: not used for ALE ids; "
            "set env.atari.max_episode_frames (emulator frames; one step is frame_skip frames)"
        )
    if env_cfg.atari.backend == "single" and env_cfg.atari.num_threads:
        raise ConfigError(
            f"env.atari.num_threads = {env_cfg.atari.num_threads}: only the vector backend has threads; "
            "the single backend steps its envs in this process (allowed: 0)"
        )


def check_obs_type(env_id: str, atari_cfg) -> None:
    """`env.atari.obs_type` against the backend and the frame options; objects need OCAtari and a game it reads."""
    obs_type = atari_cfg.obs_type
    if obs_type == "pixels":
        return
    if atari_cfg.backend == "vector":
        raise ConfigError(f"env.atari.backend = vector: ale_py's AtariVectorEnv observes frames only; obs_type "
                          f"{obs_type} runs on the single backend (allowed: single, the default for {obs_type})")
    defaults = AtariConfig()
    for name in ("img_size", "grayscale", "max_pool"):
        value, default = getattr(atari_cfg, name), getattr(defaults, name)
        if value != default:
            raise ConfigError(f"env.atari.{name} = {json.dumps(value)}: a frame option, meaningless for obs_type "
                              f"{obs_type}; allowed: {json.dumps(default)} (the default), or obs_type pixels")
    if obs_type == "objects":
        from rlfoundry.envs.ocatari import check_game

        check_game(env_id)


def make_vector_env(env_id: str, atari_cfg, num_envs: int, render_mode: str | None = None) -> VectorEnv:
    """The backend's vector env (NEXT_STEP autoreset, unclipped rewards, life-loss terminations) → AtariEpisodes.

    A `render_mode` always gets the single backend: AtariVectorEnv does not render."""
    from ale_py import Action

    game = rom_name(env_id)
    check_obs_type(env_id, atari_cfg)
    base: VectorEnv
    if atari_cfg.backend == "single" or render_mode is not None:
        single = SyncVectorEnv([partial(make_env, env_id, atari_cfg, render_mode)] * num_envs,
                               autoreset_mode=AutoresetMode.NEXT_STEP)
        # SyncVectorEnv types its envs Env; these are make_env's AtariFrames
        action_set = list(cast(AtariFrames, single.envs[0]).action_set)
        base = AsAtariVectorEnv(single, life_loss_info=atari_cfg.episodic_life)
    else:
        from ale_py.vector_env import AtariVectorEnv

        vector = AtariVectorEnv(
            game,
            num_envs,
            num_threads=atari_cfg.num_threads,
            max_num_frames_per_episode=atari_cfg.max_episode_frames,
            repeat_action_probability=atari_cfg.repeat_action_probability,
            full_action_space=atari_cfg.full_action_space,
            autoreset_mode=AutoresetMode.NEXT_STEP,
            img_height=atari_cfg.frame_size[0],
            img_width=atari_cfg.frame_size[1],
            grayscale=atari_cfg.grayscale,
            stack_num=atari_cfg.frame_stack,
            frameskip=atari_cfg.frame_skip,
            maxpool=atari_cfg.max_pool,
            noop_max=atari_cfg.noop_max,
            episodic_life=False,  # it would restart the game on every life loss; see the module docstring
            life_loss_info=atari_cfg.episodic_life,
            reward_clipping=False,  # clipped in AtariEpisodes, so the statistics can report the true score
            use_fire_reset=atari_cfg.fire_reset,
        )
        action_set = list(vector.ale.get_action_set())
        base = vector
    fire = atari_cfg.fire_reset and Action.FIRE in action_set
    reset_action = action_set.index(Action.FIRE if fire else Action.NOOP)
    envs: VectorEnv = AtariEpisodes(base, atari_cfg.episodic_life, atari_cfg.reward_clipping, reset_action)
    if atari_cfg.obs_type == "pixels" and not atari_cfg.grayscale:
        envs = channel_first(envs)
    return envs


def make_env(env_id: str, atari_cfg, render_mode: str | None = None) -> AtariFrames:
    """One sub-env of the single backend: the id's AtariEnv stepping single frames, inside `AtariFrames`."""
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no version banner on stdout
    env = gym.make(
        env_id,
        frameskip=1,  # AtariFrames repeats the action, checking for game over after every frame
        repeat_action_probability=0.0,  # sticky actions are AtariFrames', where a checkpoint can hold them
        full_action_space=atari_cfg.full_action_space,
        # AtariFrames reads the screen or RAM from the emulator itself; this is only what the env's reset returns
        obs_type="ram" if atari_cfg.obs_type != "pixels" else "grayscale" if atari_cfg.grayscale else "rgb",
        max_num_frames_per_episode=0,  # no ALE limit: AtariFrames counts the frames after the reset no-ops
        render_mode=render_mode,
        disable_env_checker=True,  # AtariFrames drives the emulator itself, below the checker
    )
    return AtariFrames(env, atari_cfg)


def make_game(env_id: str, atari_cfg, render_mode: str | None = None) -> gym.Env:
    """One whole game as the learner plays it, for a plain Gymnasium loop (`rlfoundry.load_policy(...).make_env()`):
    the single backend's env, whose episode is the game (a life loss is `info["life_loss"]`, not a termination), with
    `AtariEpisodes`' action after a life loss (FIRE where the game has it and `fire_reset` is on, else NOOP) under
    `episodic_life`, and colour stacks channel-first [S * 3, H, W], as the policy saw them in training."""
    frames = make_env(env_id, atari_cfg, render_mode)
    env: gym.Env = frames
    if atari_cfg.episodic_life:
        from ale_py import Action

        fire = atari_cfg.fire_reset and Action.FIRE in frames.action_set
        env = LifeLossAction(env, frames.action_set.index(Action.FIRE if fire else Action.NOOP))
    if atari_cfg.obs_type == "pixels" and not atari_cfg.grayscale:
        env = ChannelsFirst(env)  # [S, H, W, 3] -> [S * 3, H, W]
    return env


class LifeLossAction(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The step after a life loss takes `reset_action`, whatever the agent chose (`AtariEpisodes` for one game)."""

    def __init__(self, env: gym.Env, reset_action: int):
        gym.utils.RecordConstructorArgs.__init__(self, reset_action=reset_action)
        gym.Wrapper.__init__(self, env)
        self.reset_action, self.life_lost = reset_action, False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.life_lost = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(self.reset_action if self.life_lost else action)
        self.life_lost = bool(info["life_loss"])
        return obs, reward, terminated, truncated, info


def free_emulators(env: object) -> None:
    """Drop the emulator a closed env holds (`ale`: AtariEnv's ALEInterface, AtariVectorEnv's ALEVectorInterface),
    which frees it and stops its threads now (module docstring); nothing for an env without one."""
    vars(env).pop("ale", None)


def _shape(space: spaces.Space) -> tuple[int, ...]:
    assert space.shape is not None  # a Box's
    return space.shape


def channel_first(envs: VectorEnv) -> VectorEnv:
    """Colour stacks [N, S, H, W, 3] → [N, S * 3, H, W], the layout the image encoders take."""
    stack, height, width, colours = _shape(envs.single_observation_space)
    shape = (stack * colours, height, width)

    def layout(obs: np.ndarray) -> np.ndarray:
        return obs.transpose(0, 1, 4, 2, 3).reshape(obs.shape[0], *shape)  # a uint8 copy

    return vw.TransformObservation(envs, layout, single_observation_space=spaces.Box(0, 255, shape, dtype=np.uint8))


def probe_spaces(env_id: str, kwargs: dict | None = None, atari_cfg=None) -> tuple[spaces.Space, spaces.Space]:
    """The single-env observation and action spaces (builds and closes a one-env vector env)."""
    if kwargs:
        raise ConfigError(
            f"env.id = '{env_id}': gymnasium.make keyword arguments {kwargs} (env.kwargs, env.max_episode_steps) "
            "are not used for ALE ids; set env.atari instead (the time limit: env.atari.max_episode_frames)"
        )
    if atari_cfg is None:
        atari_cfg = AtariConfig()
    envs = make_vector_env(env_id, atari_cfg, 1)
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


class AtariFrames(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """One ALE env preprocessed as ale_py's AtariVectorEnv preprocesses each of its envs (the single backend).

    A Python copy of the C++ `PreprocessedEnv::reset` / `step` of ale-py 0.12 (src/ale/vector/preprocessed_env.cpp),
    driving the wrapped AtariEnv's emulator (`ale`) directly, one frame at a time:
    - reset: the AtariEnv's reset (seeding, `reset_game`), FIRE if `fire_reset` and the game has it, then
      uniform{0..noop_max-1} no-ops less the FIRE; the stack is zeros and then the reset frame.
    - step: the action for `frame_skip` frames, stopping early at game over or the time limit; the last two frames
      are grabbed and max-pooled (the last alone without `max_pool`), resized to `frame_size` (INTER_AREA) and
      pushed onto the stack. As in C++, a step cut short pools the frames grabbed before, and the limit counts
      frames since the reset no-ops.
    - sticky actions are done here, as ALE does them (each frame keeps the previous frame's action with probability
      `repeat_action_probability`; a game starts from NOOP), because ALE keeps the action it repeats outside its
      `cloneState` (StellaEnvironment::m_actions): a restored emulator would repeat the action it last ran.
    - `terminated` is game over and `truncated` the time limit (without game over): the sub-env's episode is the
      game, so SyncVectorEnv autoresets only after one. `info["life_loss"]` (lives fell and some are left) is the
      signal `AsAtariVectorEnv` turns into a termination.
    - `obs_type` ram and objects push the RAM after the step's last frame (or the objects OCAtari finds in it) in
      place of a frame, and return the stack flattened [frame_stack * D].

    The whole state is in plain attributes (the raw frame pair, the stack, the repeated action, counters) plus the
    AtariEnv's emulator and its `np_random`, which draws the no-ops and the sticky actions: what
    `rlfoundry.envs.state` captures. Not so OCAtari's object list (obs_type objects; see `rlfoundry.envs.ocatari`).

    `atari_cfg` is an `AtariConfig` or its dict; the dict is what `env.spec` records, so Gymnasium can rebuild the
    wrapper (`gym.make(env.spec)`) and `check_env` passes.
    """

    def __init__(self, env: gym.Env, atari_cfg: AtariConfig | dict):
        atari_cfg = AtariConfig.model_validate(atari_cfg)
        gym.utils.RecordConstructorArgs.__init__(self, atari_cfg=atari_cfg.model_dump())
        super().__init__(env)
        from ale_py import Action

        ale = self.ale
        self.action_set = ale.getLegalActionSet() if atari_cfg.full_action_space else ale.getMinimalActionSet()
        self.action_ids = [action.value for action in self.action_set]
        self.fire = atari_cfg.fire_reset and Action.FIRE in self.action_set
        self.frame_skip, self.max_pool = atari_cfg.frame_skip, atari_cfg.max_pool
        self.noop_max, self.max_frames = atari_cfg.noop_max, atari_cfg.max_episode_frames
        self.repeat_action_probability = atari_cfg.repeat_action_probability
        self.obs_type, self.objects = atari_cfg.obs_type, None
        if self.obs_type == "pixels":
            self.height, self.width = atari_cfg.frame_size
            colours = () if atari_cfg.grayscale else (3,)
            self.raw = np.zeros((2, *ale.getScreenDims(), *colours), dtype=np.uint8)  # the last two frames of a step
            self.stack = np.zeros((atari_cfg.frame_stack, self.height, self.width, *colours), dtype=np.uint8)
            self.observation_space = spaces.Box(0, 255, self.stack.shape, dtype=np.uint8)
        elif self.obs_type == "ram":
            self.stack = np.zeros((atari_cfg.frame_stack, ale.getRAMSize()), dtype=np.uint8)
            self.observation_space = spaces.Box(0, 255, (self.stack.size,), dtype=np.uint8)
        else:
            from rlfoundry.envs.ocatari import ObjectView

            assert env.spec is not None  # a registered ALE id's
            self.objects = ObjectView(env.spec.id)
            self.stack = np.zeros((atari_cfg.frame_stack, self.objects.size), dtype=np.float32)
            self.observation_space = spaces.Box(-np.inf, np.inf, (self.stack.size,), dtype=np.float32)
        self.action_space = spaces.Discrete(len(self.action_set))
        self.elapsed_frames, self.lives, self.game_over, self.life_loss = 0, 0, False, False
        self.sticky_action = Action.NOOP.value  # the ALE action id the emulator ran last

    @property
    def ale(self):
        return self.env.unwrapped.ale

    def close(self) -> None:
        super().close()
        free_emulators(self.env.unwrapped)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        from ale_py import Action

        self.env.reset(seed=seed, options=options)
        ale, rng = self.ale, self.np_random
        self.sticky_action = Action.NOOP.value  # as ALE's reset_game
        if self.fire:
            self._act(Action.FIRE.value, rng)
        noops = int(rng.integers(0, max(self.noop_max, 1))) - int(self.fire)
        for _ in range(noops):
            self._act(Action.NOOP.value, rng)
            if ale.game_over(with_truncation=False):
                ale.reset_game()
                self.sticky_action = Action.NOOP.value
        self.stack[:] = 0
        if self.obs_type == "pixels":
            self._grab(0)
            self.raw[1] = 0
        self._push(reset=True)
        self.elapsed_frames, self.lives, self.game_over, self.life_loss = 0, ale.lives(), False, False
        return self._obs(), self._info()

    def step(self, action):
        ale, rng, action = self.ale, self.np_random, self.action_ids[action]
        score = 0
        for skip in range(self.frame_skip, 0, -1):
            score += self._act(action, rng)
            self.game_over = ale.game_over(with_truncation=False)
            self.elapsed_frames += 1
            lives = ale.lives()
            self.life_loss = 0 < lives < self.lives
            if self.game_over or self.elapsed_frames >= self.max_frames:
                break
            if skip <= 2 and self.obs_type == "pixels":
                self._grab(skip - 1)
        self._push()
        self.lives = ale.lives()
        truncated = self.elapsed_frames >= self.max_frames and not self.game_over
        return self._obs(), float(score), self.game_over, truncated, self._info()

    def _act(self, action: int, rng: np.random.Generator) -> int:
        """One frame; ALE's sticky actions (StellaEnvironment::act) with our RNG."""
        if rng.random() >= self.repeat_action_probability:
            self.sticky_action = action
        return self.ale.act(self.sticky_action)

    def _grab(self, index: int) -> None:
        if self.raw.ndim == 3:
            self.ale.getScreenGrayscale(self.raw[index])
        else:
            self.ale.getScreenRGB(self.raw[index])

    def _push(self, reset: bool = False) -> None:
        """The newest observation onto the stack: the pooled, resized frame; the RAM after the step's last frame; or
        the objects OCAtari finds in that RAM (its object list starts anew on a reset)."""
        self.stack[:-1] = self.stack[1:]
        if self.obs_type == "pixels":
            import cv2

            if self.max_pool:
                np.maximum(self.raw[0], self.raw[1], out=self.raw[0])
            # OpenCV's dsize is (width, height)
            self.stack[-1] = cv2.resize(self.raw[0], (self.width, self.height), interpolation=cv2.INTER_AREA)
        elif self.obs_type == "ram":
            self.ale.getRAM(self.stack[-1])
        else:
            assert self.objects is not None  # obs_type "objects"
            if reset:
                self.objects.reset(self.ale.getRAM(), self.stack[-1])
            else:
                self.objects.observe(self.ale.getRAM(), self.stack[-1])

    def _obs(self) -> np.ndarray:
        """A copy of the stack: frames [S, H, W(, 3)]; RAM and object vectors concatenated, oldest first [S * D]."""
        return self.stack.copy() if self.obs_type == "pixels" else self.stack.reshape(-1).copy()

    def _info(self) -> dict[str, Any]:
        ale = self.ale
        return {"lives": self.lives, "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber(), "life_loss": self.life_loss}


class AsAtariVectorEnv(VectorWrapper):
    """The single backend's SyncVectorEnv as AtariVectorEnv steps: with `life_loss_info`, a life loss while the
    game goes on terminates the step (and then it is no truncation), and the info holds AtariVectorEnv's int32
    arrays (`env_id`, `lives`, `frame_number`, `episode_frame_number`). Outside SyncVectorEnv, so that its autoreset
    still waits for the game's end."""

    KEYS = ("lives", "frame_number", "episode_frame_number")

    def __init__(self, env: VectorEnv, life_loss_info: bool):
        super().__init__(env)
        self.life_loss_info = life_loss_info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, self._info(info)

    def step(self, actions: np.ndarray):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if self.life_loss_info:
            terminated = terminated | info["life_loss"]
            truncated = truncated & ~terminated
        return obs, rewards, terminated, truncated, self._info(info)

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        ours = {"env_id": np.arange(self.num_envs, dtype=np.int32)}
        ours.update((key, info[key].astype(np.int32)) for key in self.KEYS)
        return ours


class AtariEpisodes(VectorWrapper):
    """Learner view (clipped rewards, life-loss reset steps) and true game statistics over either backend.

    Per step, all vectorised over sub-envs:
    - `life_reset` envs lost a life on the previous step (a termination under episodic life): their action
      becomes `reset_action` and their reward to the learner is 0, but the game's score keeps the reward.
    - a termination is a life loss when `lives` fell and is still > 0 (ALE's own test); any other termination,
      and any truncation, ends the game, and ALE resets that sub-env on the next step (`game_reset`).
    - if a life-loss termination coincided with game over or the time limit, ALE resets after all; the
      episode frame number falling tells, and that game is reported one step late, on its reset step.
    """

    def __init__(self, env: VectorEnv, episodic_life: bool, reward_clipping: bool, reset_action: int):
        super().__init__(env)
        self.episodic_life, self.reward_clipping, self.reset_action = episodic_life, reward_clipping, reset_action
        n = env.num_envs
        self.episode_returns = np.zeros(n)  # unclipped score of the current game
        self.episode_lengths = np.zeros(n, dtype=np.int64)
        self.episode_start_times = np.zeros(n)
        self.lives = np.zeros(n, dtype=np.int64)
        self.frames = np.zeros(n, dtype=np.int64)  # ALE's episode_frame_number, rising within a game
        self.game_reset = np.zeros(n, dtype=bool)
        self.life_reset = np.zeros(n, dtype=bool)

    def close(self, **kwargs: Any) -> None:
        super().close(**kwargs)  # the single backend's SyncVectorEnv closes each AtariFrames, which frees its own
        free_emulators(self.env.unwrapped)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask", np.ones(self.num_envs, dtype=bool))
        self.episode_returns[mask], self.episode_lengths[mask] = 0.0, 0
        self.episode_start_times[mask] = time.perf_counter()
        self.game_reset[mask], self.life_reset[mask] = False, False
        self.lives[:], self.frames[:] = info["lives"], info["episode_frame_number"]
        return obs, info

    def step(self, actions: np.ndarray):
        actions = np.where(self.life_reset, self.reset_action, actions)
        obs, scores, terminated, truncated, info = self.env.step(actions)
        lives, frames = info["lives"], info["episode_frame_number"]
        scores = scores.astype(np.float64)

        late_end = self.life_reset & (frames <= self.frames)
        in_game = ~(self.game_reset | late_end)
        self.episode_returns[in_game] += scores[in_game]
        self.episode_lengths[in_game] += 1
        life_lost = terminated & (lives < self.lives) & (lives > 0) if self.episodic_life else np.zeros_like(terminated)
        game_end = (terminated | truncated) & ~life_lost
        ended = game_end | late_end

        rewards = (np.sign(scores) if self.reward_clipping else scores).astype(np.float32)
        rewards[self.life_reset] = 0.0

        now = time.perf_counter()
        if ended.any():
            info["episode"] = {
                "r": np.where(ended, self.episode_returns, 0.0),
                "l": np.where(ended, self.episode_lengths, 0),
                "t": np.where(ended, np.round(now - self.episode_start_times, 6), 0.0),
            }
            info["_episode"] = ended
            self.episode_returns[ended], self.episode_lengths[ended] = 0.0, 0
        self.episode_start_times[self.game_reset | late_end] = now
        self.game_reset, self.life_reset = game_end, life_lost
        self.lives[:], self.frames[:] = lives, frames
        return obs, rewards, terminated, truncated, info
