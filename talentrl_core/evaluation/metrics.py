"""Evaluation metrics and their schema (DESIGN.md §6); the report that shows them is ``report.py``.

Input: one ``EpisodeResult`` per evaluated episode. ``sample_idx == 0`` is the greedy episode of a task;
``sample_idx > 0`` are sampled attempts, used only for avg@k. Output of ``build_metrics`` (more keys may
appear at every level, these are guaranteed and checked by ``validate_metrics``)::

    {"schema": 1,
     "systems": {SYSTEM: {PANEL: {"success": float,        # greedy success rate
                                  "ci95": [lo, hi],        # 95% interval (Wilson or bootstrap)
                                  "n": int,                # greedy episodes
                                  "ci_method": str, "mean_reward": float, "tokens_per_episode": float,
                                  "errors": int,           # episodes that ended in an environment error
                                  "invalid_rate": float,   # invalid actions / policy steps
                                  "repeat_rate": float,    # optional: actions repeating one earlier in the
                                                           # episode / policy steps (where every row records it)
                                  "per_task_type": {TYPE: {"success", "ci95", "n", "tokens_per_episode"}},
                                  "avg_at_k": {"k", "k_min", "value", "ci95", "n_tasks"},   # sampled only
                                  "routing_accuracy": float, "routing_n": int}}},         # oracle known
     "paired": {PANEL: {"A vs B": {"a_only", "b_only", "both", "neither", "n", "p_mcnemar",
                                   "reward": {"higher", "lower", "tied", "p_sign"}}}},    # A's reward vs B's
     "training": {SYSTEM: {"updates": int, "reward_first": float, "reward_last": float, ...}}}   # RL systems

``training`` (optional) summarises each RL checkpoint's own per-update history (``training_summary``): the
reward trend, and for TalentRL the routing diagnostics that say whether the talent term could act at all.

``paired`` compares two systems on the tasks both ran (greedy): the method's comparisons of
``PAIRED_COMPARISONS`` whenever both systems were evaluated on the panel, and talent_sft / talentrl against every
zero-parameter floor evaluated beside them; success by exact McNemar, reward by the sign test.

Run: ``build_metrics(results)``, ``routing_confusion(results)``; ``report.write_report`` writes them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

from ..systems import HELD_TO_FLOORS, PAIRED_COMPARISONS, is_floor
from .schema import check as check_schema
from .stats import avg_at_k, bootstrap_ci, paired_counts, reward_sign_test, wilson_ci

SCHEMA_VERSION = 1


@dataclass
class EpisodeResult:
    system: str
    "Which system was evaluated (EvalConfig.systems)."
    panel: str
    "Fixed task panel (textworld, alfworld_valid_seen, qa_nq, ...)."
    task_id: str
    "Deterministic task id (Task.task_id)."
    task_type: str
    "Task type within the panel."
    success: bool
    "Episode won."
    reward: float
    "Final reward."
    tokens: int
    "Generated tokens in the episode."
    chosen_talent: Optional[str] = None
    "Talent the system routed to (None: no routing)."
    oracle_talent: Optional[str] = None
    "Best talent for the task where known (None: unknown)."
    sample_idx: int = 0
    "0: the greedy episode; > 0: a sampled attempt (avg@k)."
    error: bool = False
    "The episode ended in an environment error (crash or timeout): it counts as a failure and is reported."
    n_steps: int = 0
    "Policy steps (routing included)."
    n_invalid: int = 0
    "Steps whose action was unparseable or inadmissible."
    route_p: Optional[float] = None
    ("Probability the policy gave the talent it chose, under the menu constraint (None: the talent was not the "
     "policy's choice). Near 1 on every task: a sure router, which RL's routing contrasts barely move.")
    cue_read: Optional[bool] = None
    ("Whether the router restated the cue its prompt shows (env.routing_cue, issue 38's A2: \"recognise, then "
     "route\"); None without a restated cue.")
    n_repeated: Optional[int] = None
    ("Environment steps repeating an earlier action of the episode (Trajectory.n_repeated: ALFWorld's walks back); "
     "None in rows written before it was recorded.")


SCORE_PANELS = ("webshop",)
"Panels whose literature reports a score (mean final reward x 100) next to the success rate."


def _as_result(r: Union[EpisodeResult, Mapping[str, Any]]) -> EpisodeResult:
    return r if isinstance(r, EpisodeResult) else EpisodeResult(**dict(r))


def _interval(successes: list[bool], ci: str, z: float, n_boot: int, seed: int) -> list[float]:
    if ci == "wilson":
        lo, hi = wilson_ci(int(sum(successes)), len(successes), z=z)
    elif ci == "bootstrap":
        lo, hi = bootstrap_ci([float(s) for s in successes], n_boot=n_boot, seed=seed)
    else:
        raise ValueError(f"ci={ci!r}: choose wilson or bootstrap")
    return [float(lo), float(hi)]


def _success_block(eps: list[EpisodeResult], ci: str, z: float, n_boot: int, seed: int) -> dict:
    succ = [bool(e.success) for e in eps]
    steps = sum(e.n_steps for e in eps)
    block = {
        "success": float(np.mean(succ)),
        "ci95": _interval(succ, ci, z, n_boot, seed),
        "n": int(len(succ)),
        "tokens_per_episode": float(np.mean([e.tokens for e in eps])),
        "errors": int(sum(bool(e.error) for e in eps)),
        "invalid_rate": float(sum(e.n_invalid for e in eps) / steps) if steps else 0.0,
    }
    if eps and all(e.n_repeated is not None for e in eps):  # older rows do not record it: no rate, not a false 0
        block["repeat_rate"] = float(sum(e.n_repeated for e in eps) / steps) if steps else 0.0
    return block


def build_metrics(
    results: Iterable[Union[EpisodeResult, Mapping[str, Any]]],
    ci: str = "wilson",
    z: float = 1.96,
    n_boot: int = 2000,
    seed: int = 0,
    pairs: Iterable[tuple[str, str]] = (),
) -> dict:
    """Aggregate per-episode results into the metrics dict (module docstring; DESIGN.md §6).

    Success, its interval, tokens and per-task-type numbers use greedy episodes (``sample_idx == 0``);
    ``avg_at_k`` uses the sampled ones (``sample_idx > 0``) with a percentile bootstrap over tasks.

    Args:
        results: ``EpisodeResult`` records (or dicts with its fields).
        ci: interval of greedy success: ``"wilson"`` or ``"bootstrap"`` (``EvalConfig.ci``).
        z: normal quantile of the Wilson interval (1.96 for 95%).
        n_boot, seed: bootstrap resamples and seed (avg@k always; success when ``ci="bootstrap"``).
        pairs: paired comparisons beyond ``PAIRED_COMPARISONS`` (``(a, b)`` system names).

    Raises:
        ValueError: no results; a (system, panel) with sampled but no greedy episodes; the same
            (system, panel, task_id, sample_idx) twice.
    """
    rs = [_as_result(r) for r in results]
    if not rs:
        raise ValueError("build_metrics got no episode results")
    seen: set[tuple] = set()
    cells: dict[tuple[str, str], list[EpisodeResult]] = defaultdict(list)
    for r in rs:
        key = (r.system, r.panel, r.task_id, int(r.sample_idx))
        if key in seen:
            raise ValueError(f"duplicate episode result {key}: one greedy episode and distinct sample indices per task")
        seen.add(key)
        cells[(r.system, r.panel)].append(r)

    systems: dict[str, dict] = {}
    for (system, panel), eps in sorted(cells.items()):
        greedy = [e for e in eps if e.sample_idx == 0]
        sampled = [e for e in eps if e.sample_idx > 0]
        if not greedy:
            raise ValueError(f"system {system!r} panel {panel!r} has no greedy (sample_idx 0) episodes")
        block = _success_block(greedy, ci, z, n_boot, seed)
        block["ci_method"] = ci
        block["mean_reward"] = float(np.mean([e.reward for e in greedy]))
        if panel in SCORE_PANELS:
            lo, hi = bootstrap_ci([100.0 * e.reward for e in greedy], n_boot=n_boot, seed=seed)
            block["score"], block["score_ci95"] = 100.0 * block["mean_reward"], [lo, hi]
        by_type: dict[str, list[EpisodeResult]] = defaultdict(list)
        for e in greedy:
            by_type[e.task_type].append(e)
        block["per_task_type"] = {t: _success_block(v, ci, z, n_boot, seed) for t, v in sorted(by_type.items())}
        if sampled:
            by_task: dict[str, list[float]] = defaultdict(list)
            for e in sampled:
                by_task[e.task_id].append(float(e.success))
            per_task = list(by_task.values())
            lo, hi = bootstrap_ci([float(np.mean(v)) for v in per_task], n_boot=n_boot, seed=seed)
            block["avg_at_k"] = {
                "k": int(max(len(v) for v in per_task)),
                "k_min": int(min(len(v) for v in per_task)),
                "value": avg_at_k(per_task),
                "ci95": [lo, hi],
                "n_tasks": int(len(per_task)),
            }
        routed = [e for e in greedy if e.oracle_talent is not None and e.chosen_talent is not None]
        if routed:  # n/a (None) where the oracle label is the same on every task: no routing choice to get right
            one_label = len({e.oracle_talent for e in routed}) < 2
            block["routing_accuracy"] = None if one_label else float(np.mean([e.chosen_talent == e.oracle_talent for e in routed]))
            block["routing_n"] = int(len(routed))
        systems.setdefault(system, {})[panel] = block
    paired = paired_comparisons(rs, [*PAIRED_COMPARISONS, *pairs])
    return {"schema": SCHEMA_VERSION, "ci_level": 0.95, "systems": systems, "paired": paired}


TRAINING_KEYS = {"rollout/reward": "reward", "route/contrast": "contrast", "route/divergence": "divergence",
                 "route/entropy": "entropy", "rl/kl": "kl", "rl/clip_frac": "clip_frac"}


def training_summary(history: list[Mapping[str, Any]]) -> dict:
    """Summarise an RL run's per-update metrics (``talentrl_meta.json["history"]``) for the report.

    ``reward_first`` / ``reward_last``: mean rollout reward over the first and last third of the updates
    (at least one each); ``<name>_mean`` for each of ``TRAINING_KEYS`` the history has; for the routing
    term ``contrast_zero_share``, the share of updates whose routing contrast was exactly 0 (the talent
    choice got no credit), and ``entropy_first`` / ``entropy_last``.

    >>> h = [{"rollout/reward": r, "route/contrast": c, "route/entropy": e}
    ...      for r, c, e in [(0.1, 0.0, 0.69), (0.2, 0.5, 0.6), (0.3, 0.0, 0.5)]]
    >>> s = training_summary(h)
    >>> (s["updates"], s["reward_first"], s["reward_last"], round(s["contrast_zero_share"], 3), s["entropy_last"])
    (3, 0.1, 0.3, 0.667, 0.5)
    >>> training_summary([])
    {'updates': 0}
    """
    out: dict[str, Any] = {"updates": len(history)}
    if not history:
        return out
    third = max(1, len(history) // 3)
    for key, name in TRAINING_KEYS.items():
        vals = [float(h[key]) for h in history if _is_num(h.get(key))]
        if vals:
            out[f"{name}_mean"] = float(np.mean(vals))
    rewards = [float(h["rollout/reward"]) for h in history if _is_num(h.get("rollout/reward"))]
    if rewards:
        out["reward_first"] = float(np.mean(rewards[:third]))
        out["reward_last"] = float(np.mean(rewards[-third:]))
    contrast = [float(h["route/contrast"]) for h in history if _is_num(h.get("route/contrast"))]
    if contrast:
        out["contrast_zero_share"] = float(np.mean([c == 0.0 for c in contrast]))
    entropy = [float(h["route/entropy"]) for h in history if _is_num(h.get("route/entropy"))]
    if entropy:
        out["entropy_first"], out["entropy_last"] = entropy[0], entropy[-1]
    return out


def paired_comparisons(results: Iterable[EpisodeResult], pairs: Iterable[tuple[str, str]] = PAIRED_COMPARISONS) -> dict:
    """Per panel, ``"A vs B"`` → on the tasks both ran greedily, the success discordant counts with the exact McNemar p,
    and under ``"reward"`` the per-task reward sign test (``stats.reward_sign_test``). The pairs: ``pairs``, then each
    of ``HELD_TO_FLOORS`` against every floor evaluated on the panel."""
    greedy: dict[tuple[str, str], dict[str, EpisodeResult]] = defaultdict(dict)
    for r in results:
        if r.sample_idx == 0:
            greedy[(r.panel, r.system)][r.task_id] = r
    out: dict[str, dict] = {}
    for panel in sorted({p for p, _ in greedy}):
        floors = sorted(s for p, s in greedy if p == panel and is_floor(s))
        for a, b in [*pairs, *((a, f) for a in HELD_TO_FLOORS for f in floors)]:
            ra, rb = greedy.get((panel, a)), greedy.get((panel, b))
            if ra and rb:
                c = paired_counts({t: e.success for t, e in ra.items()}, {t: e.success for t, e in rb.items()})
                c["reward"] = reward_sign_test({t: e.reward for t, e in ra.items()}, {t: e.reward for t, e in rb.items()})
                out.setdefault(panel, {})[f"{a} vs {b}"] = c
    return out


def routing_confusion(results: Iterable[Union[EpisodeResult, Mapping[str, Any]]]) -> dict[str, dict[str, dict[str, int]]]:
    """Counts of chosen vs oracle talent per system: ``{system: {oracle: {chosen: count}}}``.

    Greedy episodes where both talents are known; systems without any such episode are left out.

    >>> rs = [EpisodeResult("talentrl", "tw", f"t{i}", "a", True, 1.0, 5, c, o)
    ...       for i, (c, o) in enumerate([("T1", "T1"), ("T2", "T1"), ("T2", "T2")])]
    >>> routing_confusion(rs)
    {'talentrl': {'T1': {'T1': 1, 'T2': 1}, 'T2': {'T2': 1}}}
    """
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in map(_as_result, results):
        if r.sample_idx != 0 or r.chosen_talent is None or r.oracle_talent is None:
            continue
        row = out.setdefault(r.system, {}).setdefault(r.oracle_talent, {})
        row[r.chosen_talent] = row.get(r.chosen_talent, 0) + 1
    return out


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_metrics(d: Any) -> dict:
    """Check the metrics dict's shape (``evaluation.schema``, pydantic); raise ``ValueError`` naming the bad path.

    Paths are dotted, e.g. ``systems.talentrl.textworld.ci95``. Returns ``d`` unchanged.

    >>> validate_metrics({"schema": 1, "systems": {"s": {"p": {"success": 0.5, "ci95": [0.2, 0.8], "n": 4}}}})["schema"]
    1
    >>> validate_metrics({"schema": 1, "systems": {"s": {"p": {"success": 0.5, "ci95": [0.2], "n": 4}}}})
    Traceback (most recent call last):
    ...
    ValueError: systems.s.p.ci95.1: Field required, got [0.2]
    """
    check_schema(d)
    return d  # type: ignore[return-value]


__all__ = ["EpisodeResult", "build_metrics", "paired_comparisons", "routing_confusion", "training_summary",
           "validate_metrics"]
