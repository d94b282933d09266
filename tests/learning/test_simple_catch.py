"""Learning: model-based SimPLe (the `simple` agent) learns rlfoundry/Catch-v0 from fewer real env steps than
model-free PPO. Per seed, both variants of the same preset run on the same budget of real steps with the same
evaluations; SimPLe's best evaluation return must reach the threshold and PPO's must not, both measured here.

Budget and threshold (presets/rlfoundry-Catch-v0.yaml has the measurements): `simple`'s best evaluation after its
4,000 real steps was 5.1 to 10.0 in seeds 1-4; `ppo` stays near random play (-6.6 to -6.9) until about 7,000 steps
and passed 5 at 12,288 in its faster seed. The threshold leaves room under SimPLe's worst seed seen.
"""

import pytest

import rlfoundry

CATCH = "rlfoundry/Catch-v0"
REAL_STEPS = 4000  # the simple variant's budget: 2,000 random steps and 2 epochs of 1,000
THRESHOLD = 3.0  # mean return of 20 greedy games: 6.5 of 10 balls caught; random play scores about -6.5


def _run(variant: str, seed: int, tmp_path, quiet) -> dict:
    _, summary = rlfoundry.train(
        f"{CATCH}:{variant}",
        # the same evaluations for both: every 1,000 real steps and at the end, greedy, 20 games (200 balls); one
        # torch thread, as measured (results depend on the thread count)
        [*quiet, "train.torch_threads=1", f"train.seed={seed}", f"train.total_timesteps={REAL_STEPS}",
         "eval.every_steps=1000",
         "eval.episodes=20", "eval.deterministic=true", "eval.stop_at_threshold=false", "checkpoint.every_steps=0"],
        tmp_path / variant,
    )
    assert summary["status"] == "finished" and summary["total_steps"] <= REAL_STEPS + 1024, summary
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_simple_learns_catch_in_fewer_real_steps_than_ppo(tmp_path, quiet, seed):
    simple = _run("simple", seed, tmp_path, quiet)
    ppo = _run("ppo", seed, tmp_path, quiet)
    assert simple["best_eval_return"] >= THRESHOLD > ppo["best_eval_return"], (
        f"after {REAL_STEPS} real steps: simple {simple['best_eval_return']}, ppo {ppo['best_eval_return']}; "
        f"expected simple >= {THRESHOLD} > ppo")
