"""The config sections below the algorithms: env, network, train, eval, checkpoint, logging, solved, provenance.

Plain data: each section is a closed pydantic model with its defaults. The experiment config that
assembles them with the algorithm's own section lives above the algorithms, in `rlfoundry.experiment.schema`.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from rlfoundry.config.base import StrictModel
from rlfoundry.config.monitors import MonitorsConfig


def _positive_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > 0

MAX_SEED = 2**32 - 1  # NumPy's global seed (np.random.seed) takes no more


class MiniGridConfig(StrictModel):
    """Observation options of MiniGrid (and BabyAI) ids; see `rlfoundry.envs.minigrid`."""

    view: Literal["partial", "full", "rgb_partial", "rgb_full"] = Field(
        "partial",
        description="partial: the agent's 7x7 egocentric view, symbolic uint8 [3, 7, 7] (object, colour, state "
        "indices); full: the whole grid, symbolic [3, height, width]; rgb_partial / rgb_full: the same views as "
        "uint8 RGB pixels [3, H, W].",
    )
    tile_size: PositiveInt = Field(8, description="Pixels per grid cell of the rgb views (8: a 56x56 partial view).")
    direction: bool = Field(
        False, description="Observe the agent's direction too, which the partial views show only implicitly: a "
        "Dict {direction, image} that the networks read as the view through the image encoder beside the one-hot "
        "direction (rlfoundry.envs.spaces).",
    )


def _frame_size(value: Any) -> int | tuple[int, int]:
    """One check with one message for `img_size` fields: pydantic's own union errors would report the int branch only."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_positive_int(side) for side in value):
        return int(value[0]), int(value[1])
    if _positive_int(value):
        return int(value)
    raise ValueError("expected a positive int (square frames) or [height, width] (two positive ints)")


class _SizedFrames(StrictModel):
    """A section with an `img_size` field: a side or [height, width]."""

    if TYPE_CHECKING:  # each subclass declares the field, with its own default and description
        img_size: int | tuple[int, int]

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of the frames."""
        return (self.img_size, self.img_size) if isinstance(self.img_size, int) else self.img_size


class PixelsConfig(_SizedFrames):
    """Observe what an id renders instead of its observation (`rlfoundry.envs.wrappers.RenderedFrames`): Pendulum or
    CartPole from pixels. Families with frames of their own have their own options (env.atari, env.dm_control.pixels,
    env.minigrid.view, env.vizdoom, env.retro)."""

    enabled: bool = Field(False, description="true: observations are the env's rgb_array frames, uint8 [3, H, W], "
                                             "resized with OpenCV's INTER_AREA; the env's own observation is unused.")
    img_size: int | tuple[int, int] = Field(64, description="Frame size: a side or [height, width].")
    _img_size = field_validator("img_size", mode="before")(classmethod(lambda cls, value: _frame_size(value)))


class DmControlConfig(_SizedFrames):
    """Observations of DeepMind Control Suite ids (dm_control/<domain>-<task>-v0); see `rlfoundry.envs.dm_control`."""

    pixels: bool = Field(
        False, description="false: the proprioceptive observation dict flattened to one float vector (keys in the "
        "task's order); true: rendered frames, channel-first uint8 [3, H, W].")
    img_size: int | tuple[int, int] = Field(64, description="Rendered frame size (pixels only): a side or [height, width].")
    camera: int | str = Field(0, description="The camera rendered (pixels, and videos of any run): its index in the "
                              "model (-1: the free camera) or its name, e.g. cartpole's 'fixed' or 'lookatcart'.")

    _img_size = field_validator("img_size", mode="before")(classmethod(lambda cls, value: _frame_size(value)))


class FramesConfig(_SizedFrames):
    """Pixel preprocessing of ViZDoom and Retro ids, as the Atari path does it: frame skip, grey, resize, stack;
    see `rlfoundry.envs.frames`."""

    frame_skip: PositiveInt = Field(
        4, description="Game frames per agent step (the action repeated; ViZDoom skips them inside its engine).")
    grayscale: bool = Field(True, description="Grey frames; false: RGB, laid out as [frame_stack * 3, H, W].")
    img_size: int | tuple[int, int] = Field(84, description="Frames resized to a side or to [height, width].")
    frame_stack: PositiveInt = Field(4, description="The last frame_stack frames form one observation.")
    repeat_action_probability: float = Field(
        0.0, ge=0, le=1,
        description="Retro only: sticky actions, each emulator frame keeps the previous frame's action with this "
        "probability, drawn from the env's seed (0.25: Nichol et al. 2018, Machado et al. 2018). The emulators are "
        "deterministic, so without it every episode of a fixed policy is the same. ViZDoom: 0 (its engine is seeded).")

    _img_size = field_validator("img_size", mode="before")(classmethod(lambda cls, value: _frame_size(value)))


class AtariConfig(_SizedFrames):
    """Preprocessing and observation type of ALE ids (ALE/<Game>-v5); see `rlfoundry.envs.atari`."""

    noop_max: int = Field(30, ge=0, description="Up to this many no-op frames on reset, a random number each time.")
    frame_skip: PositiveInt = Field(4, description="Emulator frames per agent step (the action repeated).")
    max_pool: bool = Field(
        True, description="Observe the max over the last two skipped frames (removes flicker); frames only.")
    episodic_life: bool = Field(
        True, description="A life loss is a termination for the learner; episode statistics still count whole games."
    )
    fire_reset: bool = Field(True, description="Press FIRE on reset and after a life loss, in games that have FIRE.")
    reward_clipping: bool = Field(
        True, description="The learner gets sign(reward); episode statistics report the unclipped score."
    )
    img_size: int | tuple[int, int] = Field(
        84,
        description="Frames are resized to img_size x img_size, or to [height, width] (e.g. [105, 80], SimPLe's "
        "frames: half of ALE's 210x160).",
    )
    grayscale: bool = Field(
        True, description="Grey frames [frame_stack, H, W]; false: RGB, laid out as [frame_stack * 3, H, W]."
    )
    frame_stack: PositiveInt = Field(
        4, description="The last frame_stack frames form one observation (obs_type ram and objects: the last "
        "frame_stack vectors, concatenated oldest first; zeros before the reset one, as frames).")
    repeat_action_probability: float = Field(
        0.25, ge=0, le=1, description="Sticky actions: each frame repeats the previous action with this probability."
    )
    full_action_space: bool = Field(False, description="All 18 actions (true) or the game's minimal action set.")
    max_episode_frames: PositiveInt = Field(
        108_000, description="Truncate a game after this many emulator frames (108 000 = 30 min = 27 000 steps)."
    )
    num_threads: int = Field(0, ge=0, description="ALE worker threads (0: one per env, at most one per core).")
    obs_type: Literal["pixels", "ram", "objects"] = Field(
        "pixels",
        description="pixels: the preprocessed frames; ram: the console's 128 RAM bytes after each step, uint8 "
        "[frame_stack * 128]; objects: OCAtari's objects, (x, y, w, h) per object slot, float32 "
        "[frame_stack * 4 * slots] (needs the ocatari extra). ram and objects run on the single backend.",
    )
    backend: Literal["vector", "single"] = Field(
        "vector",
        description="vector: ale_py's AtariVectorEnv (C++ threads, fastest; resume resets the envs, no video; frames "
        "only); single: one Gymnasium AtariEnv per sub-env, preprocessed in Python (slower; exact resume and "
        "video). Unset, it is single for obs_type ram and objects.",
    )

    _img_size = field_validator("img_size", mode="before")(classmethod(lambda cls, value: _frame_size(value)))

    @model_validator(mode="before")
    @classmethod
    def _backend_for_obs_type(cls, data: Any) -> Any:
        """AtariVectorEnv observes frames only, so ram and objects default to the single backend; an explicit
        `backend: vector` with them stays, and `rlfoundry.envs.atari` refuses it with a message."""
        if isinstance(data, dict) and data.get("obs_type", "pixels") != "pixels" and "backend" not in data:
            return {**data, "backend": "single"}
        return data


class WrapperConfig(StrictModel):
    id: str = Field(description="A Gymnasium wrapper's name (gymnasium.wrappers) or a `package.module:Class` path.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Its keyword arguments (after the env).")


class EnvConfig(StrictModel):
    id: str = Field(description="A registered Gymnasium id, e.g. CartPole-v1.")
    num_envs: PositiveInt = Field(8, description="Parallel environments in the training vector env.")
    vectorization: Literal["auto", "sync", "async", "vector_entry_point"] = Field(
        "auto",
        description="auto: the id's numpy vector entry point if it has one, else async when one "
        "env step is slow enough to pay for worker processes, else sync.",
    )
    normalize_obs: bool | Literal["static"] = Field(
        False, description="true: running mean/std observation normalisation; static: the observation space's "
                           "(finite) bounds mapped to [-1, 1], no statistics.")
    normalize_reward: bool = Field(False, description="Scale rewards by the running std of the discounted return.")
    clip_obs: float = Field(10.0, gt=0, description="Clip normalised observations to ±clip_obs.")
    clip_reward: float = Field(10.0, gt=0, description="Clip normalised rewards to ±clip_reward.")
    max_episode_steps: PositiveInt | None = Field(
        None, description="Override the id's time limit. An id registered without one (CliffWalking-v1) has its "
        "evaluation episodes cut at 10,000 steps, so a policy that never reaches the end cannot evaluate forever.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments for gymnasium.make.")
    wrappers: list[WrapperConfig] = Field(
        default_factory=list,
        description="Gymnasium wrappers around each sub-env, innermost first, after the family's own preprocessing.",
    )
    mask_obs: list[int] | None = Field(
        None,
        description="Observation indices to hide (a POMDP variant); they are removed, so the observation shrinks. "
        "E.g. [1, 3] hides CartPole's velocities. Indices are checked against the env's observation.",
    )
    action_repeat: PositiveInt = Field(
        1, description="Repeat each action this many env steps, summing the rewards (stops at the episode's end); "
        "PlaNet on DeepMind Control: 8 for cartpole, 2 for walker, 4 for cheetah. ALE ids use env.atari.frame_skip.")
    img_size: int | tuple[int, int] | None = Field(
        None, description="Resize image observations (uint8, channel-first) to a side or [height, width] with OpenCV's "
        "INTER_AREA, for ids outside the families with a frame size of their own (env.atari, env.dm_control, "
        "env.vizdoom, env.retro). null: as the env gives them. DreamerV3's and PlaNet's defaults "
        "for an image id without a preset: 64, as their reference code resizes every image.")
    pixels: PixelsConfig = Field(default_factory=PixelsConfig, description="Observe rendered frames (ids that render "
                                 "rgb_array, outside the families below).")
    minigrid: MiniGridConfig = Field(default_factory=MiniGridConfig, description="MiniGrid ids only: the observation.")
    atari: AtariConfig = Field(default_factory=AtariConfig, description="ALE ids only: the preprocessing.")
    dm_control: DmControlConfig = Field(
        default_factory=DmControlConfig, description="DeepMind Control ids only: vectors or pixels.")
    vizdoom: FramesConfig = Field(default_factory=FramesConfig, description="ViZDoom ids only: the preprocessing.")
    retro: FramesConfig = Field(default_factory=FramesConfig, description="Retro ids only: the preprocessing.")

    _img_size = field_validator("img_size", mode="before")(
        classmethod(lambda cls, value: None if value is None else _frame_size(value)))

    @property
    def frame_size(self) -> tuple[int, int] | None:
        """(height, width) of `img_size`, or None."""
        return (self.img_size, self.img_size) if isinstance(self.img_size, int) else self.img_size


class NetworkConfig(StrictModel):
    encoder: Literal["mlp", "nature_cnn", "impala_cnn", "minigrid"] = Field(
        "mlp",
        description="Observation encoder: mlp (vectors), nature_cnn or impala_cnn (pixels, channel-first), "
        "minigrid (MiniGrid's symbolic [3, H, W] grids).",
    )
    hidden_sizes: list[PositiveInt] = Field(
        default_factory=lambda: [64, 64],
        description="MLP layer widths; for the image encoders, the linear layers after the convolutions.",
    )
    impala_channels: list[PositiveInt] = Field(
        default_factory=lambda: [16, 32, 32], description="Channels of each IMPALA-ResNet stage (Espeholt et al. 2018)."
    )
    grid_embedding_dim: PositiveInt = Field(32, description="Embedding width of MiniGrid's cell indices (BabyAI 1.1).")
    grid_channels: list[PositiveInt] = Field(
        default_factory=lambda: [32, 64], description="Channels of the minigrid encoder's 3×3 convolutions."
    )
    activation: Literal["tanh", "relu", "elu", "silu"] = Field("tanh", description="The hidden layers' activation.")
    core: Literal["identity", "lstm", "gru", "trxl", "gtrxl", "mamba", "mamba2"] = Field(
        "identity",
        description="Memory core between encoder and heads: identity (feed-forward), lstm, gru, trxl "
        "(Transformer-XL), gtrxl (gated Transformer-XL), mamba, mamba2; see rlfoundry.nets.cores.",
    )
    core_hidden: PositiveInt = Field(128, description="Width of the memory core (its hidden state / model width).")
    core_layers: PositiveInt = Field(1, description="Stacked layers (blocks) of the memory core.")
    memory_length: PositiveInt = Field(16, description="trxl/gtrxl: steps of past inputs kept as attention memory.")
    num_heads: PositiveInt = Field(4, description="trxl/gtrxl: attention heads (must divide core_hidden).")
    mamba_state: PositiveInt = Field(16, description="mamba/mamba2: SSM state size N per channel (head).")
    mamba_expand: PositiveInt = Field(2, description="mamba/mamba2: inner width = mamba_expand × core_hidden.")
    mamba_conv: PositiveInt = Field(4, description="mamba/mamba2: width of the causal depthwise convolution.")
    mamba2_head_dim: PositiveInt = Field(
        32, description="mamba2: channels per SSM head (must divide mamba_expand × core_hidden)."
    )
    shared: bool = Field(False, description="One trunk for policy and value (true) or one each (false).")
    ortho_init: bool = Field(True, description="Orthogonal init: gain √2 hidden, 0.01 policy, 1 value.")
    log_std_init: float = Field(0.0, description="Initial log std of the Gaussian policy (continuous actions).")

    @model_validator(mode="after")
    def _check_core(self) -> NetworkConfig:
        if self.core in ("trxl", "gtrxl") and self.core_hidden % self.num_heads:
            raise ValueError(f"network.num_heads = {self.num_heads}: must divide network.core_hidden ({self.core_hidden})")
        inner = self.mamba_expand * self.core_hidden
        if self.core == "mamba2" and inner % self.mamba2_head_dim:
            raise ValueError(
                f"network.mamba2_head_dim = {self.mamba2_head_dim}: must divide mamba_expand × core_hidden ({inner})"
            )
        return self


class TrainConfig(StrictModel):
    total_timesteps: PositiveInt = Field(
        100_000, description="Environment steps (all envs) to train for. A run takes whole iterations (a PPO rollout "
        "is env.num_envs × algo.num_steps steps), so this rounds up to the next one; the progress line counts to the "
        "steps the run will take, summary.json records those taken, and a first iteration larger than the whole "
        "budget is a warning that names the settings to lower.")
    seed: int = Field(1, ge=0, le=MAX_SEED, description="Seeds Python, NumPy, torch and the envs.")
    torch_threads: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="torch.set_num_threads. auto: the cores this process may use (its share when "
        "RLFOUNDRY_CONCURRENT_RUNS runs share them) for image encoders and MLPs 256 or more wide, else 1; resolved "
        "once and kept on resume. Results are reproducible only at the same count.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="bf16: mixed precision, convolutions and large matmuls autocast to bfloat16 (weights, optimizer, "
        "losses and stored rollouts stay fp32); fast only with native bf16 (CPUs with AVX-512 BF16 or AMX, recent "
        "GPUs), emulated and about 10x slower elsewhere. auto: bf16 for image encoders on such CPUs, else fp32 (on CUDA "
        "fp32 was measured faster).",
    )

    compile: bool | Literal["auto"] = Field(
        "auto", description="torch.compile the acting and learning functions (every algorithm). The first iterations then "
        "compile, for tens of seconds on a CPU. auto: where it was measured to pay off (see docs/guide/performance.md, "
        "\"Threads, precision and compilation\"), never on CUDA (CUDA graphs there); resolved once and kept on resume.",
    )
    cuda_graphs: bool | Literal["auto"] = Field(
        "auto", description="On CUDA, capture each steady-state gradient step (SAC, TD3, DDPG, DQN; PPO's minibatch "
        "step; DreamerV3's and PlaNet's updates) in a CUDA graph and replay it: one launch instead of hundreds. auto: where it was measured to pay (the "
        "docs/guide/performance.md, \"Threads, precision and compilation\"); off on the CPU, with train.debug, and across processes. "
        "Resolved once and kept on resume.",
    )
    device_replay: bool | Literal["auto"] = Field(
        "auto", description="Keep a copy of the replay's observations and actions (the off-policy algorithms', "
        "DreamerV3's and PlaNet's) on train.device, written a step at a time, and gather each sample there: the same "
        "samples, without the host gathering them and copying megabytes per batch. It takes that much device memory "
        "besides the host's copy, which checkpoints read. auto: on CUDA when it takes at most half the free GPU memory; "
        "true: always (on the CPU a second copy in torch, which only tests the path).",
    )
    deterministic: bool = Field(
        False, description="Deterministic kernels only (torch.use_deterministic_algorithms, cuDNN without autotuning, "
        "cuBLAS with a fixed workspace): on CUDA the same seed then gives the same numbers in every run, at some cost "
        "in speed; an operation without a deterministic kernel stops the run, named. Off, CUDA's atomic adds (the "
        "backward of the Q-value gathers of DQN and discrete SAC, some convolution backward passes) may differ in the "
        "last bits between runs. The CPU is deterministic either way.",
    )
    init: str | None = Field(
        None, description="Fine-tune: start from the trained networks of another run directory, @last, a model "
        "folder or hf://ORG/NAME[@REVISION], and from its observation statistics; optimizers, replay, schedules and "
        "the step count start fresh (Stable-Baselines3's load-then-learn, the zoo's -i). The networks must fit this "
        "config (same algorithm, network and spaces). Read once when the run starts: config.yaml records the "
        "absolute path or the Hub commit, provenance.init what was loaded; a resumed run continues from its own "
        "checkpoint.",
    )
    init_checkpoint: str | None = Field(
        None, description="Which checkpoint of the run train.init names: last, best, or a step (5120); default: best "
        "where one was saved, else last. A model folder holds one.",
    )
    profile: bool = Field(
        False, description="Record a few iterations after warm-up with torch.profiler: profile.json (a Chrome/Perfetto "
        "trace) and profile.md (the env/act/learn split, the top ops by self time) in the run directory.",
    )

    debug: bool = Field(
        False, description="Debug checks: autograd anomaly detection; observations, rewards, actions, loss terms and "
        "gradients checked finite at every step and update (the first NaN/inf stops the run, named); per-layer "
        "gradient and weight norms in the metrics; a log line per iteration. `--debug` also sets a small budget "
        "and train.profile.",
    )

    @field_validator("init", "init_checkpoint", mode="before")
    @classmethod
    def _name(cls, value):
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value  # a step: 5120

    @field_validator("torch_threads", mode="before")
    @classmethod
    def _threads(cls, value):
        if isinstance(value, str) and value != "auto" and not value.strip().isdigit():
            raise ValueError("must be a positive integer or 'auto'")
        return value


class EvalConfig(StrictModel):
    every_steps: int = Field(10_000, ge=0, description="Evaluate every N env steps (0: only at the end).")
    episodes: PositiveInt = Field(10, description="Episodes per evaluation.")
    num_envs: PositiveInt | None = Field(None, description="Evaluation envs (default: min(episodes, 16)).")
    warmup_steps: int = Field(0, ge=0, description="No evaluation before this many steps.")
    deterministic: bool = Field(True, description="Greedy / mean actions during evaluation.")
    at_end: bool = Field(True, description="Evaluate once more when training ends.")
    stop_at_threshold: bool = Field(True, description="Stop when the evaluation return reaches the solved threshold.")
    seed_offset: int = Field(10_000, ge=0, description="Evaluation envs, and the random state evaluations draw "
                                             "from, are seeded with train.seed + seed_offset.")
    video: bool = Field(False, description="Record one evaluation episode as videos/eval_step<N>.mp4 at each evaluation.")


class CheckpointConfig(StrictModel):
    every_steps: int = Field(100_000, ge=0, description="Save every N env steps (0: only at the end and on stops).")
    keep_last: PositiveInt = Field(3, description="Step checkpoints kept; the best and the last are never deleted.")
    save_best: bool = Field(True, description="Save when the evaluation return improves (the `best` checkpoint).")


class LoggingConfig(StrictModel):
    runs_root: str = Field("runs", description="Where run directories are created.")
    group: str | None = Field(None, description="A name the runs made together share (`rlfoundry trials` sets it); "
                                                "the registry keeps it: `rlfoundry runs list --group NAME`.")
    tensorboard: bool = Field(True, description="Write TensorBoard event files into the run directory (tb/).")
    csv: bool = Field(True, description="Write metrics.csv, a row per metrics row.")
    every_steps: NonNegativeInt | Literal["auto"] = Field(
        "auto", description="A metrics row (metrics.csv, TensorBoard, W&B, the console) at most every this many env "
        "steps: shorter iterations are merged into one row (losses averaged, times and episodes summed); every "
        "evaluation and the run's end write one too. 0: a row per iteration. auto: 1,000 for off-policy and "
        "world-model agents (an iteration of a few env steps), a row per rollout for the others; a resumed run keeps "
        "what it started with.")
    progress: bool = Field(True, description="Rich progress bar with ETA and a metrics table.")
    train_return_window: PositiveInt = Field(100, description="Episodes averaged for train_return_mean.")
    wandb: bool = Field(False, description="Log to Weights & Biases too: the metrics TensorBoard gets, the config, "
                                           "evaluation videos and the final summary (`pip install 'rlfoundry[wandb]'`). "
                                           "Offline, into the run directory's wandb/, when no API key is configured.")
    wandb_project: str = Field("rlfoundry", min_length=1, description="The W&B project the run is logged to.")
    wandb_entity: str | None = Field(None, description="The W&B team or user (default: the API key's own).")
    wandb_group: str | None = Field(None, description="The W&B group (default: logging.group, which `rlfoundry "
                                                      "trials` and `rlfoundry sweep` set).")
    wandb_tags: list[str] = Field(default_factory=list, description="Tags of the W&B run.")
    monitors: MonitorsConfig = Field(default_factory=MonitorsConfig, description="Warnings when a metric stays out "
                                     "of its bounds (approximate KL, entropy collapse, Q divergence, ...).")


class SolvedConfig(StrictModel):
    return_: float = Field(alias="return", description="Evaluation return that counts as solved.")
    source: str = Field(description="Where the threshold comes from.")


class Provenance(StrictModel):
    """Written by the trainer into the run's config.yaml; ignored as input (a new run writes its own)."""

    created: str | None = None
    versions: dict[str, str | None] = Field(default_factory=dict)
    git_commit: str | None = None
    git_dirty: bool | None = None
    device: str | None = None
    torch_threads: int | None = None  # train.torch_threads resolved (auto: from the hardware), kept on resume
    precision: str | None = None  # train.precision resolved, kept on resume
    compile: bool | None = None  # train.compile resolved, kept on resume
    cuda_graphs: bool | None = None  # train.cuda_graphs resolved, kept on resume
    log_every: int | None = None  # logging.every_steps resolved, kept on resume (None: a row per iteration)
    hardware: str | None = None  # the CPU (model, vector extensions), cores and GPU the run started on
    vectorization: str | None = None
    processes: int | None = None  # the run's processes (--nproc, torchrun): a resume runs as many
    # `train --resume RUN --total-timesteps N` on a run: each extension, {at_step, from_total, to_total, time}
    continued: list[dict[str, Any]] = Field(default_factory=list)
    # `train.init`: the networks the run started from, {source, checkpoint, step, sha256} (None: fresh ones)
    init: dict[str, Any] | None = None
