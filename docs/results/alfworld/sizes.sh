#!/bin/bash
# ALFWorld: the curve against model size (issue 39; criteria in README.md, "The curve against model size", written
# 2026-12-07 before any of it ran). Three widths of the chain's Qwen2 trained on the chain's data with its BC settings
# and a 500-step schedule, each read by teacher-forced decisions on the 134 valid_unseen games; the chain's own
# 1,000-step BC (round 0, measured in decisions/) is the data point. In sittings: every stage resumes.
#   usage: docs/results/alfworld/sizes.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Needs the chain's collection and library ($RUNS/alf_d: chain.sh's collect and distill). Artifacts in
# $RUNS/alf_size/<size>, decisions in $RUNS/alf_size/dec_<size>.
source "$(dirname "$0")/../sitting.sh"
sitting "$1" alf_size
declare -A SIZE=(  # hidden, layers, MLP, heads, key/value heads
  [m7]="256 8 768 4 2"     # 6.8M: the chain's model, first (its 500-step point beside the chain's 1,000)
  [m1]="128 4 384 4 2"     # 1.0M
  [m26]="512 8 1536 8 4"   # 26M: ~4x a step of m7
)
for name in m7 m1 m26; do
  read -r h l i a k <<< "${SIZE[$name]}"
  F=$R/alf_size/$name; mkdir -p $F
  for d in trajectories library cache; do
    [ -e $R/alf_d/$d ] && [ ! -e $F/$d ] && ln -s $R/alf_d/$d $F/$d
  done
  A="experiment=alfworld tracker.mode=disabled artifacts_dir=$F sft.prompt_loss_weight=1.0 sft.max_steps=500
     model.hidden_size=$h model.num_hidden_layers=$l model.intermediate_size=$i model.num_attention_heads=$a
     model.num_key_value_heads=$k"
  stage sft_$name pipeline.run sft $A sft.max_minutes=$(( $(mins) - 4 ))
  stage dec_$name pipeline.decisions $A env.workers=0 --checkpoint $F/models/sft --teacher surfaces-first \
      --panel alfworld_valid_unseen --out $R/alf_size/dec_$name
done
log "sizes done: the decisions in $R/alf_size/dec_<size>, beside docs/results/alfworld/decisions (checkpoint 1000)"
