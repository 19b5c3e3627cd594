"""The evaluation report's figures (matplotlib, drawn off-screen): success bars with their intervals, routing
confusion heat maps and RL training curves. Every bar carries its value, so a bar at 0 is still seen."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..io import atomic_path


PNG_DPI = 100
PNG_COLOURS = 64
("Figures are saved at ``PNG_DPI`` as palette PNGs of at most ``PNG_COLOURS`` colours: a report's plots stay ~5-15 kB "
 "each, small enough to commit with its results (docs/results/), and read the same as full-colour ones.")


def save_png(fig: Any, path: Path) -> None:
    """``fig`` as a palette PNG at ``path`` (atomic write); Pillow comes with matplotlib."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches="tight")
    buf.seek(0)
    image = Image.open(buf).convert("RGB").quantize(colors=PNG_COLOURS)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", optimize=True)


def _bars(ax: Any, groups: Sequence[str], systems: Sequence[str], get: Callable[[str, str], Optional[Mapping]]) -> None:
    """Grouped bars: one group per x label, one bar per system; ``get(s, g)`` -> block or None. Each bar has a tick
    at its value in the bar's colour and the value above it (a bar at 0 stays visible and readable)."""
    width = 0.8 / max(len(systems), 1)
    x = np.arange(len(groups))
    for i, s in enumerate(systems):
        blocks = [get(s, g) for g in groups]
        vals = np.array([b["success"] if b else np.nan for b in blocks], dtype=float)
        lo = np.array([b["ci95"][0] if b else np.nan for b in blocks], dtype=float)
        hi = np.array([b["ci95"][1] if b else np.nan for b in blocks], dtype=float)
        xs = x + (i - (len(systems) - 1) / 2) * width
        bars = ax.bar(xs, vals, width, label=s, yerr=np.clip([vals - lo, hi - vals], 0, None), capsize=2,
                      error_kw={"elinewidth": 0.8})
        colour = bars.patches[0].get_facecolor() if bars.patches else None
        ax.hlines(vals, xs - width / 2, xs + width / 2, colors=[colour], linewidth=2)
        for xi, v, top in zip(xs, vals, hi):
            if not np.isnan(v):
                ax.text(xi, (top if not np.isnan(top) else v) + 0.01, f"{v:.2f}", ha="center", va="bottom",
                        fontsize=5, rotation=90)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=20, ha="right")
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("greedy success (95% CI)")


def plot_success_by_panel(metrics: Mapping, path: Path, systems: Sequence[str], panels: Sequence[str]) -> None:
    from matplotlib.figure import Figure

    S = metrics["systems"]
    fig = Figure(figsize=(max(5, 1.2 * len(panels) * max(1, len(systems)) / 2), 4))
    ax = fig.add_subplot()
    _bars(ax, panels, systems, lambda s, p: S[s].get(p))
    ax.set_title("Success by system and panel")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    save_png(fig, path)


def plot_success_by_task_type(metrics: Mapping, path: Path, systems: Sequence[str], panels: Sequence[str]) -> None:
    from matplotlib.figure import Figure

    S = metrics["systems"]
    fig = Figure(figsize=(8, 3.2 * len(panels)))
    for i, p in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        types = sorted({t for s in systems for t in S[s].get(p, {}).get("per_task_type", {})})
        _bars(ax, types, systems, lambda s, t: S[s].get(p, {}).get("per_task_type", {}).get(t))
        ax.set_title(f"{p}: success by task type")
        if i == 0:
            ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    save_png(fig, path)


def plot_confusion(counts: Mapping[str, Mapping[str, int]], path: Path, title: str) -> None:
    """Heat map of ``{oracle: {chosen: count}}``: rows oracle talent, columns chosen talent; the scale starts at 0."""
    from matplotlib.figure import Figure

    labels = sorted(set(counts) | {c for row in counts.values() for c in row})
    m = np.array([[counts.get(o, {}).get(c, 0) for c in labels] for o in labels])  # (L, L)
    fig = Figure(figsize=(3.5 + 0.5 * len(labels), 3.0 + 0.5 * len(labels)))
    ax = fig.add_subplot()
    im = ax.imshow(m, cmap="Blues", vmin=0, vmax=max(int(m.max()), 1))
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=8, color="white" if v > m.max() / 2 else "black")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_xlabel("chosen talent")
    ax.set_ylabel("oracle talent")
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    save_png(fig, path)


CURVES = (("rollout/reward", "reward", "mean reward"), ("rollout/success", "success", "success"),
          ("route/entropy", "routing_entropy", "routing entropy (TalentRL)"))
"(history key, rl_curves.csv column suffix, plot title) of each RL curve."


def plot_rl_curves(histories: Mapping[str, Sequence[Mapping]], path: Path) -> None:
    """Per RL update: rollout reward, rollout success and routing entropy, one line per RL system."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3))
    for k, (key, _, label) in enumerate(CURVES):
        ax = fig.add_subplot(1, len(CURVES), k + 1)
        for system, hist in histories.items():
            pts = [(h.get("step", i + 1), h[key]) for i, h in enumerate(hist) if h.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", markersize=3, label=system)
        ax.set_xlabel("RL update")
        ax.set_title(label)
        ax.set_ylim(bottom=0)
        if k == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
