"""Learning in bf16: where the CPU runs bfloat16 natively (AVX-512 BF16 or AMX), PPO with the grid encoder in bf16
mixed precision solves MiniGrid-Empty-5x5-v0 within the budget its fp32 learning test has (test_ppo_minigrid.py),
for the same seeds: the case `train.precision=auto` picks bf16 for (an image encoder on native bf16). Elsewhere bf16
is emulated, ten times slower, and `auto` never picks it: the test is skipped, saying so."""

import pytest

import rlfoundry
from rlfoundry.run import hardware

CPU = hardware.detect()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CPU.cpu_bf16, reason=f"the CPU ({CPU.cpu}: {', '.join(CPU.extensions) or 'no extensions'}) "
                       "has no native bfloat16 (AVX-512 BF16 or AMX): bf16 would be emulated"),
]


@pytest.mark.parametrize("seed", [1, 2])
def test_bf16_ppo_solves_minigrid_empty_5x5(tmp_path, quiet, seed):
    _, summary = rlfoundry.train("MiniGrid-Empty-5x5-v0:ppo", [*quiet, f"train.seed={seed}", "train.precision=bf16",
                                                              "train.total_timesteps=50000"], tmp_path / "run")
    assert summary["solved_at_step"] is not None and summary["best_eval_return"] >= 0.91, summary
