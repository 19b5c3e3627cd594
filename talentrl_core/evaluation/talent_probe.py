"""Does the executor follow its talent? Read off a checkpoint before any rollout (issue 38).

Where two strategies' demonstrations of the same task start with different commands, an executor that follows its
talent gives each strategy's first command a high probability under that strategy's talent and a low one under the
other talents. For every such training task (at most ``per_type`` per task type) and every talent, this scores each
strategy's first command exactly as the policy samples it: the completion's log-probability under the constrained
decoding mask over the step's admissible commands (``rl.samples.score_completions``, temperature 1), the prompt the
rollout loop builds (``prompts.exec_context``) with the talent's strategy text and retrieved skills.

    follows = mean over (task, strategy) of p(strategy's first command | its own talent)
    against = mean over (task, strategy, other talent) of p(strategy's first command | the other talent)
    effect  = follows − against

An executor that ignores its talent has ``effect`` ≈ 0 whatever it learnt of the commands' marginal; one that obeys
it has ``effect`` near 1. Evaluation measures the same thing as oracle − random talent success, after a panel of
rollouts; this costs one forward pass per (task, talent, command).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from ..policies import action_completions
from ..prompts import exec_context, execution_messages, format_action
from ..trajectories import Trajectory


def contrasting_tasks(trajs: Sequence[Trajectory], per_type: int) -> list[dict]:
    """Training tasks whose strategies' successful demonstrations start with different commands, in order of first
    appearance, at most ``per_type`` per task type: {task, first: {strategy: command}}."""
    by_task: dict[str, dict] = {}
    for t in trajs:
        steps = t.env_steps()
        if not t.success or t.error or not t.strategy or not steps or not steps[0].action:
            continue
        row = by_task.setdefault(t.task_id, {"task": t, "first": {}})
        row["first"].setdefault(t.strategy, steps[0].action)
    count: dict[str, int] = defaultdict(int)
    out = []
    for row in by_task.values():
        if len(set(row["first"].values())) < 2 or count[row["task"].task_type] >= per_type:
            continue
        count[row["task"].task_type] += 1
        out.append(row)
    return out


def probe(model, tokenizer, vocab_size: int, knowledge, tasks: Sequence[dict], talent_of: dict[str, str],
          history: int, obs_chars: int, memory: bool | str = False, micro_batch: int = 16) -> list[dict]:
    """One row per (task, talent): the probability of every strategy's first command under that talent."""
    from ..rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions

    rows, samples, keys = [], [], []
    for r in tasks:
        t = r["task"]
        first = t.env_steps()[0]
        allowed = action_completions(t.env, list(first.admissible) if first.admissible is not None else None)
        for talent_strategy, talent_id in talent_of.items():
            ctx = knowledge.context(t.env, t.goal, t.task_type, talent_id, True)
            ec = exec_context(t.env, t.goal, t.initial_observation, ctx.talent, ctx.skills, [], history,
                              first.admissible, obs_chars, memory)
            prompt = chat_prompt_ids(tokenizer, execution_messages(ec))
            rows.append({"task_id": t.task_id, "task_type": t.task_type, "talent_of": talent_strategy, "p": {}})
            for strategy, command in r["first"].items():
                samples.append(Sample("exec", prompt, completion_ids_of(tokenizer, format_action(t.env, command)), [],
                                      allowed=allowed))
                keys.append((len(rows) - 1, strategy))
    scores = score_completions(model, tokenizer, samples, vocab_size, 1.0, micro_batch) if samples else []
    for (i, strategy), lp in zip(keys, scores):
        rows[i]["p"][strategy] = round(math.exp(sum(lp)), 6)  # log p of the whole command
    return rows


def summary(rows: Sequence[dict]) -> dict:
    """``follows``, ``against``, ``effect`` overall and per task type (module docstring).

    >>> rows = [{"task_type": "x", "talent_of": s, "p": {"e": 0.9, "n": 0.1}} for s in ("e", "n")]
    >>> {k: summary(rows)[k] for k in ("follows", "against", "effect")}   # the same answer under either talent
    {'follows': 0.5, 'against': 0.5, 'effect': 0.0}
    """

    def block(rs):
        own = [r["p"][r["talent_of"]] for r in rs if r["talent_of"] in r["p"]]
        other = [p for r in rs for s, p in r["p"].items() if s != r["talent_of"]]
        if not own or not other:
            return {"n": len(rs), "follows": None, "against": None, "effect": None}
        f, a = sum(own) / len(own), sum(other) / len(other)
        return {"n": len(rs), "follows": round(f, 4), "against": round(a, 4), "effect": round(f - a, 4)}

    by_type: dict[str, list] = defaultdict(list)
    for r in rows:
        by_type[r["task_type"]].append(r)
    return {**block(rows), "by_type": {k: block(v) for k, v in sorted(by_type.items())}}
