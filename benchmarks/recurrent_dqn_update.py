"""One DQN gradient step with each memory core against the feed-forward one, at the same batch of trained
transitions, and the share of it that sampling the replay takes.

CartPole-v1 with the velocities hidden, the `dqn` preset's network width (`--hidden`), a replay filled with
`--fill` steps of ε-greedy play; each core's update samples `batch_size // sequence_length` sequences (plus burn-in
and n-step rows), the feed-forward one `batch_size` transitions. One torch thread; the median of --repeats timings
of --calls updates, in ms. The issue's targets: a recurrent update within 3× the feed-forward one, sampling under
10% of an update.

    python benchmarks/recurrent_dqn_update.py [--cores identity,lstm,gru,trxl,gtrxl,mamba,mamba2] [--batch 64]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import per_call_ms

import rlfoundry.envs as envs_lib
from rlfoundry.algos.base import Runtime
from rlfoundry.algos.registry import algorithm
from rlfoundry.buffers.replay import collect, start_envs
from rlfoundry.experiment.load import load_config
from rlfoundry.run.hardware import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", default="identity,lstm,gru,trxl,gtrxl,mamba,mamba2")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fill", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("overrides", nargs="*", help="config overrides for every core (e.g. algo.burn_in=0)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(machine())
    print(f"CartPole-v1 (velocities hidden), batch {args.batch} trained transitions, width {args.hidden}, 1 thread\n")
    print("| core | update (ms) | × feed-forward | sample (ms) | sample share |")
    print("| --- | ---: | ---: | ---: | ---: |")
    base = None
    for core in args.cores.split(","):
        cfg = load_config("CartPole-v1:dqn", [
            f"network.core={core}", "env.mask_obs=[1,3]", f"network.hidden_sizes=[{args.hidden}]",
            f"network.core_hidden={args.hidden}", f"algo.batch_size={args.batch}", "algo.learning_starts=0",
            *args.overrides])
        envs, spec = envs_lib.build(cfg.env, gamma=cfg.algo.gamma)
        agent = algorithm("dqn")(cfg, spec, Runtime.of(cfg.train, "cpu"))
        agent.obs = start_envs(envs, agent.replay, 1)
        collect(envs, agent.replay, agent.obs, agent.explore, args.fill)
        envs.close()
        update = per_call_ms(lambda agent=agent: agent.update(0.5), args.calls, args.repeats)
        count = agent.sequences if agent.recurrent else agent.algo.batch_size
        rng = np.random.default_rng(0)
        sample = per_call_ms(lambda agent=agent, count=count, rng=rng: agent.replay.sample(count, rng), args.calls,
                             args.repeats)
        base = base or update
        print(f"| {core} | {update:.2f} | {update / base:.1f}× | {sample:.2f} | {sample / update:.0%} |", flush=True)


if __name__ == "__main__":
    main()
