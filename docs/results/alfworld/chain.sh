#!/bin/bash
# The ALFWorld prompt-loss rerun (issue 39; criteria in README.md, "The chain again, with a loss on the prompts"),
# in sittings: every stage resumes, so the same call continues where the last sitting stopped.
#   usage: docs/results/alfworld/chain.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Stages: collect (3,553 teacher games, parts of 256), distill, sft (1,000 BC steps, then the DAgger round: 256
# games, <= 700 steps), evaluate talent_sft (copied to alf_sft_eval: the primary criterion first), rl (talentrl,
# flat_grpo), evaluate the other five systems (two processes), the learning curve (100 valid_train games,
# $RUNS/alf_curve) in the second process once its systems are done; their merge with the committed runs ($RUNS/alf_seven).
# Artifacts in $RUNS/alf_d; markers $RUNS/alf_d.done.<stage>.
source "$(dirname "$0")/../sitting.sh"
sitting "$1" alf_d
A="experiment=alfworld_dagger tracker.mode=disabled artifacts_dir=$R/alf_d sft.prompt_loss_weight=1.0"
stage collect pipeline.run collect $A
stage distill pipeline.run distill $A
stage sft pipeline.run sft $A sft.max_minutes=$(( $(mins) - 4 ))
stage eval_sft pipeline.run evaluate $A "eval.systems=[talent_sft]"
[ -d $R/alf_sft_eval ] || cp -r $R/alf_d/eval $R/alf_sft_eval
stage rl pipeline.run rl $A rl.max_minutes=$(( $(mins) - 4 ))
# the other five systems in two processes of one thread each, as WebShop's evaluations ran (1.13x one process of two
# threads, bench/bench_eval_procs.py on 16 of these games: docs/performance.md), the second in alf_d2, which links
# alf_d's collected games, library and models; pipeline.merge_eval joins them. The second process has the lighter
# share (two systems), so the learning curve (README, "The learning curve of the prompt-loss chain": BC's steps, then
# the DAgger round's end) follows it on the same core, beside the first process's last systems.
mkdir -p $R/alf_d2
for d in cache library models trajectories; do [ -e $R/alf_d2/$d ] || ln -s $R/alf_d/$d $R/alf_d2/$d; done
( stage eval_a pipeline.run evaluate $A model.threads=1 "eval.systems=[talentrl,flat_grpo,oracle_talent]" ) &
( stage eval_b pipeline.run evaluate ${A/alf_d /alf_d2 } model.threads=1 "eval.systems=[flat_skillbank,random_talent]" \
  && stage curve pipeline.curve $A model.threads=1 "eval.panels=[alfworld_valid_train]" \
    eval.n_by_panel.alfworld_valid_train=100 --panel alfworld_valid_train --systems talent_sft \
    --steps 250,500,750,1000,1511 --out $R/alf_curve ) &
wait
done_ eval_a && done_ eval_b && done_ curve || exit 75
# the seven systems beside the floors, BC and the earlier DAgger model on the same games (committed in seven-systems/,
# taken from it with --only; as the pruned prompt-loss/ folder held them), every statistic recomputed from the merged
# episodes; talentrl vs talent_sft and vs flat_grpo are default pairs
stage merge pipeline.merge_eval docs/results/alfworld/seven-systems $R/alf_d/eval $R/alf_d2/eval \
    --only 1 random_action,strategy:surfaces-first,zero_shot,bc_talent_sft,dagger_talent_sft,talent_sft \
    --pair talent_sft dagger_talent_sft --pair talent_sft bc_talent_sft --out $R/alf_seven
log "chain done: the seven systems in $R/alf_seven, the curve in $R/alf_curve"
