#!/bin/bash
# WebShop P7, "the values spelled as the command spells them" (issue 40; criteria in README.md, written 2026-12-07
# 22:25 UTC before any of it ran): P5's command (p5/command.txt) with env.memory_values=command, in sittings: every
# stage resumes, so the same call continues where the last sitting stopped (arm.sh: the stages).
#   usage: docs/results/webshop/p7.sh "YYYY-MM-DD HH:MM"     (the sitting's end; RUNS, PY: ../sitting.sh)
# P6's collected data, library and base model linked (collected as the rerun's), the SFT (1,500 steps, ~3.3 h of 2
# cores), decisions at 500, 1,000 and 1,500, the criterion read at 1,500. Artifacts in $RUNS/ws_p7 (ws_p7b: the
# second evaluation), decisions in $RUNS/ws_p7_dec.
source "$(dirname "$0")/arm.sh"
webshop_arm "$1" ws_p7 1500 "500 1000 1500" "env.memory=true env.memory_goal=true env.memory_values=command" ws_p6
