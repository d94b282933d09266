#!/bin/bash
# A DreamerV3 training curve on a GPU for as long as a short lease allows: SEEDS runs of SPEC side by side on one
# GPU (each worker gets its share of the host's cores: at size1m the update waits on the host, so parallel seeds
# cost little of each other's speed), stopped with SIGTERM after SECONDS (they checkpoint; the same command with
# the same OUT continues them on that machine), then the binned curve of their training episodes.
#
#   bash benchmarks/gpu_curve.sh [SPEC] [SEEDS] [SECONDS] [OUT]
#   # defaults: ALE/Breakout-v5:dreamer (Atari 100k settings), 6, 420 s, ./gpu-curve
#
# Needs rlfoundry importable and a CUDA torch. OUT receives curve.md, curve.png, episodes.csv, curve.log and runs.tgz (each run's
# metrics.csv, run.log, config.yaml, summary.json and curves.png; checkpoints stay behind).
set -u
SPEC=${1:-ALE/Breakout-v5:dreamer}
SEEDS=${2:-6}
DEADLINE=${3:-420}
OUT=$(realpath -m "${4:-gpu-curve}")
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
RUNS=benchmarks/runs/gpu-curve
export PYTHONUNBUFFERED=1
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout -s TERM "$DEADLINE" python3 -m rlfoundry.cli trials "$SPEC" --seeds "$SEEDS" --workers "$SEEDS" \
    --out "$RUNS" train.device=cuda
echo "trials stopped: rc $?"  # 124: the deadline; trials returns once its runs have checkpointed (up to a minute)
python3 benchmarks/episode_curve.py "$RUNS" --out "$OUT/curve.md" --png "$OUT/curve.png" \
    --csv "$OUT/episodes.csv"
tar czf "$OUT/runs.tgz" $(find "$RUNS" \( -name metrics.csv -o -name run.log -o -name summary.json \
    -o -name config.yaml -o -name curves.png \) -not -path '*/checkpoints/*')
} 2>&1 | tee "$OUT/curve.log"
