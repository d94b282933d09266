"""SAC training throughput on Pendulum-v1: rlfoundry vs Stable-Baselines3, same settings, same process.

Both use rl-zoo3's Pendulum-v1 SAC settings, which are SB3's SAC defaults with lr 1e-3 (rlfoundry's
Pendulum-v1:sac preset): 1 env, buffer 1e6, 100 random steps first, batch 256, one gradient step per env
step, τ 0.005, γ 0.99, α learned from 1 towards −dim A, 256x256 ReLU actor and twin critics.
steps/s = env steps / wall time of training (construction excluded); no evaluation.

Run:  python benchmarks/sac_pendulum_vs_sb3.py [--steps 3000] [--seeds 2] [--threads defaults|N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import sys
import time

from common import parser, rlfoundry_threads, sb3_threads, side_by_side


def run_rlfoundry(seed: int, steps: int, threads: str | int) -> dict:
    from rlfoundry.bench.train import bench_train

    result = bench_train("Pendulum-v1:sac", ["train.device=cpu", rlfoundry_threads(threads)], steps, seed)
    return {"steps": result["steps"], "wall": result["seconds"]}


def run_sb3(seed: int, steps: int, threads: str | int) -> dict:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    sb3_threads(threads)
    model = SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1, seed=seed), learning_rate=1e-3,
                buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005, gamma=0.99, train_freq=1,
                gradient_steps=1, ent_coef="auto", device="cpu", seed=seed, verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return {"steps": model.num_timesteps, "wall": time.perf_counter() - start}


RUNNERS = {"rlfoundry": run_rlfoundry, "sb3": run_sb3}


def main() -> int:
    return side_by_side(parser(__doc__, 2, 3_000).parse_args(), RUNNERS, "SAC Pendulum-v1 (zoo settings)")


if __name__ == "__main__":
    sys.exit(main())
