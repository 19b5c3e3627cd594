#!/bin/bash
# The ALFWorld prompt-loss rerun (issue 39; criteria in README.md, "The chain again, with a loss on the prompts"),
# in sittings: every stage resumes, so the same call continues where the last sitting stopped.
#   usage: docs/results/alfworld/chain.sh "YYYY-MM-DD HH:MM"     (the sitting's end, `date -d` syntax)
#   RUNS   folder for the artifacts (default /work/runs: alf_d/, alf_sft_eval/, alf_chain.log, alf_chain.out)
#   PY     the venv's python (default .venv/bin/python of this checkout); runs the code of the checkout holding this
#          file: start it from a clone of its own, so that edits elsewhere do not reach a running stage.
# Stages: collect (3,553 teacher games, parts of 256), distill, sft (1,000 BC steps, then the DAgger round: 256
# games, <= 700 steps), evaluate talent_sft (copied to alf_sft_eval: the primary criterion first), rl (talentrl,
# flat_grpo), evaluate the other five systems. A stage's marker file (alf_d.done.<stage>) says it finished.
END=$(date -d "$1" +%s) || exit 2
cd "$(dirname "$0")/../../.." || exit 1
R=${RUNS:-/work/runs}
PY=${PY:-$PWD/.venv/bin/python}
JE=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[ -f $JE ] && export LD_PRELOAD=$JE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
A="experiment=alfworld_dagger tracker.mode=disabled artifacts_dir=$R/alf_d sft.prompt_loss_weight=1.0"
mins() { echo $(( (END - $(date +%s)) / 60 )); }
log() { echo "$(date -u '+%F %T') $*" >> $R/alf_chain.log; }
stage() {  # stage <marker> <pipeline.run args...>: runs until done (rc 0) or the sitting ends (SIGTERM: pause)
  local m=$1; shift
  [ -f $R/alf_d.done.$m ] && return 0
  [ "$(mins)" -lt 6 ] && { log "no time for $m"; exit 0; }  # a budget (mins - 4) must stay positive
  log "start $m ($(mins) min left)"
  nice -n 5 timeout --signal=TERM --kill-after=120 $(( END - $(date +%s) )) $PY -m pipeline.run "$@" >> $R/alf_chain.out 2>&1
  local rc=$?; log "rc=$rc $m"
  [ $rc -eq 0 ] && { touch $R/alf_d.done.$m; return 0; }
  exit $rc
}
mkdir -p $R
stage collect collect $A
stage distill distill $A
stage sft sft $A sft.max_minutes=$(( $(mins) - 4 ))
stage eval_sft evaluate $A "eval.systems=[talent_sft]"
[ -d $R/alf_sft_eval ] || cp -r $R/alf_d/eval $R/alf_sft_eval
stage rl rl $A rl.max_minutes=$(( $(mins) - 4 ))
stage eval_rest evaluate $A "eval.systems=[talentrl,flat_grpo,flat_skillbank,oracle_talent,random_talent]"
log "chain done: python -m pipeline.merge_eval docs/results/alfworld/dagger $R/alf_sft_eval $R/alf_d/eval --rename 1 talent_sft dagger_talent_sft --pair talent_sft dagger_talent_sft --out <folder>"
