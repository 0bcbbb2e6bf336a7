#!/usr/bin/env bash
# Checkpoints on one GPU (docs/training.md, Checkpoints): 2,000 steps of `small` on the BPE corpus from a
# config file, stopped at the checkpoint of step 1,000 and resumed from it to 2,000, an uninterrupted run
# beside it, the PyTorch reference's curve on the same batches, text sampled from the last checkpoint, and
# the report.
#
#   scripts/gpu/gpu_train_ckpt.sh OUT [stage ...]   (carry .deps, .whl; default: build corpus train resume whole sample report)
#
# Stages: build (the CLI, or carried prebuilt/), corpus (the BPE corpus: carried as .gpu-carry/pystdlib-bpe/,
# else made here with `train corpus --tokenizer bpe --vocab 10000`, which needs the tokenizers wheel in .whl/),
# train (run.toml with --stop-at 1000: lmscale stops at its checkpoint, the reference runs to the end), resume
# (the same command with --resume: lmscale goes on from step 1000), whole (lmscale uninterrupted, into
# train_whole/), sample (greedy and top-p from the last checkpoint), report. The build takes most of a call:
# run `build corpus` in one call and the rest in the next while the machine is held (the build folder stays).
# Knobs: SIZE (small), STEPS (2000), STOP (1000), BATCH (4), CONTEXT (512), PRECISION (bf16), IMPLS
# (lmscale,torch-eager), LMSCALE_COMMIT (the GPU machine has no .git).
#
# OUT receives summary.txt and train_ckpt.tgz: run.toml, config.toml, corpus.json, train/ and train_whole/
# (train.jsonl, train_compare.md), sample_greedy.txt, sample_top_p.txt, report/, each stage's log. The
# checkpoints (1.5 GB each for small) stay in the build folder: train/checkpoints is a link to it.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
STAGES=("${@:-build corpus train resume whole sample report}")
read -r -a STAGES <<<"${STAGES[*]}"
export LMSCALE_PYTHON=${LMSCALE_PYTHON:-$(command -v python3)}
RES=$OUT/train_ckpt
mkdir -p "$RES"
TARBALL=train_ckpt.tgz
source "$(dirname "$0")/timed_stages.sh"  # stage, pack, want, log_clocks, prebuilt_loads
# The GPU machine reaches no registry: tokenizers (BPE corpus, sampling) comes as a carried wheel.
if compgen -G "$ROOT/.whl/tokenizers-*.whl" >/dev/null; then
  "$LMSCALE_PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$LMSCALE_BUILD_DIR/pydeps" "$ROOT"/.whl/tokenizers-*.whl || exit 1
  export PYTHONPATH=$LMSCALE_BUILD_DIR/pydeps${PYTHONPATH:+:$PYTHONPATH}
fi
DATA=$LMSCALE_BUILD_DIR/train_ckpt_data  # corpus and checkpoints: kept on the machine, never packed
mkdir -p "$DATA/checkpoints" "$DATA/checkpoints_whole" "$RES/train" "$RES/train_whole"
ln -sfn "$DATA/corpus" "$RES/corpus"
ln -sfn "$DATA/checkpoints" "$RES/train/checkpoints"
ln -sfn "$DATA/checkpoints_whole" "$RES/train_whole/checkpoints"
STEPS=${STEPS:-2000} STOP=${STOP:-1000}
cat >"$RES/run.toml" <<TOML
# lmscale train --config run.toml: the run of scripts/gpu/gpu_train_ckpt.sh
corpus = "corpus"
size = "${SIZE:-small}"
context = ${CONTEXT:-512}
batch = ${BATCH:-4}
precision = "${PRECISION:-bf16}"
impl = [$(sed 's/[^,]*/"&"/g; s/,/, /g' <<<"${IMPLS:-lmscale,torch-eager}")]
steps = $STEPS
eval-every = 100
eval-batches = 16
save-every = $STOP
out = "train"
TOML
CKPT=train/checkpoints/lmscale-${PRECISION:-bf16}
for s in "${STAGES[@]}"; do
  case $s in
    build) prebuilt_loads >"$RES/prebuilt.log" 2>&1 ||
             LMSCALE_BUILD_TARGETS=lmscale_cli stage build "${BUILD_S:-540}" "$ROOT/lmscale" build ||
             { tail -40 "$RES/build.log"; exit 1; } ;;
    corpus)
      if [[ -f $ROOT/.gpu-carry/pystdlib-bpe/train.bin ]]; then
        rm -rf "$DATA/corpus" && cp -r "$ROOT/.gpu-carry/pystdlib-bpe" "$DATA/corpus"
        echo "corpus rc=0 0s (carried .gpu-carry/pystdlib-bpe)" | tee -a "$OUT/summary.txt"
      elif [[ ! -f $DATA/corpus/train.bin ]]; then
        stage corpus "${CORPUS_S:-240}" "$BIN" train corpus --tokenizer bpe --vocab 10000 --out "$DATA/corpus" || exit 1
      fi
      cp "$DATA/corpus/corpus.json" "$RES/" ;;
    train) stage train "${TRAIN_S:-420}" "$BIN" train --config run.toml --stop-at "$STOP" ;;
    resume) stage resume "${RESUME_S:-300}" "$BIN" train --config run.toml --resume ;;
    whole) stage whole "${WHOLE_S:-300}" "$BIN" train --config run.toml --impl lmscale --out train_whole --resume ;;
    sample)
      stage sample "${SAMPLE_S:-120}" bash -c "'$BIN' sample --checkpoint $CKPT --device auto --prompt 'def main(' \
        --temperature 0 --max-new-tokens 200 >sample_greedy.txt && '$BIN' sample --checkpoint $CKPT --device auto \
        --prompt 'import os' --temperature 0.8 --top-p 0.95 --seed 1 --max-new-tokens 200 >sample_top_p.txt" ;;
    report) stage report "${REPORT_S:-120}" "$BIN" report --in train --out report ;;
    *) echo "unknown stage $s" | tee -a "$OUT/summary.txt"; exit 2 ;;
  esac
done
pack
cat "$OUT/summary.txt"
! grep -q " rc=[1-9]" "$OUT/summary.txt"  # exit 1 when a stage failed
