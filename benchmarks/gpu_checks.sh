#!/bin/bash
# The checks that need a CUDA GPU, in one command sized for a short lease of a GPU machine:
#   1. the CUDA-only tests: every CUDA-graphed gradient step replays equal to eager over 100 updates, every acting
#      step and the simulated env step equal to eager, and a graphed
#      run killed and resumed equals the uninterrupted one (tests/unit/test_graphs_cuda.py); the memory cores against
#      the CPU and mamba-ssm's kernels (tests/unit/test_cores_cuda.py); replays mirrored on the GPU sample what the
#      host ones do (tests/unit/test_device_replay.py);
#   2. benchmarks/gpu_speed.py: rlfoundry beside Stable-Baselines3 and graphed beside eager, rows started until
#      SECONDS after the start (a row that has started finishes).
#
#   bash benchmarks/gpu_checks.sh [SECONDS] [OUT]       # defaults: 420 s, ./gpu-checks
#
# Needs rlfoundry importable (installed, or PYTHONPATH=src with its dependencies) and a CUDA torch. On a machine
# without a package index, wheels in ./.whl (docs/developer/gpu.md) are installed into /tmp/site first.
# OUT receives checks.log (everything), speed.md (the table) and speed.log (the benchmark's own output).
set -u
T0=$(date +%s)
DEADLINE=${1:-420}
OUT=$(realpath -m "${2:-gpu-checks}")
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
log() { echo "=== $(( $(date +%s) - T0 )) s: $*"; }
export PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD/src:${PYTHONPATH:-}"
fi
{
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'CUDA', torch.version.cuda)"

log CUDA tests
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/unit/test_graphs_cuda.py \
    tests/unit/test_cores_cuda.py tests/unit/test_device_replay.py -k "not trains_to_the_same" 2>&1 | tail -30

LEFT=$(( DEADLINE - ($(date +%s) - T0) )); [ "$LEFT" -lt 60 ] && LEFT=60
log "speed table, rows started within $LEFT s"
python3 benchmarks/gpu_speed.py --budget "$LEFT" --out "$OUT/speed.md" > "$OUT/speed.log" 2>&1
log "speed table done: rc $?"
grep -v "settotalmass\|^$" "$OUT/speed.log" | tail -40
log done
} 2>&1 | tee "$OUT/checks.log"
