"""The routing study's tests at the right unit (issue 38): one SFT draw, its RL seeds, the same panel.

The unit of replication for "RL beats SFT" is the SFT draw. Within a draw, each RL seed is compared with the draw's
talent_sft by an exact McNemar test on the panel's tasks, and the seeds together by a task-level sign test (per task,
the seeds' summed successes against talent_sft's success counted as often: positive, negative or tied), never by
pooling the pairs of several seeds as independent. Routing accuracy is the share of panel tasks whose greedy routing
choice is the measured-best talent, reported ``None`` ("n/a") where that label is the same on every task.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Optional, Sequence

from .stats import mcnemar_exact

PRECONDITION_GAP = 0.40
"oracle_talent − random_talent the draw must show: the executor follows the talent."
HABIT_ROUTING = (0.40, 0.60)
"talent_sft's routing accuracy when it follows a 2 : 1 habit on a two-sided mix: wrong on about half the tasks."
CUE_READ = 0.95
"Share of panel tasks on which talent_sft restates the cue it is shown (A2: SFT taught it to read the sign)."
PRIMARY = ("talentrl", "routing_only")
"The variants held to the primary criteria: routing RL at the demo's budget (A0) and the routing-only phase (A1)."
EXECUTOR_TOLERANCE = 0.05
"How far oracle_talent's success per talent may move through a variant's training: the executor not damaged."
AFTER = "oracle_talent_after_"
"System name prefix of the oracle_talent episodes of a variant's trained checkpoint (the executor after training)."
ROUTING_BAR = 0.85
"Routing accuracy a primary run must reach; the issue asks it of all runs but one (8 of 9 over 3 draws x 3 seeds)."
MIN_DRAWS = 3
"SFT draws the primary criteria must hold on before the study calls them met."
MECHANISM = ("sampled_talent_rl", "shuffled_contrast_rl", "relabel_sft", "relabel_replay_sft", "relabel_replay_sft_rl_batch")
"The baselines that test where a gain comes from, each run at the primary variant's budget."


def greedy(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """``{system: {panel/task: row}}`` of the greedy episodes."""
    out: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r.get("sample_idx", 0) == 0:
            out[r["system"]][f"{r['panel']}/{r['task_id']}"] = r
    return dict(out)


def routing_accuracy(by_task: Mapping[str, Mapping[str, Any]]) -> Optional[float]:
    """Share of tasks routed to their oracle talent; None where there is no choice to get right (one label for all).

    >>> routing_accuracy({"a": {"chosen_talent": "E", "oracle_talent": "E"}, "b": {"chosen_talent": "E", "oracle_talent": "N"}})
    0.5
    >>> routing_accuracy({"a": {"chosen_talent": "E", "oracle_talent": "E"}}) is None
    True
    """
    routed = [r for r in by_task.values() if r.get("oracle_talent")]
    if len({r["oracle_talent"] for r in routed}) < 2:
        return None
    return round(sum(r.get("chosen_talent") == r["oracle_talent"] for r in routed) / len(routed), 6)


def paired(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> dict:
    """Success rates, discordant counts and the exact McNemar p of ``a`` against ``b`` on their common tasks."""
    common = sorted(set(a) & set(b))
    a_only = sum(bool(a[t]["success"]) and not b[t]["success"] for t in common)
    b_only = sum(bool(b[t]["success"]) and not a[t]["success"] for t in common)
    n = max(len(common), 1)
    return {"n": len(common), "a_success": round(sum(bool(a[t]["success"]) for t in common) / n, 6),
            "b_success": round(sum(bool(b[t]["success"]) for t in common) / n, 6),
            "a_only": a_only, "b_only": b_only, "p_mcnemar": mcnemar_exact(a_only, b_only)}


def task_sign_test(runs: Sequence[Mapping[str, Mapping[str, Any]]], base: Mapping[str, Mapping[str, Any]]) -> dict:
    """Per task: the runs' summed successes against ``base``'s success counted once per run; a two-sided sign test
    (exact binomial on the untied tasks) of how many tasks are ahead against behind."""
    common = sorted(set(base).intersection(*runs)) if runs else []
    ahead = behind = 0
    for t in common:
        d = sum(bool(r[t]["success"]) for r in runs) - len(runs) * bool(base[t]["success"])
        ahead += d > 0
        behind += d < 0
    return {"tasks": len(common), "ahead": ahead, "behind": behind, "p_sign": mcnemar_exact(ahead, behind)}


def draw_preconditions(g: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict:
    out: dict[str, Any] = {}
    if "oracle_talent" in g and "random_talent" in g:
        t = paired(g["oracle_talent"], g["random_talent"])
        t["met"] = t["a_success"] - t["b_success"] >= PRECONDITION_GAP and t["p_mcnemar"] < 0.01
        out["executor_follows_talent"] = t
    if "talent_sft" in g:
        acc = routing_accuracy(g["talent_sft"])
        cues = [r["cue_read"] for r in g["talent_sft"].values() if r.get("cue_read") is not None]
        if cues:  # recognise, then route (A2): SFT taught reading the cue, not the choice
            share = sum(map(bool, cues)) / len(cues)
            out["sft_router_reads_cue"] = {"cue_read": share, "routing_accuracy": acc, "met": share >= CUE_READ}
        else:
            out["sft_router_follows_habit"] = {"routing_accuracy": acc,
                                               "met": acc is not None and HABIT_ROUTING[0] <= acc <= HABIT_ROUTING[1]}
    return out


def routing_verdicts(per_seed: Mapping[int, Sequence[Mapping[str, Any]]], variants: Sequence[str]) -> dict:
    """Preconditions, per-seed tests of every variant against talent_sft, the task-level sign tests across seeds and
    the issue's criteria (``summary``) for one SFT draw."""
    seeds = sorted(per_seed)
    gs = {s: greedy(per_seed[s]) for s in seeds}
    g0 = gs[seeds[0]]
    out: dict[str, Any] = {"seeds": seeds, "preconditions": draw_preconditions(g0),
                           "routing_accuracy": {s: routing_accuracy(g0[s]) for s in sorted(g0) if s in (
                               "talent_sft", "oracle_sft", "random_talent", "oracle_talent")},
                           "success": {s: round(sum(bool(r["success"]) for r in g0[s].values()) / max(len(g0[s]), 1), 6)
                                       for s in sorted(g0) if s not in variants and not s.startswith(AFTER)}}
    per_variant: dict[str, Any] = {}
    for v in variants:
        runs = {s: gs[s][v] for s in seeds if v in gs[s]}
        if not runs or "talent_sft" not in g0:
            continue
        per_variant[v] = {
            "per_seed": {s: {**paired(r, g0["talent_sft"]), "routing_accuracy": routing_accuracy(r)} for s, r in runs.items()},
            "task_sign_test_vs_talent_sft": task_sign_test(list(runs.values()), g0["talent_sft"]),
        }
    out["vs_talent_sft"] = per_variant
    out["vs_primary"] = against_primary(gs, seeds, variants)
    out["executor_after"] = executor_after(gs, seeds, variants)
    out["summary"] = summary(out)
    return out


def against_primary(gs: Mapping[int, Mapping[str, Mapping[str, Mapping[str, Any]]]], seeds: Sequence[int],
                    variants: Sequence[str]) -> dict:
    """Each mechanism baseline against the primary variant of the same RL seed (talentrl where run, else routing_only:
    the baselines run at the primary's budget): ``{baseline: {"primary", "per_seed": {seed: paired test}}}``."""
    primary = next((p for p in PRIMARY if p in variants), None)
    out: dict[str, Any] = {}
    for b in MECHANISM:
        pairs = {s: paired(gs[s][primary], gs[s][b]) for s in seeds if b in variants and primary in gs[s] and b in gs[s]}
        if pairs:
            out[b] = {"primary": primary, "per_seed": pairs}
    return out


def per_talent(by_task: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Success per oracle talent of a system's greedy episodes."""
    by: dict[str, list[bool]] = defaultdict(list)
    for r in by_task.values():
        if r.get("oracle_talent"):
            by[r["oracle_talent"]].append(bool(r["success"]))
    return {t: round(sum(xs) / len(xs), 6) for t, xs in sorted(by.items())}


def executor_after(gs: Mapping[int, Mapping[str, Mapping[str, Mapping[str, Any]]]], seeds: Sequence[int],
                   variants: Sequence[str]) -> dict:
    """oracle_talent's success per talent before (the draw) and after each variant's training, per seed; ``met`` when
    every talent moved by at most ``EXECUTOR_TOLERANCE``."""
    out: dict[str, Any] = {}
    for v in variants:
        runs = {s: gs[s][AFTER + v] for s in seeds if AFTER + v in gs[s] and "oracle_talent" in gs[s]}
        per_seed = {}
        for s, after in runs.items():
            b, a = per_talent(gs[s]["oracle_talent"]), per_talent(after)
            per_seed[s] = {"before": b, "after": a,
                           "met": all(abs(a.get(t, 0.0) - x) <= EXECUTOR_TOLERANCE for t, x in b.items())}
        if per_seed:
            out[v] = per_seed
    return out


def summary(v: Mapping[str, Any]) -> dict:
    """The issue's criteria, met or not, for this draw."""
    s: dict[str, Any] = {"preconditions_met": all(p.get("met") for p in v["preconditions"].values())}
    for name in PRIMARY:  # the primary criteria at each RL budget: A0 (talentrl) and A1 (routing_only)
        t = v["vs_talent_sft"].get(name)
        if not t:
            continue
        seeds = t["per_seed"].values()
        s[f"{name}_beats_talent_sft_every_seed"] = all(x["a_success"] > x["b_success"] and x["p_mcnemar"] < 0.01 for x in seeds)
        s[f"{name}_task_sign_p"] = t["task_sign_test_vs_talent_sft"]["p_sign"]
        s[f"{name}_routing_accuracy"] = [x["routing_accuracy"] for x in seeds]
        s[f"{name}_never_below_talent_sft"] = all(x["a_success"] >= x["b_success"] for x in seeds)
    for name, block in v["vs_talent_sft"].items():
        s[f"{name}_success"] = [x["a_success"] for x in block["per_seed"].values()]
    sh, sft_acc = v["vs_talent_sft"].get("shuffled_contrast_rl"), v["routing_accuracy"].get("talent_sft")
    if sh and sft_acc is not None:
        accs = [x["routing_accuracy"] for x in sh["per_seed"].values()]
        s["shuffled_within_0.05_of_sft_routing"] = all(a is not None and abs(a - sft_acc) <= 0.05 for a in accs)
    for name, block in v.get("vs_primary", {}).items():
        s[f"{block['primary']}_vs_{name}"] = [f"{x['a_only']}:{x['b_only']} p={x['p_mcnemar']:.2g}"
                                              for x in block["per_seed"].values()]
    for name, per_seed in v.get("executor_after", {}).items():
        s[f"{name}_executor_not_damaged"] = all(x["met"] for x in per_seed.values())
    s["success"] = v["success"]
    return s


def study_criteria(by_draw: Mapping[int, Mapping[str, Any]]) -> dict:
    """The issue's primary criteria over SFT draws, from each draw's ``routing_verdicts``: every draw is tested on its
    own (nothing is pooled across draws: they share the panel's tasks); ``met`` needs ``MIN_DRAWS`` draws, each
    with its preconditions and its per-seed and task-level tests met, routing accuracy of at least ``ROUTING_BAR`` in
    all runs but one, and no run below talent_sft. A draw that fails a precondition stays in, counted as failing."""
    out: dict[str, Any] = {"draws": sorted(by_draw)}
    for name in PRIMARY:
        per = {d: v["summary"] for d, v in sorted(by_draw.items()) if f"{name}_beats_talent_sft_every_seed" in v["summary"]}
        if not per:
            continue
        accs = [a for s in per.values() for a in s[f"{name}_routing_accuracy"]]
        good = sum(a is not None and a >= ROUTING_BAR for a in accs)
        meeting = [d for d, s in per.items() if s["preconditions_met"] and s[f"{name}_beats_talent_sft_every_seed"]
                   and s[f"{name}_task_sign_p"] < 0.01]
        block = {"draws_run": list(per), "draws_meeting_primary": meeting,
                 "task_sign_p": {d: s[f"{name}_task_sign_p"] for d, s in per.items()},
                 "routing_accuracy": {d: s[f"{name}_routing_accuracy"] for d, s in per.items()},
                 "runs_routing_at_bar": f"{good} of {len(accs)}",
                 "never_below_talent_sft": all(s[f"{name}_never_below_talent_sft"] for s in per.values())}
        block["met"] = (len(per) >= MIN_DRAWS and len(meeting) == len(per) and good >= len(accs) - 1
                        and block["never_below_talent_sft"])
        out[name] = block
    return out
