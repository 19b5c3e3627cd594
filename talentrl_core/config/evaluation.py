"""The ``eval`` and ``tracker`` sections: which systems are compared on which panels and how (``EvalConfig``), and
where metrics are logged (``TrackerConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional

from .checks import NON_NEGATIVE, check_ranges


def _systems():
    from .. import systems  # the registry of evaluation systems (imported on use: no cycle)
    return systems


class TrackerMode(StrEnum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


@dataclass
class EvalConfig:
    systems: list[str] = field(default_factory=lambda: list(_systems().DEFAULT_SYSTEMS))
    "Systems compared in one table (``evaluation/systems.py``; default: those that need no RL checkpoint)."
    panels: list[str] = field(default_factory=lambda: ["textworld"])
    "Panels: textworld, webshop, alfworld_valid_seen, alfworld_valid_unseen, qa_<set>."
    n_per_panel: int = 50
    "Tasks per panel (a seeded subset; 0: all)."
    n_by_panel: dict[str, int] = field(default_factory=dict)
    "Per-panel task counts that replace n_per_panel for the panels named (e.g. {alfworld_valid_seen: 30})."
    avg_k: int = 0
    "Sampled attempts per task for avg@k (0: greedy only)."
    seed: int = 0
    "Seed of panel subsets and sampling."
    ci: str = "wilson"
    "95% interval: wilson or bootstrap."
    promote_tolerance: float = 0.05
    "Promotion gate: the RL system (talentrl) may fall below the SFT one it started from by at most this much success."
    max_error_share: float = 0.05
    "Integrity check: a (system, panel) whose episodes ended in an environment error more often than this fails the evaluation's asset check."

    def __post_init__(self) -> None:
        _systems().check_systems(self.systems)
        if self.ci not in ("wilson", "bootstrap"):
            raise ValueError(f"eval.ci={self.ci!r}: choose wilson or bootstrap")
        check_ranges("eval", self, n_per_panel=("0 (every task) or more", lambda v: v >= 0), avg_k=NON_NEGATIVE)
        if not 0.0 <= self.max_error_share <= 1.0:
            raise ValueError(f"eval.max_error_share={self.max_error_share}: give a share in [0, 1]")
        for panel, n in self.n_by_panel.items():  # +/++ forms add entries too: each is checked like n_per_panel
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"eval.n_by_panel.{panel}={n!r}: must be a task count, 0 (every task) or more")
        stray = sorted(set(self.n_by_panel) - set(self.panels))
        if stray:
            raise ValueError(f"eval.n_by_panel names {stray}, which are not in eval.panels {list(self.panels)}")

    def panel_size(self, panel: str) -> int:
        """Tasks drawn from ``panel`` (``n_by_panel`` first, else ``n_per_panel``; 0: all)."""
        return int(self.n_by_panel.get(panel, self.n_per_panel))


@dataclass
class TrackerConfig:
    mode: TrackerMode = TrackerMode.offline
    "wandb mode: offline (default, no network), online, or disabled."
    project: str = "talentrl"
    "wandb project."
    entity: Optional[str] = None
    "wandb entity (team)."
