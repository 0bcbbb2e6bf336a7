# Sourced by the GPU check scripts that run in stages (session_check.sh, attention_check.sh), after
# script_init.sh and after setting RES (the results folder) and PACK (the archive under OUT):
#   stage NAME SECONDS CMD...   runs CMD inside RES with its own time limit, logs to RES/NAME.log,
#                               appends "NAME rc=… …s" to OUT/summary.txt and packs RES into PACK, so a
#                               time limit loses only the stage it stopped.
pack() { tar czf "$PACK" -C "$RES" . 2>/dev/null; }
stage() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  (cd "$RES" && timeout -k 5 "$limit" "$@") >"$RES/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
  pack
  return $rc
}
