#!/bin/bash
# WebShop P6, "twice the schedule" (issue 40; criteria in README.md, written 2026-12-06 22:05 UTC before any of it ran):
# P5's command (p5/command.txt) with sft.max_steps=3000, in sittings: every stage resumes, so the same call continues
# where the last sitting stopped (arm.sh: the stages).
#   usage: docs/results/webshop/p6.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# Collect and distill as the rerun, the SFT (3,000 steps, ~7.5 h of 2 cores), decisions at 1,500, 2,250 and 3,000,
# the criterion read at 3,000. Artifacts in $RUNS/ws_p6 (ws_p6b: the second evaluation), decisions in $RUNS/ws_p6_dec.
source "$(dirname "$0")/arm.sh"
webshop_arm "$1" ws_p6 3000 "1500 2250 3000" "env.memory=true env.memory_goal=true"
