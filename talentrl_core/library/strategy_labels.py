"""Routing labels from strategy experts (DESIGN.md §3, "Talents must carry information").

When trajectories carry the strategy expert that produced them (``Trajectory.strategy``), both distillers'
talents are tied back to those strategies after clustering:

* **matrix** — per (task type, strategy): episodes, success rate, mean steps of the successes. It is the
  oracle router's ceiling and the baseline of routing regret; stored as ``kind='matrix'`` label rows.
* **strategy → talent** — the one-to-one assignment of strategies to talents that agrees with the most
  clustered trajectories (Hungarian assignment on the contingency table). Agreement between clusters and
  strategies is reported as purity and normalised mutual information (NMI).
* **execution labels** (``kind='traj'``) — a strategy trajectory's label is its *strategy's* talent (not its
  own cluster), so SFT teaches the executor what each talent does.
* **oracle labels** (``kind='oracle'``) — per task type, the talent of the strategy that measured best there
  (success rate, ties broken by fewer steps, then name); ``share`` holds that success rate.
* **talent text** — a talent assigned to a strategy is named after it and its strategy text starts with the
  strategy's registered description (``describe_talents``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..trajectories import Trajectory
from .schema import LabelRecord, TalentRecord


def strategy_matrix(trajs: Sequence[Trajectory]) -> dict[str, dict[str, dict]]:
    """``{task_type: {strategy: {n, success, steps}}}`` over trajectories that carry a strategy."""
    cells: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if t.strategy and not t.error:
            cells[(t.task_type, t.strategy)].append(t)
    out: dict[str, dict[str, dict]] = {}
    for (tt, s), ts in sorted(cells.items()):
        wins = [t.n_steps for t in ts if t.success]
        out.setdefault(tt, {})[s] = {
            "n": len(ts),
            "success": round(len(wins) / len(ts), 6),
            "steps": round(float(np.mean(wins)), 3) if wins else None,
        }
    return out


def best_strategies(matrix: dict[str, dict[str, dict]]) -> dict[str, str]:
    """Per task type, the strategy with the highest success rate (ties: fewer steps, then name)."""
    best = {}
    for tt, row in matrix.items():
        best[tt] = min(row, key=lambda s: (-row[s]["success"], row[s]["steps"] if row[s]["steps"] is not None else 1e9, s))
    return best


def agreement(strategy_of: Sequence[str], talent_of: Sequence[str]) -> dict:
    """Purity and NMI of talents (clusters) against the strategies that produced the trajectories."""
    from sklearn.metrics import normalized_mutual_info_score

    if not strategy_of:
        return {"purity": None, "nmi": None, "n": 0}
    by_talent: dict[str, Counter] = defaultdict(Counter)
    for s, t in zip(strategy_of, talent_of):
        by_talent[t][s] += 1
    purity = sum(c.most_common(1)[0][1] for c in by_talent.values()) / len(strategy_of)
    nmi = float(normalized_mutual_info_score(list(strategy_of), list(talent_of)))
    return {"purity": round(purity, 6), "nmi": round(nmi, 6), "n": len(strategy_of),
            "contingency": {t: dict(sorted(c.items())) for t, c in sorted(by_talent.items())}}


def assign_talents(strategy_of: Sequence[str], talent_of: Sequence[str], talents: Sequence[str]) -> dict[str, str]:
    """One talent per strategy, maximising the trajectories whose cluster is their strategy's talent.

    With fewer talents than strategies, the leftover strategies share the talent most of their trajectories
    fell in (then the talents cannot tell those strategies apart; the purity figure says so).
    """
    from scipy.optimize import linear_sum_assignment

    strats = sorted(set(strategy_of))
    tids = sorted(talents)
    if not strats or not tids:
        return {}
    C = np.zeros((len(strats), len(tids)))
    si, ti = {s: i for i, s in enumerate(strats)}, {t: j for j, t in enumerate(tids)}
    for s, t in zip(strategy_of, talent_of):
        if t in ti:
            C[si[s], ti[t]] += 1
    rows, cols = linear_sum_assignment(-C)
    out = {strats[r]: tids[c] for r, c in zip(rows, cols)}
    for s in strats:
        if s not in out:
            out[s] = tids[int(np.argmax(C[si[s]]))]
    return out


def describe_talents(env: str, talents: Sequence[TalentRecord], talent_of: dict[str, str],
                     matrix: dict[str, dict[str, dict]]) -> list[TalentRecord]:
    """Talents assigned to a strategy say so: named after it, its registered description first in the strategy
    text (the distilled skill order follows), and its measured success per task type as ``when_to_apply``.
    Ids stay the distiller's content hashes."""
    from .templates import type_label

    from ..envs.registry import FAMILIES
    from ..envs.strategies import strategies

    described = {s.name: s.description for s in strategies(env)}
    spec = FAMILIES.get(env)
    if spec is not None and spec.procedures:  # procedure talents (library.talents_by=procedure) start with what the procedure does
        import importlib

        described.update(importlib.import_module(spec.procedures).DESCRIPTIONS)
    by_talent = {tid: s for s, tid in talent_of.items()}
    out = []
    for t in talents:
        s = by_talent.get(t.talent_id)
        if s is None:
            out.append(t)
            continue
        text = described.get(s, "")
        cells = [(tt, row[s]["success"]) for tt, row in sorted(matrix.items()) if s in row]
        when = "Solved " + ", ".join(f"{round(100 * x)}% of {type_label(tt)} tasks" for tt, x in cells) + "." if cells else t.when_to_apply
        out.append(replace(t, name=s.replace("_", " ").capitalize(), strategy=f"{text} {t.strategy}".strip(), when_to_apply=when))
    return out


def strategy_labels(env: str, trajs: Sequence[Trajectory], cluster_labels: Sequence[LabelRecord],
                    talent_ids: Sequence[str]) -> tuple[list[LabelRecord], dict]:
    """Replace cluster-based routing labels with strategy-based ones (see the module docstring).

    ``cluster_labels`` are the distiller's ``kind='traj'`` labels (trajectory → its cluster's talent).
    Returns the new labels and a report: matrix, best strategy per task type, strategy → talent, agreement.
    """
    cluster_of = {l.traj_uid: l.talent_id for l in cluster_labels if l.kind == "traj"}
    strat = [t for t in trajs if t.strategy and t.env == env and not t.error]
    clustered = [t for t in strat if t.traj_uid in cluster_of]
    s_of = [t.strategy for t in clustered]
    c_of = [cluster_of[t.traj_uid] for t in clustered]
    talent_of = assign_talents(s_of, c_of, talent_ids)
    matrix = strategy_matrix(strat)
    best = best_strategies(matrix)
    labels: list[LabelRecord] = []
    for t in sorted(strat, key=lambda t: t.traj_uid):
        if t.success and t.strategy in talent_of:
            labels.append(LabelRecord(env=env, task_type=t.task_type, talent_id=talent_of[t.strategy], kind="traj",
                                      traj_uid=t.traj_uid, strategy=t.strategy))
    for tt in sorted(matrix):
        for s, cell in sorted(matrix[tt].items()):
            if s in talent_of:
                labels.append(LabelRecord(env=env, task_type=tt, talent_id=talent_of[s], kind="matrix", strategy=s,
                                          share=cell["success"], n=cell["n"], steps=cell["steps"] or 0.0))
        if best.get(tt) in talent_of:
            labels.append(LabelRecord(env=env, task_type=tt, talent_id=talent_of[best[tt]], kind="oracle",
                                      strategy=best[tt], share=matrix[tt][best[tt]]["success"]))
    report = {"strategy_matrix": matrix, "best_strategy": best, "strategy_talent": talent_of,
              "talent_strategy_agreement": agreement(s_of, c_of)}
    return labels, report
