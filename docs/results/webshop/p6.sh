#!/bin/bash
# WebShop P6, "twice the schedule" (issue 40; criteria in README.md, written 2026-12-06 22:05 UTC before any of it ran):
# P5's command (p5/command.txt) with sft.max_steps=3000, in sittings: every stage resumes, so the same call continues
# where the last sitting stopped.
#   usage: docs/results/webshop/p6.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Stages: collect, distill (the rerun's commands: rerun-2048/command.txt), sft (3,000 steps, ~7.5 h of 2 cores),
# teacher-forced decisions on the first 50 dev goals at checkpoints 1,500, 2,250 and 3,000 (--rank at 3,000), then
# the criterion read: the option decisions at 3,000 with a Wilson 95% interval wholly above P5's [0.288, 0.497].
# Only if it holds: the 500 test goals (floors + talent_sft, and flat_skillbank, two one-thread processes as P5) and
# the merge. Artifacts in $RUNS/ws_p6 (ws_p6b: the second evaluation); decisions in $RUNS/ws_p6_dec/dec_<step>.
source "$(dirname "$0")/../sitting.sh"
sitting "$1" ws_p6
W=$R/ws_p6
A="experiment=webshop tracker.mode=disabled artifacts_dir=$W"
M="env.memory=true env.memory_goal=true"
stage collect pipeline.run collect $A
stage distill pipeline.run distill $A
stage sft pipeline.run sft $A $M sft.max_steps=3000 sft.save_steps=250 sft.keep_checkpoints=0 sft.prompt_loss_weight=1.0 \
    sft.max_minutes=$(( $(mins) - 4 ))
for s in 1500 2250 3000; do
  rank=; [ $s = 3000 ] && rank=--rank
  stage dec_$s pipeline.decisions $A $M eval.n_per_panel=50 --checkpoint $W/models/sft.work/checkpoint-$s \
      --teacher rank_order --panel webshop_dev --out $R/ws_p6_dec/dec_$s $rank
done
read -r met option <<< "$($PY - "$R/ws_p6_dec/dec_3000/metrics.json" <<'PY'
import json, sys
from talentrl_core.evaluation.stats import wilson_ci
d = json.load(open(sys.argv[1]))["decisions"]["click[{option}]"]
lo, hi = wilson_ci(d["correct"], d["n"])
print("met" if lo > 0.497 else "not_met", f"{d['correct']}/{d['n']}[{lo:.3f},{hi:.3f}]")
PY
)"
log "criterion at 3,000: option decisions $option (P5 at 1,500: 31/80 [0.288,0.497]): $met"
[ "$met" = met ] || { log "no gain from twice the schedule: the test goals are not evaluated (README)"; exit 0; }
mkdir -p $R/ws_p6b/models
for d in trajectories library cache models/sft; do
  [ -e $W/$d ] && [ ! -e $R/ws_p6b/$d ] && ln -s $W/$d $R/ws_p6b/$d
done
F="random_action,strategy:rule_first,strategy:rule_options,strategy:rank_order,strategy:title_order"
export OMP_NUM_THREADS=1
( stage test_a pipeline.run evaluate $A $M "eval.systems=[$F,talent_sft]" ) &
( stage test_b pipeline.run evaluate experiment=webshop tracker.mode=disabled artifacts_dir=$R/ws_p6b $M "eval.systems=[flat_skillbank]" ) &
wait
done_ test_a && done_ test_b && log "P6 done: python -m pipeline.merge_eval $W/eval $R/ws_p6b/eval --out docs/results/webshop/p6/test --pair talent_sft flat_skillbank; the decisions from $R/ws_p6_dec"
