# Sourced by gpu_check.sh (and by gpu_dist.sh and the probes of tools/probes/ for prebuilt_loads, log_clocks) after
# RES, OUT and TARBALL are set: want NAME (is the stage asked for), pack (OUT/$TARBALL from RES), stage NAME SECONDS CMD...
# (run inside RES with a time limit, log to RES/NAME.log, append status and seconds to OUT/summary.txt,
# pack), so a call cut off by its time limit still returns every stage that finished.
want() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }
pack() { tar czf "$OUT/$TARBALL" -C "$RES" . 2>/dev/null; }
stage() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS start; start=$(date +%T)
  (cd "$RES" && timeout -k 5 "$limit" "$@") >"$RES/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s (from $start)" | tee -a "$OUT/summary.txt"
  pack
  return $rc
}
# log_clocks FILE [MS]: the SM clock, power draw and clock-event reasons every MS ms (200) into FILE until the
# script exits: whether a stage ran at full clock or under the power cap (docs/flash_history.md, "The product's
# d = 128 gap").
log_clocks() {
  local fields=timestamp,clocks.sm,power.draw,temperature.gpu
  nvidia-smi --query-gpu=clocks_event_reasons.active --format=csv >/dev/null 2>&1 && fields+=,clocks_event_reasons.active
  nvidia-smi --query-gpu=$fields --format=csv -lms "${2:-200}" >"$1" 2>&1 &
  trap "kill $! 2>/dev/null" EXIT
}
# prebuilt_loads: with ROOT/prebuilt (lmscale, liblmscale.so and a test binary built elsewhere against the same
# torch and CUDA, sm_90) on the library path, point LMSCALE_BUILD_DIR at it and check that it loads, so a call can
# skip the build (a GPU machine goes back 30 s after a call; a cold build takes minutes of it).
prebuilt_loads() {
  [[ -x $ROOT/prebuilt/lmscale ]] || return 1
  local site
  site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || return 1
  local libs=("$site/torch/lib" "$site"/nvidia/*/lib "$ROOT/prebuilt")
  export LD_LIBRARY_PATH=$(IFS=:; echo "${libs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LMSCALE_BUILD_DIR=$ROOT/prebuilt LMSCALE_PYTHONPATH=$ROOT/python
  "$ROOT/prebuilt/lmscale" --version
}
