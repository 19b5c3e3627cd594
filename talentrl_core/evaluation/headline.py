"""The small files DVC reads beside the full ``metrics.json``: ``headline.json`` (``dvc metrics show`` /
``dvc exp show``: success per system and panel, the paired tests' p-values, a few training figures) and
``rl_curves.csv`` (``dvc plots show``: reward, success and routing entropy per RL update)."""

from __future__ import annotations

import csv
import io
from typing import Mapping, Sequence

from .plots import CURVES

TRAINING_KEYS = ("reward_first", "reward_last", "contrast_mean", "divergence_mean")


def headline(metrics: Mapping) -> dict:
    """A flat-ish summary of ``metrics`` (a few dozen values)."""
    out: dict = {"success": {s: {p: round(b["success"], 4) for p, b in panels.items()}
                             for s, panels in metrics["systems"].items()}}
    paired = {p: {pair.replace(" vs ", "_vs_"): round(c["p_mcnemar"], 6) for pair, c in comps.items()}
              for p, comps in (metrics.get("paired") or {}).items() if comps}
    if paired:
        out["p"] = paired
    training = {s: {k: round(t[k], 4) for k in TRAINING_KEYS if isinstance(t.get(k), (int, float))}
                for s, t in (metrics.get("training") or {}).items()}
    if training:
        out["training"] = training
    return out


def rl_curves_csv(histories: Mapping[str, Sequence[Mapping]]) -> str:
    """One row per RL update; columns ``<system>_<curve>`` for each system and each of ``plots.CURVES``.

    >>> print(rl_curves_csv({"talentrl": [{"step": 1, "rollout/reward": 0.5, "rollout/success": 0.5}]}), end="")
    update,talentrl_reward,talentrl_success,talentrl_routing_entropy
    1,0.5,0.5,
    """
    columns = [(s, key, name) for s in histories for key, name, _ in CURVES]
    steps = sorted({h.get("step", i + 1) for hist in histories.values() for i, h in enumerate(hist)})
    by_step = {s: {h.get("step", i + 1): h for i, h in enumerate(hist)} for s, hist in histories.items()}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["update"] + [f"{s}_{name}" for s, _, name in columns])
    for step in steps:
        w.writerow([step] + [by_step[s].get(step, {}).get(k, "") for s, k, _ in columns])
    return buf.getvalue()
