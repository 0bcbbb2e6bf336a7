#!/usr/bin/env bash
# The Python package on a GPU machine as a user installs it, then the drop-in benchmark: builds the
# wheel (`pip wheel ./python`, timed, into build-gpu-wheel/, kept while the machine stays
# warm so a second call only installs), installs it into an empty folder, runs the GPU tests of the
# lmscale.nn ops and SDPA's contract against that install from outside the checkout, then
# `python -m lmscale.drop_in_bench` (docs/python.md, "The drop-in benchmark"). Liger-Kernel comes as a carried wheel.
#
#   scripts/gpu/drop_in.sh OUT [tests] [host SIZE] [bench SIZE...]     (default: tests bench small)
#
# `host SIZE` runs the probe tools/probes/drop_in/drop_in_host.py: the compiled step's host time per impl and each
# lmscale op's host time per call, with the ops' autograd dispatch as now and as before (emulated).
#
# Carry .deps/ and .whl/ (liger_kernel-*.whl, and the wheel's build backend offline: scikit_build_core,
# pathspec and packaging wheels, `pip download -c constraints.txt scikit-build-core -d .whl`); set LMSCALE_COMMIT=<sha>.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
export LMSCALE_REQUIRE_GPU=1
PY=${LMSCALE_PYTHON:-python3}
SITE=/tmp/lmscale-site
stages=("$@")
((${#stages[@]})) || stages=(tests bench small)

if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/lmscale-deps \
    "$ROOT"/.whl/*.whl || exit 1
fi
start=$(date +%s)
rm -rf /tmp/lmscale-dist "$SITE"
# pip's build of the wheel, in its own folder beside the one build (it configures its own CMake);
# WHEEL_BUILD_DIR=$LMSCALE_BUILD_DIR reuses what gpu_check.sh compiled on this machine.
# No build isolation (no registry here): the backend comes from the carried wheels in /tmp/lmscale-deps.
LMSCALE_BUILD_DIR=${WHEEL_BUILD_DIR:-$LMSCALE_BUILD_DIR-wheel} LMSCALE_JOBS=${LMSCALE_JOBS:-16} \
  PYTHONPATH=/tmp/lmscale-deps${PYTHONPATH:+:$PYTHONPATH} "$PY" -m pip wheel -v --no-build-isolation --no-deps -w /tmp/lmscale-dist "$ROOT/python" >"$OUT/wheel_build.log" 2>&1 ||
  { tail -40 "$OUT/wheel_build.log"; exit 1; }
echo "pip wheel: $(($(date +%s) - start)) s; $(ls -l /tmp/lmscale-dist/*.whl | awk '{print $5, $NF}')" | tee "$OUT/wheel.txt"
"$PY" -m pip install -q --no-deps --no-index --target "$SITE" /tmp/lmscale-dist/*.whl || exit 1
export PYTHONPATH=$SITE:/tmp/lmscale-deps
cd /tmp || exit 1  # from outside the checkout: the installed package, nothing of the source tree

while ((${#stages[@]})); do
  case ${stages[0]} in
    tests)
      "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/python/test_nn.py" "$ROOT/tests/python/test_attention_sdpa.py" \
        >"$OUT/gpu_tests.log" 2>&1
      tail -3 "$OUT/gpu_tests.log"
      stages=("${stages[@]:1}") ;;
    host)
      "$PY" "$ROOT/tools/probes/drop_in/drop_in_host.py" --size "${stages[1]:?host needs a SIZE}" 2>&1 | tee -a "$OUT/host.log"
      stages=("${stages[@]:2}") ;;
    bench)
      sizes=(); stages=("${stages[@]:1}")
      while ((${#stages[@]})) && [[ ${stages[0]} != tests && ${stages[0]} != host ]]; do sizes+=("${stages[0]}"); stages=("${stages[@]:1}"); done
      (cd "$OUT" && "$PY" -m lmscale.drop_in_bench --sizes "${sizes[@]}" --out drop_in.jsonl) 2>&1 | tee -a "$OUT/bench.log" ;;
    *) echo "drop_in.sh: unknown stage ${stages[0]} (tests, host SIZE, bench SIZE...)" >&2; exit 2 ;;
  esac
done
