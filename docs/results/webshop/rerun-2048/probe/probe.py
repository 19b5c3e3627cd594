"""Scratch probe (issue 40): can the 6.8M model from scratch learn WebShop's option decisions at all, given many
more of them than the 200-step SFT saw (~860)? The product's own SFT samples (same prompts, talents, skills),
kept only on product pages (the teacher clicks an option or buy now), trained from the same base model.
A checkpoint every 25 steps (only where a stopped run resumes; P1 and P2 saved every 100)."""
import json, sys
from dataclasses import replace
from pathlib import Path
from pipeline.config import load_config
from talentrl_core import stages
from talentrl_core.knowledge import open_knowledge
from talentrl_core.sft import train_sft
from talentrl_core.sft_data import SFTData

steps = int(sys.argv[1])
out = Path(sys.argv[2])
cfg = load_config(["experiment=webshop", "tracker.mode=disabled", "artifacts_dir=/work/runs/ws", *sys.argv[3:]])
trajs = stages.train_trajectories(cfg, expert_first=True)
knowledge = open_knowledge(cfg.library)
data = stages.sft_data(cfg, knowledge, trajs)
def product_page(s):
    lines = s["messages"][1]["content"].split("\n")  # the Admissible line only: the talent's text names buy now too
    return s["kind"] == "exec" and any(l.startswith("Admissible:") and "click[buy now]" in l for l in lines)
keep = [s for s in data.samples if product_page(s)]
from collections import Counter
kinds = Counter(a if a in ("buy now", "< prev", "back to search") else "option"
                for a in (s["messages"][2]["content"].split("click[", 1)[-1].split("]", 1)[0] for s in keep))
print(json.dumps({"samples": len(data.samples), "product_page": len(keep), "actions": kinds}), flush=True)
sft = replace(cfg.sft, max_steps=steps, save_steps=25, keep_checkpoints=0, warmup_steps=20)
info = train_sft(SFTData(keep, data.report), "/work/runs/ws/models/base", out, sft, cfg.model,
                 meta={"library_version": knowledge.version, "library_uri": cfg.library.uri, "env": "webshop"})
print(json.dumps({k: info[k] for k in ("steps", "train_loss", "first_logged_loss", "last_logged_loss", "seconds")}))
