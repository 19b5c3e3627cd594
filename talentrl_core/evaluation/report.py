"""The evaluation report (DESIGN.md §6): ``metrics.json``, ``headline.json``, ``report.md`` and PNG plots of the
metrics ``metrics.build_metrics`` aggregates.

``write_report`` writes ``metrics.json`` (DVC metrics), ``report.md`` and PNG plots into one folder, each
file atomically. Plots use matplotlib's object API on the Agg canvas (no pyplot, no global backend).
The Markdown opens with the headline and the verdicts, then one section per table (``render_markdown``).

Run: ``write_report(build_metrics(results), out_dir, confusion=routing_confusion(results))``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence, Union

from ..io import write_json, write_text
from ..systems import HEADLINE_PAIRS, SYSTEMS
from .headline import headline, rl_curves_csv
from .markdown import md_table
from .metrics import validate_metrics
from .plots import plot_confusion, plot_rl_curves, plot_success_by_panel, plot_success_by_task_type, save_png
from .stats import intervals_overlap
from .talent_effect import plot_strategy_matrix, talent_section, verdicts

SYSTEM_ORDER = list(SYSTEMS)
"Table and plot order of the known systems (``systems.SYSTEMS``); others follow alphabetically."


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


def _order_systems(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    known = [s for s in SYSTEM_ORDER if s in names]
    return known + sorted(s for s in names if s not in SYSTEM_ORDER)


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
                         f"{c.get('prompt_tokens', 0) / n:.0f}", f"{c.get('prefilled_tokens', 0) / n:.0f}",
                         f"{c.get('prompts_cut', 0) / n:.1%}"])
    if not rows:
        return []
    return ["## Evaluation cost (greedy runs)", "",
            "Prompt tokens per policy step, as built and as actually read by the model (the rest came from the "
            "episode's KV cache); prompts cut: model calls (routing and execution) whose prompt was longer than the "
            "context and lost its start, the task line with it (model.max_position_embeddings), per policy step.", "",
            md_table(["system", "panel", "seconds", "policy steps", "prompt tok/step", "prefilled tok/step",
                      "prompts cut"], rows), ""]


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


def reward_cells(c: Mapping) -> list[str]:
    """A paired comparison's reward sign test as table cells (a metrics file written before it had one: dashes)."""
    r = c.get("reward")
    return [f"{r['higher']} / {r['lower']} / {r['tied']}", f"{r['p_sign']:.2g}"] if r else ["—", "—"]


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
        rows = [[s, p, "n/a" if S[s][p]["routing_accuracy"] is None else f"{S[s][p]['routing_accuracy']:.3f}",
                 str(S[s][p].get("routing_n", ""))] for s, p in routed]
        legend = ["An accuracy of n/a: the oracle talent is the same on every task of that panel (no routing choice to "
                  "get right).", ""] if any(r[2] == "n/a" for r in rows) else []
        out += ["## Routing accuracy (chosen talent = oracle talent)", "", *legend,
                md_table(["system", "panel", "accuracy", "n"], rows), ""]

    paired = metrics.get("paired") or {}
    if any(paired.values()):
        out += ["## Paired comparisons (same tasks, greedy)", "",
                "Success: tasks only A solved, only B solved, both; two-sided exact McNemar p on the discordant tasks. "
                "Reward: tasks where A's reward is higher / lower / tied; two-sided exact sign test p on the untied.", ""]
        rows = [[pair, p, str(c["a_only"]), str(c["b_only"]), str(c["both"]), str(c["n"]), f"{c['p_mcnemar']:.4f}", *reward_cells(c)]
                for p, comps in sorted(paired.items()) for pair, c in comps.items()]
        out += [md_table(["A vs B", "panel", "A only", "B only", "both", "n", "p", "reward higher / lower / tied", "sign p"],
                         rows), ""]

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


__all__ = ["render_markdown", "write_report"]
