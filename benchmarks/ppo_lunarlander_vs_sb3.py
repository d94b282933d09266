"""PPO training throughput on LunarLander-v3: rlfoundry vs Stable-Baselines3, same settings, same process.

Both use rl-zoo3's tuned LunarLander PPO settings (its LunarLander-v2 entry; v3 is the fixed successor): 16 envs,
n_steps 1024, minibatches of 64, 4 epochs, gamma 0.999, gae_lambda 0.98, ent_coef 0.01, lr 3e-4, separate 64x64
tanh actor and critic (rlfoundry's LunarLander-v3:ppo preset; SB3's MlpPolicy). Each side steps its own default
vector env (rlfoundry: `auto` vectorization; SB3: DummyVecEnv). steps/s = env steps / wall time of training
(construction excluded); no evaluation. One iteration is 16,384 steps, so --steps should be a few of them.

Run:  python benchmarks/ppo_lunarlander_vs_sb3.py [--steps 32768] [--seeds 1] [--threads defaults|N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import sys
import time

from common import parser, rlfoundry_threads, sb3_threads, side_by_side


def run_rlfoundry(seed: int, steps: int, threads: str | int) -> dict:
    from rlfoundry.bench.train import bench_train

    result = bench_train("LunarLander-v3:ppo", ["train.device=cpu", rlfoundry_threads(threads)], steps, seed)
    return {"steps": result["steps"], "wall": result["seconds"]}


def run_sb3(seed: int, steps: int, threads: str | int) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    sb3_threads(threads)
    model = PPO("MlpPolicy", make_vec_env("LunarLander-v3", n_envs=16, seed=seed), n_steps=1024, batch_size=64,
                n_epochs=4, gamma=0.999, gae_lambda=0.98, ent_coef=0.01, learning_rate=3e-4, device="cpu", seed=seed,
                verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return {"steps": model.num_timesteps, "wall": time.perf_counter() - start}


RUNNERS = {"rlfoundry": run_rlfoundry, "sb3": run_sb3}


def main() -> int:
    return side_by_side(parser(__doc__, 1, 32_768).parse_args(), RUNNERS, "PPO LunarLander-v3 (zoo settings)")


if __name__ == "__main__":
    sys.exit(main())
