"""PPO training throughput on Breakout: rlfoundry vs Stable-Baselines3, same settings, same process.

Both use CleanRL's / rl-zoo3's Atari PPO settings: 8 envs, 128 steps, 4 epochs of 4 minibatches (256),
lr 2.5e-4 linear, clip 0.1 linear, ent_coef 0.01, vf_coef 0.5, Nature CNN (512 units) shared by policy
and value, 84x84 grey frames stacked 4, frame skip 4 with max-pool, noop reset, episodic life, fire
reset, reward clipping.
  - rlfoundry: the ALE/Breakout-v5:ppo preset, ale_py's AtariVectorEnv (C++ threads), with sticky
    actions switched off so the emulator work matches SB3's NoFrameskip-v4 env.
  - SB3: `make_atari_env("BreakoutNoFrameskip-v4", n_envs=8)` (its AtariWrapper on a DummyVecEnv) and
    VecFrameStack(4), the setup of its documentation and of rl-zoo3.
Both on the CPU, each with its default torch threads (--threads N: both N), in fp32; with --bf16 rlfoundry also runs with
`train.precision=bf16` (mixed precision; SB3 has no such option). steps/s = env steps / wall time of
training (construction excluded); no evaluation.

Run:  python benchmarks/ppo_breakout_vs_sb3.py [--steps 16384] [--seeds 1] [--threads defaults|N] [--bf16] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import sys
import time

from common import parser, rlfoundry_threads, sb3_threads, side_by_side

N_ENVS = 8


def run_rlfoundry(seed: int, steps: int, threads: str | int, precision: str = "fp32") -> dict:
    from rlfoundry.bench.train import bench_train

    overrides = ["train.device=cpu", rlfoundry_threads(threads), "env.atari.repeat_action_probability=0.0",
                 f"train.precision={precision}"]
    result = bench_train("ALE/Breakout-v5:ppo", overrides, steps, seed)
    return {"steps": result["steps"], "wall": result["seconds"]}


def run_rlfoundry_bf16(seed: int, steps: int, threads: str | int) -> dict:
    return run_rlfoundry(seed, steps, threads, "bf16")


def run_sb3(seed: int, steps: int, threads: str | int) -> dict:
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    sb3_threads(threads)
    envs = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=N_ENVS, seed=seed), n_stack=4)
    model = PPO("CnnPolicy", envs, n_steps=128, n_epochs=4, batch_size=256, learning_rate=lambda p: 2.5e-4 * p,
                clip_range=lambda p: 0.1 * p, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, gamma=0.99,
                gae_lambda=0.95, device="cpu", seed=seed, verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return {"steps": model.num_timesteps, "wall": time.perf_counter() - start}


RUNNERS = {"rlfoundry": run_rlfoundry, "rlfoundry-bf16": run_rlfoundry_bf16, "sb3": run_sb3}


def main() -> int:
    options = parser(__doc__, 1, 16_384, "env steps per run (1,024 per iteration)")
    options.add_argument("--bf16", action="store_true", help="also run rlfoundry with train.precision=bf16")
    args = options.parse_args()
    return side_by_side(args, RUNNERS, "PPO Breakout (Nature CNN, 8 envs x 128 steps)", ["rlfoundry-bf16"] if args.bf16 else [])


if __name__ == "__main__":
    sys.exit(main())
