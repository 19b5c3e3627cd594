#!/bin/bash
# Issue 38, A2 ("recognise, then route") draws 0 and 2 at the A1 budget, as draw 1 ran (README.md, "A2 at the A1
# budget"): per draw, 900 SFT steps, the draw's five systems, routing_only at RL seeds 0, 1, 2 and the fairest non-RL
# competitor, relabel_replay_sft_rl_batch, at the same seeds; about 7 h a draw on 2 cores. In sittings: every step
# of pipeline.routing_study resumes (a trained model or an evaluation is skipped when there), so the same call
# continues where the last sitting stopped.
#   usage: docs/results/routing/a2_draws.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Artifacts: $RUNS/ring (collect, distill with experiment=ring), $RUNS/ringrec (the study's root, linking them);
# reports: $RUNS/a2/routing_only/draw<D>, $RUNS/a2/a1-baselines/draw<D> (episodes, metrics, verdicts.json).
source "$(dirname "$0")/../sitting.sh"
sitting "$1" a2
A="experiment=ring tracker.mode=disabled artifacts_dir=$R/ring"
stage collect pipeline.run collect $A
stage distill pipeline.run distill $A
Q=$R/ringrec; mkdir -p $Q
for d in trajectories library cache; do
  [ -e $R/ring/$d ] && [ ! -e $Q/$d ] && ln -s $R/ring/$d $Q/$d
done
S="experiment=ring_recognise tracker.mode=disabled sft.max_steps=900 sft.keep_checkpoints=0 --root $Q --seeds 0 1 2 --no-oracle-sft"
for D in 0 2; do
  stage d$D-routing_only pipeline.routing_study $S --draw $D --variants routing_only --out $R/a2/routing_only
  stage d$D-baseline pipeline.routing_study $S --draw $D --budget a1 --variants relabel_replay_sft_rl_batch \
      --out $R/a2/a1-baselines
done
log "A2 draws done: copy $R/a2/*/draw<D> into docs/results/routing/sft900-recognise/ (gzip -9 the episodes)"
