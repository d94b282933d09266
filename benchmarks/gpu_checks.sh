#!/bin/bash
# The checks that need a CUDA GPU, in one command sized for a short lease of a GPU machine:
#   1. `presets --smoke` over Pendulum-v1 (every algorithm family that plans or imagines, vectors and pixels);
#   2. DreamerV3's update speed on the GPU (benchmarks/dreamer_speed.py --device cuda), with the GPU to itself;
#   3. the CUDA-only tests (tests/unit/test_cores_cuda.py: memory cores against the CPU, mamba-ssm's kernels);
#   4. the DreamerV3 Pendulum suite in the background until SECONDS after the start (its runs then checkpoint and
#      stop; the same command later continues them), with the smoke runs of CartPole-v1, Catch and Pong beside it.
#
#   bash benchmarks/gpu_checks.sh [SECONDS] [OUT]       # defaults: 480 s, ./gpu-checks
#
# Needs rlfoundry importable (installed, or PYTHONPATH=src with its dependencies) and a CUDA torch; mamba-ssm is
# optional (without it the kernel tests skip). OUT receives checks.log, suite.log and dreamer.tgz (the suite's kept
# results, its table, and each run's metrics.csv, run.log, summary.json and config.yaml).
# Last run on an NVIDIA H100, 2026-11-26: README, sections Memory cores and DreamerV3 and PlaNet.
set -u
T0=$(date +%s)
DEADLINE=${1:-480}
OUT=$(realpath -m "${2:-gpu-checks}")
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
SUITE_ARGS=(--suite benchmarks/dreamer-pendulum.yaml --out benchmarks/runs/dreamer-pendulum
            --table docs/BENCHMARKS-dreamer-pendulum.md)
log() { echo "=== $(( $(date +%s) - T0 )) s: $*"; }
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import sys, torch, rlfoundry.nets.cores as c; print(sys.version, 'torch', torch.__version__, 'CUDA',
torch.version.cuda, 'selective_scan_fn', c.selective_scan_fn is not None, 'mamba_chunk_scan_combined',
c.mamba_chunk_scan_combined is not None)"

log smoke Pendulum-v1
timeout 120 python3 -m rlfoundry.cli presets --smoke Pendulum-v1 2>&1 | tail -12
log dreamer_speed
timeout 150 python3 benchmarks/dreamer_speed.py --device cuda --sizes size1m,size12m --kinds vector,pixels \
    --seconds 5 --threads 2 2>&1 | grep -v USDT
log CUDA tests
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/unit/test_cores_cuda.py 2>&1 | tail -25

log suite starts
LEFT=$(( DEADLINE - ($(date +%s) - T0) )); [ "$LEFT" -lt 60 ] && LEFT=60
timeout -s TERM "$LEFT" python3 benchmarks/suite.py "${SUITE_ARGS[@]}" --workers 6 > "$OUT/suite.log" 2>&1 &
SUITE=$!
sleep 5
log smoke CartPole-v1, Catch and Pong beside the suite
timeout 200 python3 -m rlfoundry.cli presets --smoke CartPole-v1 2>&1 | tail -16
timeout 100 python3 -m rlfoundry.cli presets --smoke Catch 2>&1 | tail -4
timeout 150 python3 -m rlfoundry.cli presets --smoke Pong 2>&1 | tail -8
wait $SUITE
log suite stopped: rc $?
tail -5 "$OUT/suite.log"
timeout 60 python3 benchmarks/suite.py "${SUITE_ARGS[@]}" --report-only 2>&1 | tail -3
tar czf "$OUT/dreamer.tgz" docs/BENCHMARKS-dreamer-pendulum.md $(ls -d benchmarks/results/dreamer-pendulum 2>/dev/null) \
    $(find benchmarks/runs/dreamer-pendulum \( -name metrics.csv -o -name run.log -o -name summary.json \
      -o -name config.yaml \) -not -path '*/checkpoints/*')
log done
} 2>&1 | tee "$OUT/checks.log"
