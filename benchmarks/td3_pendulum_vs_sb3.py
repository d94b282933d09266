"""TD3 on Pendulum-v1: rlfoundry vs Stable-Baselines3 at the zoo's settings, same process: throughput and the return.

Both use rl-baselines3-zoo's Pendulum-v1 TD3 settings (rlfoundry's Pendulum-v1:td3 preset): 1 env, γ 0.98, buffer
2e5, 10k uniformly random steps first, Gaussian action noise σ 0.1, lr 1e-3, 400x300 ReLU actor and critics, one
gradient step per env step; SB3's TD3 defaults for the rest (batch 256, τ 0.005, policy delay 2, target noise 0.2
clipped at 0.5). Each run trains `--steps` env steps (the zoo's budget: 20,000) and then evaluates its
deterministic policy over 10 episodes (seeded apart from training); steps/s is env steps over training's wall
time, the evaluation excluded. `--learning-starts N` shortens the random phase (to measure the updates' speed with
fewer steps). `--ddpg` runs DDPG instead (one critic, no smoothing, no delay), SB3's DDPG beside it.

Run:  python benchmarks/td3_pendulum_vs_sb3.py [--steps 20000] [--seeds 2] [--threads defaults|N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import frameworks, in_turn, parser, publish, rlfoundry_threads, sb3_missing, sb3_threads, threads_label

from rlfoundry.run.hardware import machine

EPISODES = 10
EVAL_SEED = 10_000  # the evaluation episodes' seeds start here, for both frameworks


def run_rlfoundry(seed: int, args) -> dict:
    import rlfoundry

    overrides = ["train.device=cpu", rlfoundry_threads(args.threads), f"train.seed={seed}",
                 f"train.total_timesteps={args.steps}", f"algo.learning_starts={args.learning_starts}",
                 "eval.every_steps=0", "eval.at_end=true", f"eval.episodes={EPISODES}", "eval.stop_at_threshold=false",
                 "logging.progress=false", "logging.tensorboard=false"]
    with tempfile.TemporaryDirectory(prefix="rlfoundry_bench_") as tmp:
        run_dir, summary = rlfoundry.train(f"Pendulum-v1:{args.algo}", [*overrides, f"logging.runs_root={tmp}"],
                                           Path(tmp) / "run")
        with open(run_dir / "metrics.csv", newline="") as f:
            evaluation = sum(float(row.get("time/eval") or 0) for row in csv.DictReader(f))
    return {"steps": summary["total_steps"], "wall": summary["wall_time_s"] - evaluation,
            "return": summary["eval_return_mean"]}


def run_sb3(seed: int, args) -> dict:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import DDPG, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    sb3_threads(args.threads)
    algo = DDPG if args.algo == "ddpg" else TD3
    model = algo("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1, seed=seed), learning_rate=1e-3,
                 buffer_size=200_000, learning_starts=args.learning_starts, gamma=0.98, train_freq=1, gradient_steps=1,
                 action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
                 policy_kwargs={"net_arch": [400, 300]}, device="cpu", seed=seed, verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - start
    env, returns = gym.make("Pendulum-v1"), []
    for episode in range(EPISODES):
        obs, _ = env.reset(seed=EVAL_SEED + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return {"steps": model.num_timesteps, "wall": wall, "return": float(np.mean(returns))}


RUNNERS = {"rlfoundry": run_rlfoundry, "sb3": run_sb3}


def main() -> int:
    cli = parser(__doc__, 2, 20_000)
    cli.add_argument("--learning-starts", type=int, default=10_000)
    cli.add_argument("--ddpg", dest="algo", action="store_const", const="ddpg", default="td3")
    args = cli.parse_args()
    names = frameworks(args.only)
    if sb3_missing(names):
        return 2
    print(machine(), flush=True)
    results: dict[str, list[dict]] = {name: [] for name in names}
    for seed in range(1, args.seeds + 1):
        for name in in_turn(names, seed):
            run = RUNNERS[name](seed, args)
            results[name].append(run)
            print(f"seed {seed} {name:9s}: {run['steps']:,} steps in {run['wall']:.1f} s "
                  f"({run['steps'] / run['wall']:,.0f} steps/s), evaluation return {run['return']:.1f}", flush=True)
    sps = {name: statistics.median(r["steps"] / r["wall"] for r in runs) for name, runs in results.items()}
    lines = [f"{args.algo.upper()} Pendulum-v1 (zoo settings, learning from step {args.learning_starts:,}), "
             f"{args.seeds} seed(s), {threads_label(args.threads)}, {args.steps:,} steps per run", machine(), "",
             "| framework | steps/s (median) | vs SB3 | evaluation return per seed (10 episodes) |",
             "|---|---:|---:|---|"]
    for name in names:
        ratio = f"{sps[name] / sps['sb3']:.2f}x" if "sb3" in sps else "-"
        per_seed = ", ".join(f"{run['return']:.1f}" for run in results[name])
        lines.append(f"| {name} | {sps[name]:,.0f} | {ratio} | {per_seed} |")
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
