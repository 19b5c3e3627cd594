# Sourced by the WebShop arms after P5 (p6.sh, p7.sh): one arm of issue 40 in sittings, every stage resuming.
#   webshop_arm <end> <name> <sft steps> "<decision checkpoints>" "<settings>" [<folder whose data to link>]
# The arm is P5's command (p5/command.txt: sft.prompt_loss_weight=1.0, checkpoints every 250) with <settings> and
# <sft steps>, in $RUNS/<name>: collect and distill (the rerun's commands, rerun-2048/command.txt), or the
# trajectories, library and base model linked from $RUNS/<folder>; the SFT; teacher-forced decisions on the first
# 50 dev goals at each checkpoint (--rank at the last) into $RUNS/<name>_dec/dec_<step>; then the criterion read at
# the last: the option decisions with a Wilson 95% interval wholly above P5's at 1,500 [0.288, 0.497]. Only if it
# holds: the 500 test goals (floors + talent_sft, and flat_skillbank in $RUNS/<name>b, two one-thread processes as
# P5), the merge command logged.
source "$(dirname "${BASH_SOURCE[0]}")/../sitting.sh"

webshop_arm() {
  sitting "$1" "$2"
  local W=$R/$2 steps=$3 checks=$4 M=$5 from=$6 s d rank met option
  local A="experiment=webshop tracker.mode=disabled artifacts_dir=$W" last=${4##* }
  if [ -n "$from" ]; then
    mkdir -p $W/models
    for d in trajectories library models/base; do
      [ -e $R/$from/$d ] || { log "no $R/$from/$d to link: run that arm's collect and distill first"; exit 1; }
      [ -e $W/$d ] || ln -s $R/$from/$d $W/$d || exit 1
    done
  else
    stage collect pipeline.run collect $A
    stage distill pipeline.run distill $A
  fi
  stage sft pipeline.run sft $A $M sft.max_steps=$steps sft.save_steps=250 sft.keep_checkpoints=0 \
      sft.prompt_loss_weight=1.0 sft.max_minutes=$(( $(mins) - 4 ))
  for s in $checks; do
    rank=; [ $s = $last ] && rank=--rank
    stage dec_$s pipeline.decisions $A $M eval.n_per_panel=50 --checkpoint $W/models/sft.work/checkpoint-$s \
        --teacher rank_order --panel webshop_dev --out ${W}_dec/dec_$s $rank
  done
  read -r met option <<< "$($PY - "${W}_dec/dec_$last/metrics.json" <<'PY'
import json, sys
from talentrl_core.evaluation.stats import wilson_ci
d = json.load(open(sys.argv[1]))["decisions"]["click[{option}]"]
lo, hi = wilson_ci(d["correct"], d["n"])
print("met" if lo > 0.497 else "not_met", f"{d['correct']}/{d['n']}[{lo:.3f},{hi:.3f}]")
PY
)"
  [ -n "$met" ] || { log "criterion not read from ${W}_dec/dec_$last/metrics.json"; exit 1; }
  log "criterion at $last: option decisions $option (P5 at 1,500: 31/80 [0.288,0.497]): $met"
  [ "$met" = met ] || { log "not met: the test goals are not evaluated (README)"; exit 0; }
  mkdir -p ${W}b/models
  for d in trajectories library cache models/sft; do
    [ -e $W/$d ] && [ ! -e ${W}b/$d ] && ln -s $W/$d ${W}b/$d
  done
  local F="random_action,strategy:rule_first,strategy:rule_options,strategy:rank_order,strategy:title_order"
  export OMP_NUM_THREADS=1
  ( stage test_a pipeline.run evaluate $A $M "eval.systems=[$F,talent_sft]" ) &
  ( stage test_b pipeline.run evaluate experiment=webshop tracker.mode=disabled artifacts_dir=${W}b $M \
      "eval.systems=[flat_skillbank]" ) &
  wait
  done_ test_a && done_ test_b || exit 75  # one paused (or failed: its rc is in the log): the next sitting resumes it
  log "$2 done: python -m pipeline.merge_eval $W/eval ${W}b/eval --out docs/results/webshop/${2#ws_}/test --pair \
talent_sft flat_skillbank; the decisions from ${W}_dec (merged: metrics keyed by checkpoint, each record's checkpoint \
as \"checkpoint\", since \"step\" is its episode's step)"
}
