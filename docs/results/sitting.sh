# Sourced by the experiment runners beside it (alfworld/chain.sh, webshop/arm.sh, routing/a2_draws.sh): a run longer
# than a sitting, in stages that each resume. `sitting <end> <name>` reads the sitting's end ("YYYY-MM-DD HH:MM",
# `date -d` syntax) and moves to the checkout holding the runner; `stage <marker> <python -m args...>` runs one
# stage under nice and a timeout at the sitting's end (SIGTERM: every stage checkpoints and exits 75), and writes
# $R/<name>.done.<marker> when it finishes (rc 0), so the next sitting's call skips it.
#   RUNS  folder for the artifacts and the logs (default /work/runs: <name>.log, <name>.out)
#   PY    the venv's python (default .venv/bin/python of this checkout). The runner runs the code of the checkout
#         holding it: start it from a clone of its own, so that edits elsewhere do not reach a running stage.
#   BUDGET_MIN  a stage needs this many minutes left to start (default 6: a budget of `left - 4` stays positive)
# A second sitting of the same runner while one runs exits 3 at once ($R/<name>.lock), touching nothing.

sitting() {
  END=$(date -d "$1" +%s) || exit 2
  NAME=$2
  cd "$(dirname "${BASH_SOURCE[1]}")/../../.." || exit 1
  R=${RUNS:-/work/runs}
  PY=${PY:-$PWD/.venv/bin/python}
  local je
  for je in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2; do
    [ -f $je ] && { export LD_PRELOAD=$je; break; }
  done
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
  mkdir -p "$R"
  # one sitting of a runner at a time: a sitting started under nohup outlives the shell that started it, and two
  # would write the same folders. The lock is held on fd 9, which every stage inherits, so it holds while any stage
  # of this sitting runs.
  exec 9>>"$R/$NAME.lock"
  flock -n 9 || { echo "another sitting of $NAME is running (it holds $R/$NAME.lock; ps -eo pid,cmd | grep $NAME): not started" >&2; exit 3; }
}

mins() { echo $(( (END - $(date +%s)) / 60 )); }  # minutes left in the sitting
log() { echo "$(date -u '+%F %T') $*" >> "$R/$NAME.log"; }
done_() { [ -f "$R/$NAME.done.$1" ]; }

stage() {  # stage <marker> <python -m args...>: runs until done (rc 0) or the sitting ends; any other rc stops the runner
  local m=$1; shift
  done_ "$m" && return 0
  [ "$(mins)" -lt "${BUDGET_MIN:-6}" ] && { log "no time for $m"; exit 0; }
  log "start $m ($(mins) min left)"
  nice -n 5 timeout --signal=TERM --kill-after=120 $(( END - $(date +%s) )) "$PY" -m "$@" >> "$R/$NAME.out" 2>&1
  local rc=$?; log "rc=$rc $m"
  [ $rc -eq 0 ] && { touch "$R/$NAME.done.$m"; return 0; }
  exit $rc
}
