"""PPO on CartPole-v1: rlfoundry vs Stable-Baselines3, same hyperparameters, same process.

Both frameworks use rl-zoo3's tuned CartPole-v1 PPO settings: 8 envs, n_steps 32, one minibatch of 256,
20 epochs, gamma 0.98, gae_lambda 0.8, lr linear 1e-3 -> 0, clip range linear 0.2 -> 0, ent_coef 0,
separate 64x64 tanh actor and critic (SB3's MlpPolicy default; rlfoundry's CartPole-v1:ppo preset).
Both run on the CPU, in one process, each with its default torch threads (--threads N: both N); each uses
its own default vector env (rlfoundry: Gymnasium's numpy CartPole vector env; SB3: its DummyVecEnv).

Two measurements per framework and seed:
  1. throughput: train --steps env steps with no evaluation; steps/s = steps / wall time of training
     (SB3: the `learn` call; rlfoundry: the summary's training-loop wall time; construction excluded).
  2. time to solve: train up to --solve-steps, evaluating every 5,000 steps with 10 deterministic
     episodes on separate envs, stopping at the first mean return >= 475; wall time includes evaluation.

Run:  python benchmarks/ppo_cartpole_vs_sb3.py [--seeds 3] [--steps 50000] [--threads defaults|N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import add_threads, frameworks, in_turn, rlfoundry_threads, sb3_missing, sb3_threads, threads_label

from rlfoundry.run.hardware import machine

SOLVED = 475.0
EVAL_EVERY = 5_000
EVAL_EPISODES = 10
N_ENVS = 8


# ---------------------------------------------------------------- rlfoundry

def run_rlfoundry(seed: int, steps: int, threads: str | int, solve: bool, tmp: Path) -> dict:
    from rich.console import Console

    import rlfoundry
    from rlfoundry.experiment.load import load_config

    overrides = [
        f"train.seed={seed}", "train.device=cpu", rlfoundry_threads(threads), f"train.total_timesteps={steps}",
        "logging.progress=false", "logging.tensorboard=false", f"logging.runs_root={tmp}",
        "eval.at_end=false",
    ]
    if solve:
        overrides += [f"eval.every_steps={EVAL_EVERY}", f"eval.episodes={EVAL_EPISODES}", "eval.stop_at_threshold=true"]
    else:
        overrides += ["eval.every_steps=0", "eval.stop_at_threshold=false"]
    cfg = load_config("CartPole-v1:ppo", overrides)
    run_dir = tmp / f"rlfoundry_s{seed}_{'solve' if solve else 'sps'}"
    _, summary = rlfoundry.train(cfg, run_dir=run_dir, console=Console(quiet=True))
    return {"steps": summary["total_steps"], "wall": summary["wall_time_s"], "solved_at": summary["solved_at_step"]}


# ---------------------------------------------------------------- Stable-Baselines3

def linear(start: float):
    # SB3 passes progress_remaining, which goes 1 -> 0 over training.
    return lambda progress_remaining: start * progress_remaining


def run_sb3(seed: int, steps: int, threads: str | int, solve: bool, tmp: Path) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    sb3_threads(threads)
    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed), n_steps=32, batch_size=256,
                n_epochs=20, gae_lambda=0.8, gamma=0.98, learning_rate=linear(1e-3), clip_range=linear(0.2),
                ent_coef=0.0, device="cpu", seed=seed, verbose=0)
    callback = None
    if solve:
        eval_env = make_vec_env("CartPole-v1", n_envs=EVAL_EPISODES, seed=seed + 10_000)
        callback = EvalCallback(eval_env, callback_on_new_best=StopTrainingOnRewardThreshold(SOLVED, verbose=0),
                                n_eval_episodes=EVAL_EPISODES, eval_freq=EVAL_EVERY // N_ENVS, deterministic=True,
                                verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    wall = time.perf_counter() - start
    solved = callback is not None and callback.best_mean_reward >= SOLVED
    return {"steps": model.num_timesteps, "wall": wall, "solved_at": model.num_timesteps if solved else None}


RUNNERS = {"rlfoundry": run_rlfoundry, "sb3": run_sb3}


# ---------------------------------------------------------------- report

def fmt_solve(runs: list[dict]) -> tuple[str, str, str]:
    """Median time and steps to solve over the solved seeds, plus the per-seed detail."""
    hits = [r for r in runs if r["solved_at"] is not None]
    per_seed = ", ".join(f"{r['wall']:.1f}s/{r['solved_at']:,}" if r["solved_at"] is not None else "not solved"
                         for r in runs)
    if not hits:
        return "not solved", "not solved", per_seed
    note = "" if len(hits) == len(runs) else f" ({len(hits)}/{len(runs)} solved)"
    time_s = f"{statistics.median(r['wall'] for r in hits):.1f}{note}"
    steps = f"{statistics.median(r['solved_at'] for r in hits):,.0f}"
    return time_s, steps, per_seed


def table(results: dict, args) -> str:
    sps = {name: statistics.median(r["steps"] / r["wall"] for r in res["sps"]) for name, res in results.items()}
    lines = [
        f"PPO CartPole-v1, {args.seeds} seed(s), {threads_label(args.threads)}; throughput over {args.steps:,} steps, "
        f"solve budget {args.solve_steps:,} steps (eval every {EVAL_EVERY:,}, {EVAL_EPISODES} episodes, >= {SOLVED:g})",
        machine(),
        "",
        "| framework | steps/s (median) | steps/s per seed | vs SB3 | time to 475 (s, median) "
        "| steps to 475 (median) | per seed (time/steps) |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for name, res in results.items():
        per_seed = ", ".join(f"{r['steps'] / r['wall']:,.0f}" for r in res["sps"])
        ratio = f"{sps[name] / sps['sb3']:.2f}x" if "sb3" in sps else "-"
        time_s, steps, detail = fmt_solve(res["solve"])
        lines.append(f"| {name} | {sps[name]:,.0f} | {per_seed} | {ratio} | {time_s} | {steps} | {detail} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    parser.add_argument("--steps", type=int, default=50_000, help="env steps for the throughput run")
    parser.add_argument("--solve-steps", type=int, default=100_000, help="env step budget for the solve run")
    add_threads(parser)
    parser.add_argument("--only", choices=("both", "rlfoundry", "sb3"), default="both")
    parser.add_argument("--out", type=Path, help="also write the results table (markdown) here")
    args = parser.parse_args()

    names = frameworks(args.only)
    if sb3_missing(names):
        return 2

    results = {name: {"sps": [], "solve": []} for name in names}
    with tempfile.TemporaryDirectory(prefix="rlf_bench_") as tmp:
        for seed in range(1, args.seeds + 1):
            for kind, steps in (("sps", args.steps), ("solve", args.solve_steps)):
                for name in in_turn(names, seed):
                    run = RUNNERS[name](seed, steps, args.threads, kind == "solve", Path(tmp))
                    results[name][kind].append(run)
                    solved = "" if kind == "sps" else f", solved at {run['solved_at'] or '-'}"
                    print(f"seed {seed} {name:9s} {kind:5s}: {run['steps']:,} steps in {run['wall']:.1f} s "
                          f"({run['steps'] / run['wall']:,.0f} steps/s{solved})", flush=True)

    report = table(results, args)
    print("\n" + report)
    if args.out:
        args.out.write_text(report + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
