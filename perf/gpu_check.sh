#!/usr/bin/env bash
# The GPU check (perf/gpu_check.py holds its documentation and steps, perf/gpucheck/ the parts):
#   perf/gpu_check.sh --bundle [DIR]   here, with network: gather .gpu-bundle/ for the GPU machine
#   perf/gpu_check.sh [--json-out F]   on the GPU machine, from the repository root
#   perf/gpu_check.sh --dry-run        any machine: every step on the CPU at a tiny scale
# Exit status: 0 all parts passed, 1 a part failed, 2 the check could not start.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's own venv where there is one (here); on the GPU machine, the python that holds
# torch (PYTHON overrides both).
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$PYTHON" perf/gpu_check.py "$@"
