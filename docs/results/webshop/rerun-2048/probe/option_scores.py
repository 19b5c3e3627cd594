"""Scratch: on option decisions (the teacher rank_order clicks an option), every admissible command ranked by the SFT
model's whole-completion log-probability given the same prompt: does it rank the teacher's option above buy now?"""
import json, sys
from pathlib import Path
import torch
from pipeline.config import load_config
from talentrl_core.agent import load_policy
from talentrl_core.knowledge import open_knowledge
from talentrl_core.stages import pinned_library
from talentrl_core.evaluation import decisions as D
from talentrl_core.prompts import parse_for_env

CK = sys.argv[2]
cfg = load_config(["experiment=webshop", "tracker.mode=disabled", "artifacts_dir=/work/runs/ws", f"eval.n_per_panel={sys.argv[1]}", *sys.argv[4:]])
rows = []

class Scoring(D.TeacherForced):
    def complete(self, items):
        pol = self.model
        for it in items:
            if it.kind != "exec" or it.env is None or not it.allowed:
                continue
            want = it.env.strategy_action(self.teacher)
            if self.template(" ".join(str(want or "").lower().split())) != "click[{option}]":
                continue
            p = pol.prompt_ids(it.messages)
            seqs = [pol.tok(c, add_special_tokens=False)["input_ids"] for c in it.allowed]
            lm = pol.gen.model
            scores = []
            with torch.no_grad():
                for c in seqs:
                    ids = torch.tensor([p + c])
                    logp = torch.log_softmax(lm(ids).logits[0, len(p) - 1:-1].float(), -1)
                    scores.append(float(logp.gather(1, torch.tensor(c)[:, None]).sum()))
            cmds = [parse_for_env(it.env_name, a) for a in it.allowed]
            order = sorted(range(len(cmds)), key=lambda i: -scores[i])
            ranked = [cmds[i] for i in order]
            t = next((i for i, c in enumerate(ranked) if D.same_command(c, want)), None)
            b = next((i for i, c in enumerate(ranked) if c and "buy now" in c), None)
            rows.append({"teacher": want, "top": ranked[0], "rank_teacher": t, "rank_buy": b, "n": len(cmds)})
        return super().complete(items)

knowledge = open_knowledge(pinned_library(cfg, Path(CK)))
D.TeacherForced = Scoring
D.teacher_forced(cfg, "webshop_dev", CK, "rank_order", knowledge,
                 lambda ck: load_policy(cfg, ck, temperature=0.0, name="decisions")[0], progress=False)
n = len(rows)
print(json.dumps({"option_decisions": n,
                  "teacher_option_ranked_first": sum(r["rank_teacher"] == 0 for r in rows),
                  "teacher_option_above_buy_now": sum(r["rank_teacher"] is not None and r["rank_buy"] is not None and r["rank_teacher"] < r["rank_buy"] for r in rows),
                  "mean_candidates": sum(r["n"] for r in rows) / max(1, n),
                  "top_choices": {k: sum(1 for r in rows if (r["top"] or "").startswith(k)) for k in ("click[buy now]", "click[< prev]", "click[description]", "click[features]", "click[reviews]", "click[back to search]")}}, indent=1))
Path(sys.argv[3]).write_text("".join(json.dumps(r) + "\n" for r in rows))
