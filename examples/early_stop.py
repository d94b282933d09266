"""Early stop on a metric of your own: a callback ends a CartPole PPO run once the mean return of the latest
training episodes (`train/return_mean`) reaches 200. The run ends as a stop signal ends it: a checkpoint, status
`stopped`, a line in run.log with the reason; `rlfoundry train --resume RUN_DIR` would continue it.

    .venv/bin/python examples/early_stop.py [TARGET] [OVERRIDES ...]    # e.g. 100 train.seed=2
"""

import sys

import rlfoundry


class StopAtReturn(rlfoundry.Callback):
    def __init__(self, target: float):
        self.target = target

    def on_iteration(self, ctx, row):
        mean = row["train/return_mean"]  # None until an episode has ended
        if mean is not None and mean >= self.target:
            ctx.stop(f"train/return_mean {mean:.1f} ≥ {self.target}")


if __name__ == "__main__":
    target = float(sys.argv[1]) if len(sys.argv) > 1 else 200.0
    run_dir, summary = rlfoundry.train("CartPole-v1:ppo", ["eval.stop_at_threshold=false", *sys.argv[2:]],
                                       callbacks=[StopAtReturn(target)])
    print(f"{summary['status']} at step {summary['total_steps']:,}: {run_dir}")
