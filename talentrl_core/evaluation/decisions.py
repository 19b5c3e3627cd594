"""Per-decision accuracy against the teacher: which decision an imitating policy gets wrong (issues 39, 40).

Success says whether an episode ended well, not where a policy went astray. Here the teacher (a strategy expert,
``envs.strategies``) plays every step and the policy, shown the same prompt, names its own command first: the
classic teacher-forced accuracy of imitation learning, on the teacher's state distribution. The policy routes to
the teacher's talent (``routing: fixed``), so "the right command" is the one that talent's strategy takes. Each
decision is classed by its abstract command (``library.templates.abstract_action``; WebShop: the search query, a result,
an option, buy, a page button).

With ``rank`` the policy also scores every admissible command by its whole log-probability under the decoding mask
(``rank_commands``; as WebShop's IL agent scores each button): where greedy decoding names another command, the
teacher's rank among the candidates says whether the model prefers it at all (``pipeline.decisions --rank``).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Callable, Optional, Sequence

from ..generation import GenResult
from ..prompts import format_action, parse_for_env
from ..trajectories import command_key


class TeacherForced:
    """A policy wrapper: ``model`` answers every execution step (recorded in ``records``), the teacher's command is
    played. Routing steps are the model's own (the caller fixes the talent)."""

    name = "teacher_forced"

    def __init__(self, model, teacher: str, template, rank: bool = False):
        self.model, self.teacher, self.template, self.rank = model, teacher, template, rank
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
            record = {"goal": it.env.goal() if hasattr(it.env, "goal") else "", "teacher": want, "policy": got,
                      "decision": self.template(command_key(want)),
                      "correct": same_command(got, want)}
            if it.seed is not None:  # the rollout seeds a step with its episode's seed * 1000 + the step's index
                record.update(episode=it.seed // 1000, step=it.seed % 1000)
            if self.rank and it.allowed:
                ranked = rank_commands(self.model, it.messages, it.allowed, it.env_name)
                record.update(candidates=len(ranked), top_scored=ranked[0][0],
                              teacher_rank=next((i for i, (c, _) in enumerate(ranked) if same_command(c, want)), None))
            self.records.append(record)
            out.append(GenResult(text=format_action(it.env_name, want) if want else "", token_ids=[], prompt_tokens=0))
        return out


def same_command(a: Optional[str], b: Optional[str]) -> bool:
    """Commands equal up to case and spacing.

    >>> same_command("click[Buy Now]", "click[buy  now]"), same_command(None, "look")
    (True, False)
    """
    return a is not None and b is not None and command_key(a) == command_key(b)


def rank_commands(policy, messages: list[dict], allowed: Sequence[str], env_name: str) -> list[tuple[str, float]]:
    """Every allowed completion as ``(command, log p)``, best first: the whole completion's log-probability under
    the decoding mask at temperature 1 (the policy's own prompt, cut as its generator cuts it). Over all of them the
    probabilities sum to 1."""
    from ..rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions

    model, tok = getattr(policy, "model", None), policy.tok
    if model is None:
        raise ValueError("ranking the admissible commands needs the model's weights (model.backend transformers); "
                         "this policy has none (an OpenAI-compatible endpoint)")
    keep = getattr(policy.gen, "max_context", model.config.max_position_embeddings) - policy.max_new_tokens
    prompt = chat_prompt_ids(tok, messages, keep)
    samples = [Sample("exec", prompt, completion_ids_of(tok, a), [], allowed=list(allowed)) for a in allowed]
    scores = score_completions(model, tok, samples, model.config.vocab_size, 1.0, share_prefix=True)
    return sorted(((parse_for_env(env_name, a), sum(lp)) for a, lp in zip(allowed, scores)), key=lambda x: -x[1])


def repeated(records: Sequence[dict]) -> list[bool]:
    """Per record: the policy named, wrongly, a command already played earlier in its episode (the teacher's, since
    the teacher plays every step): in ALFWorld a walk back to a receptacle already searched, the loop behaviour
    cloning leaves. Records without an episode (older files) are never repeats.

    >>> repeated([{"episode": 0, "step": 0, "teacher": "go to a", "policy": "go to a", "correct": True},
    ...           {"episode": 0, "step": 1, "teacher": "go to b", "policy": "go to a", "correct": False},
    ...           {"episode": 1, "step": 0, "teacher": "go to b", "policy": "go to a", "correct": False}])
    [False, True, False]
    """
    played: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for r in records:
        if r.get("episode") is not None:
            played[r["episode"]].append((r["step"], command_key(r["teacher"])))
    out = []
    for r in records:
        said = command_key(r.get("policy"))
        before = played.get(r.get("episode"), [])  # no episode: never a key of played
        out.append(not r["correct"] and any(step < r["step"] and cmd == said for step, cmd in before))
    return out


def accuracy_table(records: Sequence[dict], detail: Optional[Callable[[str, str], Optional[str]]] = None) -> dict:
    """{decision: {n, correct, accuracy, wrong_repeats}} and the overall row ``all`` (``wrong_repeats``: wrong
    decisions that name a command already played in the episode, ``repeated``; only where the records name their
    episode, as records written before that do not); with ranked records (``rank``) also
    how often the teacher's command scored first and its median rank (1 = first). ``detail`` (the family's
    ``decision_detail``: goal, teacher's command → a finer class or None) adds a row ``"<decision> <class>"`` for
    each finer class (WebShop: ``click[{option}] color``).

    >>> rows = [{"decision": "a", "correct": True, "teacher_rank": 0, "goal": "g", "teacher": "x"},
    ...         {"decision": "a", "correct": False, "teacher_rank": 3, "goal": "g", "teacher": "y"}]
    >>> accuracy_table(rows)["a"]
    {'n': 2, 'correct': 1, 'accuracy': 0.5, 'scored_first': 1, 'median_rank': 2.5}
    >>> accuracy_table([{**r, "episode": 0, "step": i} for i, r in enumerate(rows)])["a"]["wrong_repeats"]
    0
    >>> accuracy_table(rows, lambda goal, cmd: cmd if cmd == "y" else None)["a y"]["accuracy"]
    0.0
    """
    groups: dict[str, list[tuple[dict, bool]]] = defaultdict(list)
    for r, again in zip(records, repeated(records)):
        groups[r["decision"]].append((r, again))
        groups["all"].append((r, again))
        finer = detail(r.get("goal", ""), r["teacher"]) if detail is not None and r.get("teacher") else None
        if finer:
            groups[f"{r['decision']} {finer}"].append((r, again))
    table = {}
    for k, pairs in sorted(groups.items()):
        rows = [r for r, _ in pairs]
        ok = [bool(r["correct"]) for r in rows]
        table[k] = {"n": len(ok), "correct": sum(ok), "accuracy": round(sum(ok) / len(ok), 4)}
        if any(r.get("episode") is not None for r in rows):
            table[k]["wrong_repeats"] = sum(again for _, again in pairs)
        ranks = [r["teacher_rank"] for r in rows if r.get("teacher_rank") is not None]
        if ranks:
            table[k].update(scored_first=sum(x == 0 for x in ranks), median_rank=statistics.median(x + 1 for x in ranks))
    return table


def teacher_route(talents_by: str, family: str, teacher: str, lib) -> dict:
    """How the policy is routed while ``teacher`` plays: to the talent distilled from that strategy (``talents_by``
    strategy), or, with one talent per task procedure (``procedure``, ALFWorld), to each task's own (the oracle).
    An unknown teacher is named with the choices."""
    if talents_by == "procedure":
        from ..envs.strategies import get_strategy

        get_strategy(family, teacher)  # a KeyError names the family's strategies
        return {"routing": "oracle"}
    talents = lib.strategy_talents(family)
    if teacher not in talents:
        raise ValueError(f"no talent distilled from the strategy {teacher!r} in this library; "
                         f"choose from {sorted(k for k in talents if k)}")
    return {"routing": "fixed", "talent_id": talents[teacher]}


def teacher_forced(cfg, panel: str, checkpoint: str, teacher: str, knowledge, load_policy, progress: bool = False,
                   rank: bool = False) -> tuple[list[dict], dict]:
    """(records, table): ``checkpoint`` named the teacher's every command on ``panel``'s tasks, given the talent
    distilled from that teacher (``knowledge`` a flat=False library view; the library's strategy labels name it), or
    with procedure talents (``library.talents_by=procedure``, ALFWorld) the task's own procedure talent;
    ``rank``: every admissible command scored too (``rank_commands``)."""
    from ..envs.registry import family_spec
    from ..library.templates import abstract_action
    from ..rollout import EpisodeSpec, run_episodes
    from .runner import open_panel

    family, tasks, settings = open_panel(cfg, panel, progress)
    route = teacher_route(cfg.library.talents_by, family.name, teacher, knowledge.lib)
    wrapper = TeacherForced(load_policy(checkpoint), teacher, lambda a: abstract_action(family.name, a), rank)
    specs = [EpisodeSpec(t, **route, use_skills=True, seed=cfg.eval.seed * 100003 + i) for i, t in enumerate(tasks)]
    trajs = run_episodes(family.make, specs, wrapper, settings, knowledge, cfg.collect.batch_size, progress)
    table = accuracy_table(wrapper.records, family_spec(family.name).decision_detail)
    table["teacher_success"] = round(sum(bool(t.success) for t in trajs) / max(1, len(trajs)), 4)
    return wrapper.records, table
