#!/usr/bin/env bash
# Python-binding tests on a GPU machine, in one call: every test in tests/python, the GPU ones
# (flash attention on CUDA, causal and not; DDP and ShardedOptimizer over NCCL on 2 GPUs) made to
# fail rather than skip when GPUs are missing (LMSCALE_REQUIRE_GPU=1, but 2-GPU tests on a 1-GPU
# machine only skip). Writes OUT/python_gpu.log, OUT/python_gpu.xml (JUnit) and OUT/summary.txt.
#
#   scripts/gpu/gpu_python.sh OUT          (after gpu_check.sh OUT build; no network needed)
#
# Expects an existing build (LMSCALE_BUILD_DIR, script_init.sh) with liblmscale.so and lmscale._C,
# and the interpreter that has torch 2.11 (LMSCALE_PYTHON, default python3). pytest must be
# importable; if it is not, a wheel in .whl/ is installed into OUT/.pytest (carry one with
# `pip download pytest -d .whl` on a machine with network).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
PY=${LMSCALE_PYTHON:-python3}
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
LOG=$OUT/python_gpu.log

fail() { echo "gpu_python: $*" | tee -a "$OUT/summary.txt" >&2; exit 1; }

[[ -f $LMSCALE_BUILD_DIR/liblmscale.so ]] ||
  fail "no liblmscale.so in $LMSCALE_BUILD_DIR; run scripts/gpu/gpu_check.sh OUT build first (or set LMSCALE_BUILD_DIR)."
compgen -G "$LMSCALE_BUILD_DIR/_C.*.so" >/dev/null ||
  fail "lmscale._C was not built in $LMSCALE_BUILD_DIR (its CMake warning names the cause, usually missing Python headers: apt-get install python3-dev), so DDP/ShardedOptimizer cannot be tested."
if ! "$PY" -c "import pytest" 2>/dev/null; then
  compgen -G "$ROOT/.whl/pytest-*.whl" >/dev/null ||
    fail "pytest is not installed for $PY and no wheel is in .whl/; carry one: pip download pytest -d .whl"
  "$PY" -m pip install -q --no-index --find-links "$ROOT/.whl" --target "$OUT/.pytest" pytest ||
    fail "installing pytest from .whl/ failed"
  export PYTHONPATH="$PYTHONPATH:$OUT/.pytest"
fi

torch_info=$("$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" 2>&1)
gpus=${torch_info##* gpus }
[[ $gpus =~ ^[0-9]+$ ]] || gpus=0
{
  echo "# $(date -u +%FT%TZ) commit ${LMSCALE_COMMIT:-unknown}"
  nvidia-smi --query-gpu=index,name,memory.total --format=csv 2>&1
  echo "$torch_info"
} >"$LOG" 2>&1

# 2-GPU tests may only skip where fewer than 2 GPUs exist; with any GPU, none may skip.
((gpus >= 1)) && export LMSCALE_REQUIRE_GPU=1
((gpus == 1)) && echo "note: 1 GPU, so the 2-GPU NCCL tests are deselected" | tee -a "$LOG"
select=()
((gpus == 1)) && select=(-k "not nccl")
# LMSCALE_PYTEST_K=<expr> runs only the matching tests (e.g. nccl on the 2-GPU kind, when the rest
# already ran on a 1-GPU machine at the same commit).
[[ -n ${LMSCALE_PYTEST_K:-} ]] && select=(-k "$LMSCALE_PYTEST_K${select[1]:+ and (${select[1]})}")

t0=$SECONDS
timeout 1200 "$PY" -m pytest -v -rs -s -p no:cacheprovider "$ROOT/tests/python" --junitxml="$OUT/python_gpu.xml" \
  -o junit_suite_name=lmscale-python-gpu "${select[@]}" >>"$LOG" 2>&1
rc=$?
echo "python-gpu rc=$rc $((SECONDS - t0))s gpus=$gpus $(tail -1 "$LOG")" | tee -a "$OUT/summary.txt"
exit $rc
