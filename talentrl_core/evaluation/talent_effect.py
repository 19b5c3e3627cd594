"""Does the talent matter? The strategy × task-family matrix, routing accuracy and regret (DESIGN.md §3, §6).

Inputs: the library's ``kind='matrix'`` labels (each strategy expert's measured success per task type on the
training split, and the talent each strategy maps to; ``library/strategy_labels.py``) and the evaluation's
greedy episodes. Output (``metrics["talents"]``)::

    {"matrix": {PANEL: {TYPE: {STRATEGY: {"success", "n", "steps", "talent", "label"}}}},
     "best":   {PANEL: {TYPE: {"strategy", "talent", "label", "success"}}},
     "ceiling": {PANEL: float},           # the oracle router over the experts: mean best-cell success
     "routing": {SYSTEM: {PANEL: {"accuracy", "regret", "n", "confidence", "undecided",
                                  "by_type": {TYPE: {"accuracy", "regret", "confidence", "undecided",
                                                     "chosen": {LABEL: count}}}}}},
     "routing_paired": {PANEL: {"talentrl vs talent_sft": {"a_only", "b_only", "both", "neither", "n", "p_mcnemar"}}}}

*Routing regret* of a routed episode is ``matrix[type][best strategy] − matrix[type][strategy of the chosen
talent]``: what the choice alone costs when executed as well as the experts do (0 for the best talent). It
separates routing from execution; the executed gap is ``oracle_talent`` minus the system in the success table.
*routing_paired* counts, over the tasks both systems routed, those only the first routed to the measured best
talent (``a_only``) and those only the second did (``b_only``; also ``both``, ``neither``), with the exact McNemar
p. *Confidence* is the mean probability the router gave its own choice (episodes' ``route_p``; absent for systems
whose talent is not the policy's choice), *undecided* the share of choices made with p < ``UNDECIDED``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from .markdown import md_table
from .stats import paired_counts
from ..systems import PROMOTION_PAIR

ROUTING_PAIRS = (PROMOTION_PAIR,)
"Routing systems compared task by task on routing to the measured best talent (``metrics.talents.routing_paired``)."


def matrix_from_labels(labels: Iterable[Any], shown: Mapping[str, str]) -> dict[str, dict[str, dict]]:
    """``{type: {strategy: cell}}`` from ``kind='matrix'`` label records; ``shown`` maps talent id → menu label."""
    out: dict[str, dict[str, dict]] = {}
    for l in labels:
        if l.kind == "matrix":
            out.setdefault(l.task_type, {})[l.strategy] = {
                "success": float(l.share), "n": int(l.n), "steps": float(l.steps) if l.steps else None,
                "talent": l.talent_id, "label": shown.get(l.talent_id, l.talent_id)}
    return out


def best_cells(matrix: Mapping[str, Mapping[str, Mapping]]) -> dict[str, dict]:
    """Per type, the best strategy's cell (success, then fewer steps, then name), as ``strategy_labels`` chooses."""
    out = {}
    for tt, row in matrix.items():
        s = min(row, key=lambda k: (-row[k]["success"], row[k]["steps"] if row[k]["steps"] is not None else 1e9, k))
        out[tt] = {"strategy": s, "talent": row[s]["talent"], "label": row[s]["label"], "success": row[s]["success"]}
    return out


UNDECIDED = 0.75
"A routing choice made with less than this probability is *undecided*: with two talents, a logit margin under ln 3."


def confidence(episodes: Sequence[Any]) -> dict:
    """``{"confidence": mean p of the chosen talent, "undecided": share chosen with p < UNDECIDED}`` over the
    episodes that carry ``route_p`` (the policy's own choices), and ``cue_read``: the share whose router restated
    the cue its prompt shows, where the router restates one (``env.routing_cue``); ``{}`` when none does.

    >>> from types import SimpleNamespace as E
    >>> confidence([E(route_p=1.0), E(route_p=0.6), E(route_p=None)])
    {'confidence': 0.8, 'undecided': 0.5}
    """
    ps = [e.route_p for e in episodes if getattr(e, "route_p", None) is not None]
    cues = [e.cue_read for e in episodes if getattr(e, "cue_read", None) is not None]
    return ({"confidence": float(np.mean(ps)), "undecided": float(np.mean([p < UNDECIDED for p in ps]))} if ps else {}) | (
        {"cue_read": float(np.mean(cues))} if cues else {})


def routing_block(episodes: Sequence[Any], matrix: Mapping[str, Mapping[str, Mapping]]) -> Optional[dict]:
    """Accuracy against the measured best talent, matrix regret, and the chosen-talent distribution per type."""
    best = best_cells(matrix)
    by_talent = {(tt, c["talent"]): c for tt, row in matrix.items() for c in row.values()}
    label_of = {c["talent"]: c["label"] for row in matrix.values() for c in row.values()}
    rows = [e for e in episodes if e.chosen_talent is not None and e.task_type in best]
    if not rows:
        return None

    def stats(eps: list) -> dict:
        acc = [e.chosen_talent == best[e.task_type]["talent"] for e in eps]
        regret = [best[e.task_type]["success"] - by_talent.get((e.task_type, e.chosen_talent), {"success": 0.0})["success"] for e in eps]
        return {"accuracy": float(np.mean(acc)), "regret": float(np.mean(regret)), "n": len(eps), **confidence(eps)}

    out = stats(rows)
    groups: dict[str, list] = defaultdict(list)
    for e in rows:
        groups[e.task_type].append(e)
    out["by_type"] = {tt: {**stats(v), "chosen": dict(sorted(Counter(label_of.get(e.chosen_talent, e.chosen_talent) for e in v).items()))}
                      for tt, v in sorted(groups.items())}
    return out


def routing_paired(episodes: Sequence[Any], best: Mapping[str, Mapping], a: str, b: str) -> Optional[dict]:
    """System ``a`` against ``b`` on the tasks both routed: how many only ``a`` (only ``b``, both, neither) routed to
    the measured best talent, and the exact McNemar p; None when they share no routed task.

    >>> from types import SimpleNamespace as E
    >>> best = {"x": {"talent": "t1"}}
    >>> eps = [E(system=s, task_id=i, task_type="x", chosen_talent=c) for s, i, c in
    ...        [("a", 1, "t1"), ("b", 1, "t2"), ("a", 2, "t1"), ("b", 2, "t1"), ("a", 3, "t2")]]
    >>> routing_paired(eps, best, "a", "b")
    {'a_only': 1, 'b_only': 0, 'both': 1, 'neither': 0, 'n': 2, 'p_mcnemar': 1.0}
    """
    right: dict[str, dict] = {a: {}, b: {}}
    for e in episodes:
        if e.system in right and e.chosen_talent is not None and e.task_type in best:
            right[e.system][e.task_id] = e.chosen_talent == best[e.task_type]["talent"]
    comp = paired_counts(right[a], right[b])
    return comp if comp["n"] else None


def talent_metrics(results: Iterable[Any], matrices: Mapping[str, Mapping[str, Mapping[str, Mapping]]]) -> dict:
    """``metrics["talents"]`` (module docstring) from greedy results and each panel's matrix."""
    greedy = [r for r in results if r.sample_idx == 0]
    out: dict[str, Any] = {"matrix": {}, "best": {}, "ceiling": {}, "routing": {}, "routing_paired": {}}
    for panel, matrix in sorted(matrices.items()):
        if not matrix:
            continue
        best = best_cells(matrix)
        on_panel = [r for r in greedy if r.panel == panel]
        types = Counter(r.task_type for r in on_panel if r.system == "oracle_talent") or Counter(dict.fromkeys(best, 1))
        n = sum(types[t] for t in best) or 1
        out["matrix"][panel], out["best"][panel] = matrix, best
        out["ceiling"][panel] = float(sum(best[t]["success"] * types[t] for t in best) / n)
        for system in sorted({r.system for r in on_panel}):
            block = routing_block([r for r in on_panel if r.system == system], matrix)
            if block is not None:
                out["routing"].setdefault(system, {})[panel] = block
        for a, b in ROUTING_PAIRS:
            comp = routing_paired(on_panel, best, a, b)
            if comp is not None:
                out["routing_paired"].setdefault(panel, {})[f"{a} vs {b}"] = comp
    return out


def _pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _matrix_table(matrix: Mapping[str, Mapping[str, Mapping]]) -> str:
    strategies = sorted({s for row in matrix.values() for s in row})
    label = {s: next(row[s]["label"] for row in matrix.values() if s in row) for s in strategies}
    rows = [[tt] + [f"{_pct(row[s]['success'])}" + (f" ({row[s]['steps']:.1f} steps)" if row[s].get("steps") else "")
                    if s in row else "—" for s in strategies] for tt, row in sorted(matrix.items())]
    return md_table(["task type"] + [f"{s} ({label[s]})" for s in strategies], rows)


def _verdict(ok: bool, what: str, criterion: str) -> str:
    return f"- {what} — {'met' if ok else 'not met'} (criterion: {criterion})."


def gap_at_least(a: str, b: str, min_gap: float, max_p: float, label: str = ""):
    """Criterion: ``a``'s success exceeds ``b``'s by at least ``min_gap`` on the panel, paired McNemar p < ``max_p``
    (the line names the pair ``label``, by default ``a vs b``)."""
    def verdict(S: Mapping, paired: Mapping, tal: Mapping, training: Mapping, panel: str) -> Optional[str]:
        x, y, c = S.get(a, {}).get(panel), S.get(b, {}).get(panel), paired.get(f"{a} vs {b}")
        if not (x and y and c):
            return None
        gap = x["success"] - y["success"]
        return _verdict(gap >= min_gap and c["p_mcnemar"] < max_p,
                        f"{label or f'{a} vs {b}'}: {gap:+.3f} success, {c['a_only']}:{c['b_only']} "
                        f"discordant, p = {c['p_mcnemar']:.4f}", f"≥ {min_gap:+.2f} with p < {max_p:g}")
    return verdict


def ahead(a: str, b: str, max_p: float = 0.05):
    """Criterion: ``a`` solved more of the tasks the two systems disagree on, paired McNemar p < ``max_p``."""
    pair = f"{a} vs {b}"

    def verdict(S: Mapping, paired: Mapping, tal: Mapping, training: Mapping, panel: str) -> Optional[str]:
        c = paired.get(pair)
        if not c:
            return None
        return _verdict(c["a_only"] > c["b_only"] and c["p_mcnemar"] < max_p,
                        f"{pair}: {c['a_only']}:{c['b_only']} discordant, p = {c['p_mcnemar']:.4f}", f"{a} ahead with p < {max_p:g}")
    return verdict


def intervals_apart(a: str, b: str):
    """Criterion: ``a``'s 95% interval lies above ``b``'s."""
    def verdict(S: Mapping, paired: Mapping, tal: Mapping, training: Mapping, panel: str) -> Optional[str]:
        x, y = S.get(a, {}).get(panel), S.get(b, {}).get(panel)
        if not (x and y):
            return None
        return _verdict(x["ci95"][0] > y["ci95"][1],
                        f"{a} {x['success']:.3f} [{x['ci95'][0]:.3f}, {x['ci95'][1]:.3f}] vs {b} "
                        f"{y['success']:.3f} [{y['ci95'][0]:.3f}, {y['ci95'][1]:.3f}]", f"{a}'s 95% interval above {b}'s")
    return verdict


def routes_better(a: str, b: str, max_p: float = 0.05):
    """Criterion: ``a`` routes to the measured best talent more often and with less regret than ``b``, paired p <
    ``max_p`` (without paired routing counts, as in an older metrics.json: accuracy and regret only)."""
    def verdict(S: Mapping, paired: Mapping, tal: Mapping, training: Mapping, panel: str) -> Optional[str]:
        routing = tal.get("routing") or {}
        x, y = (routing.get(s, {}).get(panel) for s in (a, b))
        if not (x and y):
            return None
        c = (tal.get("routing_paired") or {}).get(panel, {}).get(f"{a} vs {b}")
        ok = x["accuracy"] > y["accuracy"] and x["regret"] < y["regret"]
        what = (f"routing accuracy {a} {x['accuracy']:.3f} vs {b} {y['accuracy']:.3f}, regret "
                f"{x['regret']:.3f} vs {y['regret']:.3f}")
        if c is None:
            return _verdict(ok, what, f"{a}'s accuracy higher and its regret lower")
        return _verdict(ok and c["a_only"] > c["b_only"] and c["p_mcnemar"] < max_p,
                        f"{what}; tasks routed to the best talent by one only {c['a_only']}:{c['b_only']}, "
                        f"p = {c['p_mcnemar']:.4f}", f"{a}'s accuracy higher and its regret lower, paired p < {max_p:g}")
    return verdict


def training_at_least(system: str, key: str, minimum: float, describe):
    """Criterion on ``system``'s training summary: ``value(key) >= minimum``; ``describe(t)`` gives (figure text,
    criterion text). A key ending in ``_zero_share`` is read as its complement (the non-zero share)."""
    def verdict(S: Mapping, paired: Mapping, tal: Mapping, training: Mapping, panel: str) -> Optional[str]:
        t = training.get(system) or {}
        if key not in t:
            return None
        value = 1 - t[key] if key.endswith("_zero_share") else t[key]
        return _verdict(value >= minimum, *describe(t))
    return verdict


RL_SYSTEM, SFT_SYSTEM = PROMOTION_PAIR
VERDICTS = (
    gap_at_least("oracle_talent", "random_talent", 0.10, 0.01, "oracle vs random talent"),
    ahead("talent_sft", "flat_skillbank"),
    training_at_least(RL_SYSTEM, "divergence_mean", 0.5, lambda t: (
        "TalentRL arm divergence (seed-matched rollouts whose actions differ between talent arms): "
        f"{t['divergence_mean']:.2f}", "≥ 0.5")),
    training_at_least(RL_SYSTEM, "contrast_zero_share", 0.75, lambda t: (
        f"routing contrast non-zero in {_pct(1 - t['contrast_zero_share'])} of updates", "≥ 75%")),
    routes_better(RL_SYSTEM, SFT_SYSTEM),
    intervals_apart(RL_SYSTEM, SFT_SYSTEM),
    ahead(RL_SYSTEM, "flat_grpo"),
)
"""The criteria the report states per panel, in its order; each returns its line (the figure, met or not, the
criterion), or None where its systems did not run. Built from the generic criteria above: an experiment with other
bars or pairs passes its own tuple to ``verdicts``."""


def verdicts(metrics: Mapping, panel: str, criteria: Sequence = VERDICTS) -> list[str]:
    """The criteria on this panel, each with its measured figure."""
    args = (metrics["systems"], (metrics.get("paired") or {}).get(panel, {}), metrics.get("talents") or {},
            metrics.get("training") or {}, panel)
    return [line for line in (v(*args) for v in criteria) if line]


def talent_section(metrics: Mapping) -> list[str]:
    """The report's "Does the talent matter?" section (empty when the library has no strategy matrix)."""
    tal = metrics.get("talents") or {}
    if not tal.get("matrix"):
        return []
    out = ["## Does the talent matter?", "",
           "Each strategy expert's success per task type on the training tasks (mean steps of its wins), with the "
           "talent it maps to. The best cell of each row is the oracle router's choice; the row means weighted "
           "by the panel are its ceiling.", ""]
    for panel, matrix in sorted(tal["matrix"].items()):
        out += [f"### {panel}", "", _matrix_table(matrix), "",
                f"Oracle-router ceiling over the experts: {tal['ceiling'][panel]:.3f}.", ""]
        rows = []
        for system, panels in sorted(tal.get("routing", {}).items()):
            b = panels.get(panel)
            if b is None:
                continue
            dist = "; ".join(f"{tt}: " + ", ".join(f"{k}×{v}" for k, v in d["chosen"].items()) for tt, d in b["by_type"].items())
            sure = f"{b['confidence']:.3f} / {_pct(b['undecided'])}" if "confidence" in b else "—"
            rows.append([system, f"{b['accuracy']:.3f}", f"{b['regret']:.3f}", sure, str(b["n"]), dist])
        if rows:
            out += ["Routing against the measured best talent (regret: the matrix success the choice gives up; "
                    f"confidence: the mean probability the router gave its choice, and the share of tasks it chose with "
                    f"p < {UNDECIDED}). RL's routing contrasts move a router near its boundary; one sure of every task "
                    "they barely move.", "",
                    md_table(["system", "accuracy", "regret", "confidence / undecided", "n", "chosen talents per task type"], rows), ""]
        out += verdicts(metrics, panel) + [""]
    return out


def plot_strategy_matrix(matrix: Mapping[str, Mapping[str, Mapping]], path: Path, title: str, save) -> None:
    """Heat map of the strategy × task-type success matrix (0..1 colour scale, values written in the cells)."""
    from matplotlib.figure import Figure

    types = sorted(matrix)
    strategies = sorted({s for row in matrix.values() for s in row})
    m = np.array([[matrix[t].get(s, {}).get("success", np.nan) for s in strategies] for t in types])  # (types, strategies)
    fig = Figure(figsize=(2.5 + 1.3 * len(strategies), 1.8 + 0.6 * len(types)))
    ax = fig.add_subplot()
    im = ax.imshow(m, cmap="viridis", vmin=0.0, vmax=1.0)
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, "—" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=9, color="white" if v < 0.6 else "black")
    ax.set_xticks(range(len(strategies)))
    ax.set_xticklabels(strategies)
    ax.set_yticks(range(len(types)))
    ax.set_yticklabels(types)
    ax.set_xlabel("strategy expert")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="success")
    save(fig, path)
