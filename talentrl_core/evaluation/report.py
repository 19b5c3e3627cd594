"""Evaluation metrics, their schema, and the report (DESIGN.md §6).

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
                                  "per_task_type": {TYPE: {"success", "ci95", "n", "tokens_per_episode"}},
                                  "avg_at_k": {"k", "k_min", "value", "ci95", "n_tasks"},   # sampled only
                                  "routing_accuracy": float, "routing_n": int}}},         # oracle known
     "paired": {PANEL: {"A vs B": {"a_only", "b_only", "both", "neither", "n", "p_mcnemar"}}},
     "training": {SYSTEM: {"updates": int, "reward_first": float, "reward_last": float, ...}}}   # RL systems

``training`` (optional) summarises each RL checkpoint's own per-update history (``training_summary``): the
reward trend, and for TalentRL the routing diagnostics that say whether the talent term could act at all.

``paired`` compares two systems on the tasks both ran (greedy): the method's comparisons of
``PAIRED_COMPARISONS`` whenever both systems were evaluated on the panel.

``write_report`` writes ``metrics.json`` (DVC metrics), ``report.md`` and PNG plots into one folder, each
file atomically. Plots use matplotlib's object API on the Agg canvas (no pyplot, no global backend).

Run: ``write_report(build_metrics(results), out_dir, confusion=routing_confusion(results))``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from ..io import write_json, write_text
from .markdown import md_table
from .headline import headline, rl_curves_csv
from .schema import check as check_schema
from .plots import plot_confusion, plot_rl_curves, plot_success_by_panel, plot_success_by_task_type, save_png
from .talent_effect import plot_strategy_matrix, talent_section, verdicts
from ..systems import HEADLINE_PAIRS, PAIRED_COMPARISONS, SYSTEMS
from .stats import avg_at_k, bootstrap_ci, intervals_overlap, paired_counts, wilson_ci

SCHEMA_VERSION = 1

SYSTEM_ORDER = list(SYSTEMS)
"Table and plot order of the known systems (``systems.SYSTEMS``); others follow alphabetically."


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


SCORE_PANELS = ("webshop",)
"Panels whose literature reports a score (mean final reward x 100) next to the success rate."


def score_section(metrics: Mapping, systems: list[str], panels: list[str]) -> list[str]:
    """WebShop's score: mean final reward x 100 of the greedy episodes, 95% percentile bootstrap over tasks."""
    S = metrics["systems"]
    shown = [p for p in panels if any("score" in S[s].get(p, {}) for s in systems)]
    if not shown:
        return []
    rows = [[s] + [f"{S[s][p]['score']:.1f} [{S[s][p]['score_ci95'][0]:.1f}, {S[s][p]['score_ci95'][1]:.1f}]"
                   if "score" in S[s].get(p, {}) else "—" for p in shown] for s in systems]
    return ["## Score (mean reward x 100)", "",
            "Mean final reward x 100 of the greedy episodes (a purchase's partial reward counts), 95% percentile "
            "bootstrap over tasks. Success above is reward 1.0.", "", md_table(["system"] + shown, rows), ""]


def _as_result(r: Union[EpisodeResult, Mapping[str, Any]]) -> EpisodeResult:
    return r if isinstance(r, EpisodeResult) else EpisodeResult(**dict(r))


def _order_systems(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    known = [s for s in SYSTEM_ORDER if s in names]
    return known + sorted(s for s in names if s not in SYSTEM_ORDER)


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
    return {
        "success": float(np.mean(succ)),
        "ci95": _interval(succ, ci, z, n_boot, seed),
        "n": int(len(succ)),
        "tokens_per_episode": float(np.mean([e.tokens for e in eps])),
        "errors": int(sum(bool(e.error) for e in eps)),
        "invalid_rate": float(sum(e.n_invalid for e in eps) / steps) if steps else 0.0,
    }


def build_metrics(
    results: Iterable[Union[EpisodeResult, Mapping[str, Any]]],
    ci: str = "wilson",
    z: float = 1.96,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict:
    """Aggregate per-episode results into the metrics dict (module docstring; DESIGN.md §6).

    Success, its interval, tokens and per-task-type numbers use greedy episodes (``sample_idx == 0``);
    ``avg_at_k`` uses the sampled ones (``sample_idx > 0``) with a percentile bootstrap over tasks.

    Args:
        results: ``EpisodeResult`` records (or dicts with its fields).
        ci: interval of greedy success: ``"wilson"`` or ``"bootstrap"`` (``EvalConfig.ci``).
        z: normal quantile of the Wilson interval (1.96 for 95%).
        n_boot, seed: bootstrap resamples and seed (avg@k always; success when ``ci="bootstrap"``).

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
        if routed:
            block["routing_accuracy"] = float(np.mean([e.chosen_talent == e.oracle_talent for e in routed]))
            block["routing_n"] = int(len(routed))
        systems.setdefault(system, {})[panel] = block
    return {"schema": SCHEMA_VERSION, "ci_level": 0.95, "systems": systems, "paired": paired_comparisons(rs)}


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
    """Per panel, ``"A vs B"`` → discordant counts and the exact McNemar p on the tasks both ran greedily."""
    greedy: dict[tuple[str, str], dict[str, bool]] = defaultdict(dict)
    for r in results:
        if r.sample_idx == 0:
            greedy[(r.panel, r.system)][r.task_id] = bool(r.success)
    out: dict[str, dict] = {}
    for panel in sorted({p for p, _ in greedy}):
        for a, b in pairs:
            ra, rb = greedy.get((panel, a)), greedy.get((panel, b))
            if ra and rb:
                out.setdefault(panel, {})[f"{a} vs {b}"] = paired_counts(ra, rb)
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


# ----------------------------------------------------------------------------------------------------
# validation


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


# ----------------------------------------------------------------------------------------------------
# report


def _fmt(b: Mapping) -> str:
    lo, hi = b["ci95"]
    return f"{b['success']:.3f} [{lo:.3f}, {hi:.3f}]"


def _panels(metrics: Mapping) -> list[str]:
    return sorted({p for panels in metrics["systems"].values() for p in panels})


def training_section(metrics: Mapping) -> list[str]:
    """The "RL training" table: reward trend, routing contrast, arm divergence, entropy, KL, clip fraction."""
    training = metrics.get("training") or {}
    if not training:
        return []
    out = ["## RL training (each checkpoint's own per-update history)", "",
           "Rollout reward over the first and last third of the updates. For TalentRL: how often the routing "
           "contrast was exactly 0 (the talent choice got no credit), the share of seed-matched rollouts whose "
           "actions differed between talent arms (near 0: the executor ignores the talent), and the routing "
           "entropy at the first and last update.", ""]

    def num(t: Mapping, k: str, f: str = "{:.3f}") -> str:
        return f.format(t[k]) if k in t else "—"

    rows = [[s, str(t.get("updates", 0)), num(t, "reward_first"), num(t, "reward_last"), num(t, "contrast_zero_share"),
             num(t, "divergence_mean"), f"{num(t, 'entropy_first')} → {num(t, 'entropy_last')}" if "entropy_first" in t else "—",
             num(t, "kl_mean", "{:.2g}"), num(t, "clip_frac_mean")]
            for s, t in ((s, training[s]) for s in _order_systems(training))]
    out += [md_table(["system", "updates", "reward first", "reward last", "contrast = 0", "arm divergence",
                       "routing entropy", "KL", "clip frac"], rows), ""]
    return out


def perf_section(metrics: Mapping) -> list[str]:
    """What each greedy run cost: seconds, policy steps, and prompt tokens per step asked for vs run (KV reuse)."""
    perf = metrics.get("perf") or {}
    rows = []
    for s in _order_systems(perf):
        for p, c in sorted(perf[s].items()):
            n = max(c.get("policy_steps", 0), 1)
            rows.append([s, p, f"{c.get('seconds', 0):.0f}", str(c.get("policy_steps", 0)),
                         f"{c.get('prompt_tokens', 0) / n:.0f}", f"{c.get('prefilled_tokens', 0) / n:.0f}"])
    if not rows:
        return []
    return ["## Evaluation cost (greedy runs)", "",
            "Prompt tokens per policy step, as built and as actually read by the model (the rest came from the "
            "episode's KV cache).", "",
            md_table(["system", "panel", "seconds", "policy steps", "prompt tok/step", "prefilled tok/step"], rows), ""]


def integrity_section(metrics: Mapping) -> list[str]:
    """Environment errors and the invalid-action rate per system and panel (empty when there are none)."""
    S, systems, panels = metrics["systems"], _order_systems(metrics["systems"]), _panels(metrics)
    if not any(S[s][p].get("errors") or S[s][p].get("invalid_rate") for s in systems for p in S[s]):
        return []
    rows = [[s] + [f"{S[s][p].get('errors', 0)} errors, {100 * S[s][p].get('invalid_rate', 0.0):.1f}% invalid" if p in S[s] else "—"
                   for p in panels] for s in systems]
    return ["## Episode integrity", "",
            "Greedy episodes that ended in an environment error (counted as failures) and the share of policy steps "
            "whose action was unparseable or inadmissible.", "", md_table(["system"] + panels, rows), ""]


def notes_section(metrics: Mapping, systems: list[str], panels: list[str]) -> list[str]:
    """The report's notes: what success means, what zero_shot is, and per panel the best system and who is close."""
    S, paired = metrics["systems"], metrics.get("paired") or {}
    out = ["## Notes", ""]
    out.append("- Success and its interval use greedy episodes (one per task); avg@k uses sampled attempts.")
    if metrics.get("zero_shot_model") and "zero_shot" in systems:
        out.append(f"- zero_shot is {metrics['zero_shot_model']}.")
    for p in panels:
        present = [s for s in systems if p in S[s]]
        best = max(present, key=lambda s: S[s][p]["success"])
        close = [s for s in present if s != best and intervals_overlap(S[s][p]["ci95"], S[best][p]["ci95"])]
        line = f"- `{p}`: best greedy success {best} {_fmt(S[best][p])}"
        line += f"; its interval overlaps {', '.join(close)} (not clearly different at this n by the intervals)." if close else \
            "; no other system's interval overlaps it."
        comps = paired.get(p) or {}
        sharp = [(f"{best} vs {s}", comps[f"{best} vs {s}"]) for s in close if f"{best} vs {s}" in comps]
        if sharp:
            line += " Paired on the same tasks: " + "; ".join(
                f"{k} {c['a_only']}:{c['b_only']} discordant, McNemar p = {c['p_mcnemar']:.4f}" for k, c in sharp) + "."
        ns = sorted({S[s][p]["n"] for s in present})
        if len(ns) > 1:
            line += f" Systems were evaluated on different numbers of episodes ({ns})."
        out.append(line)
    return out


def _figure(b: Mapping) -> str:
    score = f", score {b['score']:.1f}" if "score" in b else ""
    return f"{_fmt(b)}{score}"


def headline_section(metrics: Mapping) -> list[str]:
    """The report's opening lines: per panel, the main comparisons' greedy success (95% interval) with their paired
    count on the same tasks (the first two of ``HEADLINE_PAIRS`` whose systems both ran); a panel without any of those
    pairs shows its best system.

    >>> b = lambda s: {"success": s, "ci95": [s - 0.1, s + 0.1], "n": 200}
    >>> m = {"systems": {"talentrl": {"tw": b(0.9)}, "flat_grpo": {"tw": b(0.5)}},
    ...      "paired": {"tw": {"talentrl vs flat_grpo": {"a_only": 80, "b_only": 0, "p_mcnemar": 1e-24}}}}
    >>> print("\\n".join(headline_section(m)))
    ## Headline
    <BLANKLINE>
    Greedy success, 95% interval in brackets; paired: tasks only the first / only the second solved, exact McNemar p.
    <BLANKLINE>
    - `tw`: talentrl 0.900 [0.800, 1.000] vs flat_grpo 0.500 [0.400, 0.600] (n = 200; paired 80:0, p = 1e-24).
    <BLANKLINE>
    """
    S, paired = metrics["systems"], metrics.get("paired") or {}
    out = ["## Headline", "",
           "Greedy success, 95% interval in brackets; paired: tasks only the first / only the second solved, exact McNemar p.", ""]
    for p in _panels(metrics):
        present = [s for s in _order_systems(S) if p in S[s]]
        pairs = [(a, b) for a, b in HEADLINE_PAIRS if a in present and b in present][:2]
        for a, b in pairs:
            ns = sorted({S[a][p]["n"], S[b][p]["n"]})
            c = (paired.get(p) or {}).get(f"{a} vs {b}")
            tail = f"; paired {c['a_only']}:{c['b_only']}, p = {c['p_mcnemar']:.2g}" if c else ""
            out.append(f"- `{p}`: {a} {_figure(S[a][p])} vs {b} {_figure(S[b][p])} "
                       f"(n = {' / '.join(map(str, ns))}{tail}).")
        if not pairs:
            best = max(present, key=lambda s: S[s][p]["success"])
            out.append(f"- `{p}`: best greedy success {best} {_figure(S[best][p])} (n = {S[best][p]['n']}).")
    return out + [""]


def verdict_section(metrics: Mapping) -> list[str]:
    """The talent criteria (``talent_effect.verdicts``) of every panel, each met or not with its figure; empty when
    no criterion's systems ran."""
    per_panel = [(p, verdicts(metrics, p)) for p in _panels(metrics)]
    per_panel = [(p, v) for p, v in per_panel if v]
    if not per_panel:
        return []
    out = ["## Verdicts", ""]
    for p, lines in per_panel:
        out += ([f"### {p}", ""] if len(per_panel) > 1 else [f"On `{p}`:", ""]) + lines + [""]
    return out


def render_markdown(metrics: Mapping, plots: Iterable[str] = ()) -> str:
    """The Markdown report: the headline and the verdicts first, then systems × panels, per-task-type tables, tokens,
    avg@k, routing, the talent matrix, RL training, cost and notes."""
    systems = _order_systems(metrics["systems"])
    panels = _panels(metrics)
    S = metrics["systems"]
    methods = sorted({b.get("ci_method", "wilson") for s in systems for b in S[s].values()})
    out = ["# TalentRL evaluation", ""]
    out += headline_section(metrics)
    out += verdict_section(metrics)
    out += ["## Greedy success by system and panel", ""]
    out += [f"Success rate of greedy episodes, 95% interval in brackets ({', '.join(methods)}), n = episodes.", ""]
    rows = [[s] + [f"{_fmt(S[s][p])} (n={S[s][p]['n']})" if p in S[s] else "—" for p in panels] for s in systems]
    out += [md_table(["system"] + panels, rows), ""]
    out += score_section(metrics, systems, panels)
    out += integrity_section(metrics)
    out += ["## Tokens per episode", ""]
    rows = [[s] + [f"{S[s][p]['tokens_per_episode']:.1f}" if p in S[s] and "tokens_per_episode" in S[s][p] else "—"
                   for p in panels] for s in systems]
    out += [md_table(["system"] + panels, rows), ""]

    if any("avg_at_k" in S[s][p] for s in systems for p in S[s]):
        out += ["## Sampled avg@k", "", "Mean over tasks of the success rate of k sampled attempts; "
                "95% percentile bootstrap over tasks.", ""]
        rows = []
        for s in systems:
            cells = []
            for p in panels:
                ak = S[s].get(p, {}).get("avg_at_k")
                cells.append(f"{ak['value']:.3f} [{ak['ci95'][0]:.3f}, {ak['ci95'][1]:.3f}] (k={ak['k']})" if ak else "—")
            rows.append([s] + cells)
        out += [md_table(["system"] + panels, rows), ""]

    out += ["## Success by task type", ""]
    for p in panels:
        types = sorted({t for s in systems for t in S[s].get(p, {}).get("per_task_type", {})})
        if not types:
            continue
        out += [f"### {p}", ""]
        rows = []
        for s in systems:
            ptt = S[s].get(p, {}).get("per_task_type", {})
            rows.append([s] + [f"{_fmt(ptt[t])} (n={ptt[t]['n']})" if t in ptt else "—" for t in types])
        out += [md_table(["system"] + types, rows), ""]

    routed = [(s, p) for s in systems for p in panels if "routing_accuracy" in S[s].get(p, {})]
    if routed:
        out += ["## Routing accuracy (chosen talent = oracle talent)", ""]
        rows = [[s, p, f"{S[s][p]['routing_accuracy']:.3f}", str(S[s][p].get("routing_n", ""))] for s, p in routed]
        out += [md_table(["system", "panel", "accuracy", "n"], rows), ""]

    paired = metrics.get("paired") or {}
    if any(paired.values()):
        out += ["## Paired comparisons (same tasks, greedy)", "",
                "Tasks only A solved, only B solved, both; two-sided exact McNemar p on the discordant tasks.", ""]
        rows = [[pair, p, str(c["a_only"]), str(c["b_only"]), str(c["both"]), str(c["n"]), f"{c['p_mcnemar']:.4f}"]
                for p, comps in sorted(paired.items()) for pair, c in comps.items()]
        out += [md_table(["A vs B", "panel", "A only", "B only", "both", "n", "p"], rows), ""]

    shown = {line for p in panels for line in verdicts(metrics, p)}
    for line in talent_section(metrics):  # its verdicts opened the report
        if line not in shown and not (line == "" and out[-1] == ""):
            out.append(line)
    out += training_section(metrics)
    out += perf_section(metrics)
    out += notes_section(metrics, systems, panels)
    if plots:
        out += ["", "## Plots", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in plots]
    return "\n".join(out) + "\n"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_report(
    metrics: Mapping,
    out_dir: Union[str, Path],
    confusion: Optional[Mapping[str, Mapping[str, Mapping[str, int]]]] = None,
    histories: Optional[Mapping[str, Sequence[Mapping]]] = None,
) -> dict[str, str]:
    """Write ``metrics.json``, ``report.md`` and PNG plots into ``out_dir`` (DESIGN.md §6).

    Plots: ``success_by_panel.png``, ``success_by_task_type.png`` and, when ``confusion`` (the output of
    ``routing_confusion``: ``{system: {oracle: {chosen: count}}}``) is given, ``routing_confusion.json``
    and one ``routing_confusion_<system>.png`` per system; with ``histories`` (``{RL system: per-update metrics}``)
    ``rl_curves.png`` and ``rl_curves.csv`` (DVC plots). ``headline.json`` is the small flat summary DVC shows
    (``dvc metrics show``). The metrics are validated first, so nothing is written for a malformed dict.

    Returns:
        ``{name: path}`` of every file written.
    """
    validate_metrics(metrics)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    plots: list[str] = []

    systems, panels = _order_systems(metrics["systems"]), _panels(metrics)
    p = out / "success_by_panel.png"
    plot_success_by_panel(metrics, p, systems, panels)
    plots.append(str(p))
    if any(b.get("per_task_type") for panels in metrics["systems"].values() for b in panels.values()):
        p = out / "success_by_task_type.png"
        plot_success_by_task_type(metrics, p, systems, panels)
        plots.append(str(p))
    for panel, matrix in sorted(((metrics.get("talents") or {}).get("matrix") or {}).items()):
        p = out / f"strategy_matrix_{_safe(panel)}.png"
        plot_strategy_matrix(matrix, p, f"{panel}: strategy expert success by task type", save_png)
        plots.append(str(p))
    if confusion:
        write_json(out / "routing_confusion.json", {s: {o: dict(r) for o, r in c.items()} for s, c in confusion.items()})
        written["routing_confusion.json"] = str(out / "routing_confusion.json")
        for system, counts in confusion.items():
            if not counts:
                continue
            p = out / f"routing_confusion_{_safe(system)}.png"
            plot_confusion(counts, p, f"{system}: routing (oracle vs chosen)")
            plots.append(str(p))

    if histories and any(histories.values()):
        p = out / "rl_curves.png"
        plot_rl_curves(histories, p)
        plots.append(str(p))
        write_text(out / "rl_curves.csv", rl_curves_csv(histories))
        written["rl_curves.csv"] = str(out / "rl_curves.csv")
    write_json(out / "metrics.json", metrics)
    write_json(out / "headline.json", headline(metrics))
    written["headline.json"] = str(out / "headline.json")
    write_text(out / "report.md", render_markdown(metrics, plots))
    written["metrics.json"] = str(out / "metrics.json")
    written["report.md"] = str(out / "report.md")
    written.update({Path(f).name: f for f in plots})
    return written


__all__ = [
    "EpisodeResult",
    "build_metrics",
    "routing_confusion",
    "training_summary",
    "validate_metrics",
    "write_report",
    "render_markdown",
]
