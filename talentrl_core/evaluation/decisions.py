"""Per-decision accuracy against the teacher: which decision an imitating policy gets wrong (issues 39, 40).

Success says whether an episode ended well, not where a policy went astray. Here the teacher (a strategy expert,
``envs.strategies``) plays every step and the policy, shown the same prompt, names its own command first: the
classic teacher-forced accuracy of imitation learning, on the teacher's state distribution. The policy routes to
the teacher's talent (``routing: fixed``), so "the right command" is the one that talent's strategy takes. Each
decision is classed by its abstract command (``library.templates.abstract_action``; WebShop: the search query, a result,
an option, buy, a page button).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from ..generation import GenResult
from ..prompts import format_action, parse_for_env


class TeacherForced:
    """A policy wrapper: ``model`` answers every execution step (recorded in ``records``), the teacher's command is
    played. Routing steps are the model's own (the caller fixes the talent)."""

    name = "teacher_forced"

    def __init__(self, model, teacher: str, template):
        self.model, self.teacher, self.template = model, teacher, template
        self.records: list[dict] = []

    def complete(self, items) -> list[GenResult]:
        answers = self.model.complete(items)
        out = []
        for it, answer in zip(items, answers):
            if it.kind != "exec" or it.env is None:
                out.append(answer)
                continue
            want = it.env.strategy_action(self.teacher)
            got = parse_for_env(it.env_name, answer.text)
            self.records.append({"goal": it.env.goal() if hasattr(it.env, "goal") else "", "teacher": want, "policy": got,
                                 "decision": self.template(" ".join(str(want or "").lower().split())),
                                 "correct": same_command(got, want)})
            out.append(GenResult(text=format_action(it.env_name, want) if want else "", token_ids=[], prompt_tokens=0))
        return out


def same_command(a: Optional[str], b: Optional[str]) -> bool:
    """Commands equal up to case and spacing.

    >>> same_command("click[Buy Now]", "click[buy  now]"), same_command(None, "look")
    (True, False)
    """
    return a is not None and b is not None and " ".join(a.lower().split()) == " ".join(b.lower().split())


def accuracy_table(records: Sequence[dict]) -> dict:
    """{decision: {n, correct, accuracy}} and the overall row ``all``."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        groups[r["decision"]].append(bool(r["correct"]))
        groups["all"].append(bool(r["correct"]))
    return {k: {"n": len(v), "correct": sum(v), "accuracy": round(sum(v) / len(v), 4)} for k, v in sorted(groups.items())}


def teacher_forced(cfg, panel: str, checkpoint: str, teacher: str, knowledge, load_policy, progress: bool = False
                   ) -> tuple[list[dict], dict]:
    """(records, table): ``checkpoint`` named the teacher's every command on ``panel``'s tasks, given the talent
    distilled from that teacher (``knowledge`` a flat=False library view; the library's strategy labels name it)."""
    from ..library.templates import abstract_action
    from ..rollout import EpisodeSpec, run_episodes
    from .runner import open_panel

    family, tasks, settings = open_panel(cfg, panel, progress)
    talents = knowledge.lib.strategy_talents(family.name)
    if teacher not in talents:
        raise ValueError(f"no talent distilled from the strategy {teacher!r} in this library; "
                         f"choose from {sorted(k for k in talents if k)}")
    wrapper = TeacherForced(load_policy(checkpoint), teacher, lambda a: abstract_action(family.name, a))
    specs = [EpisodeSpec(t, routing="fixed", talent_id=talents[teacher], use_skills=True, seed=cfg.eval.seed * 100003 + i)
             for i, t in enumerate(tasks)]
    trajs = run_episodes(family.make, specs, wrapper, settings, knowledge, cfg.collect.batch_size, progress)
    table = accuracy_table(wrapper.records)
    table["teacher_success"] = round(sum(bool(t.success) for t in trajs) / max(1, len(trajs)), 4)
    return wrapper.records, table
