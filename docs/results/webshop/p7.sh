#!/bin/bash
# WebShop P7, "the values spelled as the command spells them" (issue 40; criteria in README.md, written 2026-12-07
# before any of it ran): P5's command (p5/command.txt) with env.memory_values=command, in sittings: every stage
# resumes, so the same call continues where the last sitting stopped.
#   usage: docs/results/webshop/p7.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Data, library and base model: P6's (collected as the rerun's, rerun-2048/command.txt), linked. Stages: sft (1,500
# steps, ~4 h of 2 cores), teacher-forced decisions on the first 50 dev goals at checkpoints 500, 1,000 and 1,500
# (--rank at 1,500), then the criterion read: the option decisions at 1,500 with a Wilson 95% interval wholly above
# P5's [0.288, 0.497]. Only if it holds: the 500 test goals (floors + talent_sft, and flat_skillbank, two one-thread
# processes as P5) and the merge. Artifacts in $RUNS/ws_p7 (ws_p7b: the second evaluation); decisions in
# $RUNS/ws_p7_dec/dec_<step>.
source "$(dirname "$0")/../sitting.sh"
sitting "$1" ws_p7
W=$R/ws_p7
A="experiment=webshop tracker.mode=disabled artifacts_dir=$W"
M="env.memory=true env.memory_goal=true env.memory_values=command"
mkdir -p $W/models
for d in trajectories library models/base; do
  [ -e $W/$d ] || ln -s $R/ws_p6/$d $W/$d || exit 1
done
stage sft pipeline.run sft $A $M sft.max_steps=1500 sft.save_steps=250 sft.keep_checkpoints=0 sft.prompt_loss_weight=1.0 \
    sft.max_minutes=$(( $(mins) - 4 ))
for s in 500 1000 1500; do
  rank=; [ $s = 1500 ] && rank=--rank
  stage dec_$s pipeline.decisions $A $M eval.n_per_panel=50 --checkpoint $W/models/sft.work/checkpoint-$s \
      --teacher rank_order --panel webshop_dev --out $R/ws_p7_dec/dec_$s $rank
done
read -r met option <<< "$($PY - "$R/ws_p7_dec/dec_1500/metrics.json" <<'PY'
import json, sys
from talentrl_core.evaluation.stats import wilson_ci
d = json.load(open(sys.argv[1]))["decisions"]["click[{option}]"]
lo, hi = wilson_ci(d["correct"], d["n"])
print("met" if lo > 0.497 else "not_met", f"{d['correct']}/{d['n']}[{lo:.3f},{hi:.3f}]")
PY
)"
log "criterion at 1,500: option decisions $option (P5 at 1,500: 31/80 [0.288,0.497]): $met"
[ "$met" = met ] || { log "no gain from the spelling: the test goals are not evaluated (README)"; exit 0; }
mkdir -p $R/ws_p7b/models
for d in trajectories library cache models/sft; do
  [ -e $W/$d ] && [ ! -e $R/ws_p7b/$d ] && ln -s $W/$d $R/ws_p7b/$d
done
F="random_action,strategy:rule_first,strategy:rule_options,strategy:rank_order,strategy:title_order"
export OMP_NUM_THREADS=1
( stage test_a pipeline.run evaluate $A $M "eval.systems=[$F,talent_sft]" ) &
( stage test_b pipeline.run evaluate experiment=webshop tracker.mode=disabled artifacts_dir=$R/ws_p7b $M "eval.systems=[flat_skillbank]" ) &
wait
done_ test_a && done_ test_b && log "P7 done: python -m pipeline.merge_eval $W/eval $R/ws_p7b/eval --out docs/results/webshop/p7/test --pair talent_sft flat_skillbank; the decisions from $R/ws_p7_dec"
