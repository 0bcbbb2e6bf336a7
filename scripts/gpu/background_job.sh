# Sourced by the GPU scripts whose job outlives one 10-minute device call (gpu_sweep.sh, e2e_grid.sh):
# `job_start` runs the job in its own process session on the GPU machine (it goes on between calls
# while the machine is held), its pid in $PIDFILE; later calls `job_follow` it for a while and take
# back what it has. Needs ROOT (script_init.sh) and PIDFILE set before the calls.
#   PIDFILE=$RES/x.pid; source "$(dirname "$0")/background_job.sh"

# Status 0 while the job in $PIDFILE runs.
job_running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# job_start LOG CMD...: CMD in its own session, stdout and stderr into LOG, no stdin.
job_start() {
  local log=$1
  shift
  setsid nohup "$@" >"$log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
}

# job_follow SECONDS: waits while the job runs, at most SECONDS; status 0 once it ended, 3 while it
# still runs (call again).
job_follow() {
  local t0=$SECONDS
  while job_running && ((SECONDS - t0 < $1)); do sleep 5; done
  job_running && return 3
  return 0
}

# job_wait SECONDS TAKE_BACK WHAT: the scripts' `wait` action: follows the job for at most SECONDS,
# runs the function TAKE_BACK (copies what the job has into OUT), then prints "WHAT: sweep ended" and
# returns, or says it still runs and exits 3 (call wait again).
job_wait() {
  job_follow "$1"
  local rc=$?
  "$2"
  ((rc == 0)) || { echo "$3: still running after ${1}s (call wait again)"; exit 3; }
  echo "$3: sweep ended"
}

# job_resume_from_carry NAME DIR: on a fresh machine (DIR has no records yet), copies the records a
# previous machine left, carried as .gpu-carry/NAME/e2e.jsonl, into DIR so a --resume run goes on.
job_resume_from_carry() {
  [[ ! -s $2/e2e.jsonl && -s $ROOT/.gpu-carry/$1/e2e.jsonl ]] || return 0
  cp "$ROOT/.gpu-carry/$1/e2e.jsonl" "$2/" && echo "went on from .gpu-carry/$1"
}
