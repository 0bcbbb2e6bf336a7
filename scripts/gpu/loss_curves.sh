#!/usr/bin/env bash
# The loss curves of issue 27's numerics goal on one GPU (docs/training.md): the corpus from this
# machine's Python standard library, then 2,000 steps of `small` for lmscale and the PyTorch reference
# (same initial weights, same batches, same learning rates) at every precision asked for, then the
# report (train.md, train_compare.md, train.png). One call of the device tool when the build fits in it.
#
#   scripts/gpu/loss_curves.sh OUT [PRECISIONS]
#
# PRECISIONS: a comma list (default bf16, plus fp8 when this build's `lmscale train --precision`
# accepts it; the reference trains bf16 and fp16 only, its fp8 run is recorded as skipped). Knobs:
# SIZE (small), STEPS (2000), EVAL_EVERY (100), EVAL_BATCHES (16), BATCH (4), CONTEXT (512),
# LMSCALE_BUILD_DIR (script_init.sh: kept while the machine is held, so a second call skips the
# build), LMSCALE_CMAKE_ARGS (e.g. "-DLMSCALE_FA_HEADDIMS=64 -DLMSCALE_FA_DTYPES=bf16": small needs
# only head dim 64; a quicker build), LMSCALE_COMMIT (the GPU machine has no .git), LMSCALE_PYTHON,
# IMPLS (lmscale,torch-eager), TRAIN_ARGS (more `lmscale train` flags, e.g. "--fp8-min-dim 0": small's
# layers are all under the FP8 default's 1024, so its fp8 run is bf16 unless told otherwise).
# Runs resume from OUT's earlier records (or from .gpu-carry/loss_curves/train.jsonl when carried):
# a call cut by the time limit goes on where the records stop. The training runs inside OUT, so what
# a cut call measured comes back with it.
#
# OUT receives build.log, corpus.json, train.log, loss_curves/ (train.jsonl, train_compare.md) and
# report/ (train.md, train.png, index.md): `lmscale report --in OUT/loss_curves --out docs/results`
# brings the records into the repo.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
export LMSCALE_PYTHON=${LMSCALE_PYTHON:-$(command -v python3)}
LMSCALE=$BIN
if [[ ! -x $LMSCALE ]]; then
  start=$SECONDS
  LMSCALE_BUILD_TARGETS=lmscale_cli "$ROOT/lmscale" build >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "built $LMSCALE in $((SECONDS - start)) s"
fi
RES=$LMSCALE_BUILD_DIR/results
mkdir -p "$RES"
(cd "$RES" && { [[ -f corpus/train.bin ]] || "$LMSCALE" train corpus --out corpus; }) || exit 1
# Train inside OUT, so the records come back even when the call is cut short; `corpus` is a link to
# the token files (not brought back), and the recorded command names relative paths only.
cd "$OUT" || exit 1
ln -sfn "$RES/corpus" corpus
cp corpus/corpus.json "$OUT/"
mkdir -p loss_curves
carried=$ROOT/.gpu-carry/loss_curves/train.jsonl
[[ -f $carried && ! -s loss_curves/train.jsonl ]] && cp "$carried" loss_curves/ && echo "resuming from $carried"
PRECISIONS=${2:-bf16}
if [[ -z ${2:-} ]] && "$LMSCALE" train --precision fp8 --help >/dev/null 2>&1; then PRECISIONS=bf16,fp8; fi
IMPLS=${IMPLS:-lmscale,torch-eager}
echo "training ${SIZE:-small}: ${STEPS:-2000} steps, batch ${BATCH:-4}, precisions $PRECISIONS, impls $IMPLS ${TRAIN_ARGS:-}"
"$LMSCALE" train --corpus corpus --size "${SIZE:-small}" --context "${CONTEXT:-512}" --batch "${BATCH:-4}" \
  --steps "${STEPS:-2000}" --eval-every "${EVAL_EVERY:-100}" --eval-batches "${EVAL_BATCHES:-16}" \
  --precision "$PRECISIONS" --impl "$IMPLS" ${TRAIN_ARGS:-} --resume --out loss_curves 2>&1 | tee -a "$OUT/train.log"
status=${PIPESTATUS[0]}
rm -f corpus
"$LMSCALE" report --in loss_curves --out report >"$OUT/report.log" 2>&1 || tail -20 "$OUT/report.log"
exit "$status"
