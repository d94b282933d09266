"""DQN training throughput on CartPole-v1: rlfoundry vs Stable-Baselines3, same settings, same process.

Both use rl-zoo3's tuned CartPole-v1 DQN settings: 1 env, lr 2.3e-3, batch 64, buffer 1e5, learning
starts 1000, target update every 10 steps, train every 256 steps with 128 gradient steps, ε 1 → 0.04
over 16% of training, a 256x256 ReLU MLP, Huber loss, grad norm 10 (rlfoundry's CartPole-v1:dqn preset).
rlfoundry runs plain DQN here (`algo.double=false`) because SB3's DQN is not double.
steps/s = env steps / wall time of training (construction excluded); no evaluation.

Run:  python benchmarks/dqn_cartpole_vs_sb3.py [--steps 20000] [--seeds 2] [--threads defaults|N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import sys
import time

from common import parser, rlfoundry_threads, sb3_threads, side_by_side


def run_rlfoundry(seed: int, steps: int, threads: str | int) -> dict:
    from rlfoundry.bench.train import bench_train

    overrides = ["train.device=cpu", rlfoundry_threads(threads), "algo.double=false"]
    result = bench_train("CartPole-v1:dqn", overrides, steps, seed)
    return {"steps": result["steps"], "wall": result["seconds"]}


def run_sb3(seed: int, steps: int, threads: str | int) -> dict:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    sb3_threads(threads)
    model = DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=seed), learning_rate=2.3e-3, batch_size=64,
                buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
                gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                policy_kwargs={"net_arch": [256, 256]}, device="cpu", seed=seed, verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return {"steps": model.num_timesteps, "wall": time.perf_counter() - start}


RUNNERS = {"rlfoundry": run_rlfoundry, "sb3": run_sb3}


def main() -> int:
    return side_by_side(parser(__doc__, 2, 20_000).parse_args(), RUNNERS, "DQN CartPole-v1 (zoo settings)")


if __name__ == "__main__":
    sys.exit(main())
