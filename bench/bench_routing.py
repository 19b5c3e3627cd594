"""The router's menu distribution per task family, checkpoint by checkpoint: does RL sharpen or wash out routing?

Teacher-forced on the routing prompts of the training tasks (one per task, the goal the SFT routing sample
shows), it scores every menu entry under the menu constraint, as the RL trainer does, and prints per checkpoint and
task type: the mean probability of each talent, the mean probability of the routing label (the measured best
talent, ``sft.routing_label``) and the share of tasks whose most likely talent is the label. A router that reads the
task gives different rows per family; one whose rows are equal no longer depends on the task.

Checkpoints are folders under ``artifacts/models`` (``sft``, ``rl``, ``flat_grpo``) or any folder with a
``model.safetensors``; one without its own config and tokenizer (an RL work checkpoint such as
``rl.work/checkpoint-4``) borrows those of ``sft``. Run where the pipeline ran:

    .venv/bin/python bench/bench_routing.py sft rl.work/checkpoint-4 rl experiment=demo

Overrides after the checkpoints are Hydra overrides (``key=value``; default ``experiment=demo``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load(folder: Path, sft: Path):
    """(model, tokenizer) of ``folder``; config and tokenizer from ``sft`` where the folder has only weights."""
    from safetensors.torch import load_file

    from talentrl_core.models import load_model

    if (folder / "config.json").is_file():
        model, tok = load_model(folder)
    else:  # the SFT model with the folder's weights in place of its own
        model, tok = load_model(sft)
        got = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
        if set(got.missing_keys) - {"lm_head.weight"} or got.unexpected_keys:  # only the tied head may be absent
            raise ValueError(f"{folder}: weights do not fit {sft}'s config (missing {got.missing_keys[:3]}, "
                             f"unexpected {got.unexpected_keys[:3]})")
        model.tie_weights()
    return model.eval(), tok


def routing_prompts(cfg):
    """(task type, routing label, prompt messages, menu) of each training task with a successful trajectory."""
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.prompts import routing_prompt
    from talentrl_core.sft import routing_label
    from talentrl_core.stages import train_trajectories

    knowledge = open_knowledge(cfg.library)
    rows, seen = [], set()
    for t in train_trajectories(cfg):
        if t.policy != "expert" or not t.success or t.error or t.task_id in seen:
            continue
        label, menu = routing_label(knowledge, t), knowledge.menu(t.env)
        if label and menu:
            seen.add(t.task_id)
            rows.append((t.task_type, label, routing_prompt(t.env, t.goal, t.initial_observation, menu,
                                                            cfg.env.routing_obs_chars), menu))
    return rows


def menu_distribution(model, tok, messages, menu) -> list[float]:
    import torch

    from talentrl_core.prompts import format_talent
    from talentrl_core.rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions

    allowed = [format_talent(t.shown) for t in menu]
    prompt = chat_prompt_ids(tok, messages)
    samples = [Sample("route", prompt, completion_ids_of(tok, a), [], allowed) for a in allowed]
    scores = score_completions(model, tok, samples, model.get_output_embeddings().weight.shape[0], 1.0)
    return torch.softmax(torch.tensor([sum(s) for s in scores], dtype=torch.float64), 0).tolist()


def main(argv=None) -> int:
    from pipeline.config import load_config
    from talentrl_core.paths import ArtifactPaths

    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in argv if "=" in a] or ["experiment=demo"]
    cfg = load_config(overrides)
    models = ArtifactPaths.of(cfg).sft_checkpoint.parent
    rows = routing_prompts(cfg)
    print(f"{len(rows)} training tasks; menu {[t.shown for t in rows[0][3]] if rows else []}")
    for name in [a for a in argv if "=" not in a] or ["sft", "rl"]:
        folder = Path(name) if Path(name).is_absolute() else models / name
        model, tok = load(folder, models / "sft")
        by_type = defaultdict(list)
        for task_type, label, messages, menu in rows:
            p = menu_distribution(model, tok, messages, menu)
            i = [t.talent_id for t in menu].index(label)
            by_type[task_type].append((p, p[i], max(range(len(p)), key=p.__getitem__) == i))
        for task_type, vals in sorted(by_type.items()):
            mean_p = [round(sum(v[0][k] for v in vals) / len(vals), 3) for k in range(len(vals[0][0]))]
            print(f"{name:28s} {task_type:28s} n={len(vals):3d} p(menu)={mean_p} "
                  f"p(label)={sum(v[1] for v in vals) / len(vals):.3f} argmax=label {sum(v[2] for v in vals) / len(vals):.3f}")
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_routing")(main)())
