"""``LibraryKnowledge``: the rollout loop's view of a pinned library version (``rollout.Knowledge``).

The same object serves SFT data building, rollouts, RL and evaluation, so the skill context of a training
sample is, by construction, what inference retrieves for that task and talent (DESIGN.md §4).
``flat=True`` is the SkillBank baseline: no talent menu, λ = 0.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from .config import LibraryConfig
from .prompts import SkillView, TalentView, shown_id
from .rollout import SkillContext


class LibraryKnowledge:
    def __init__(self, library, cfg: LibraryConfig, flat: bool = False):
        self.lib = library
        self.cfg = cfg
        self.flat = flat
        self.version = library.version
        self._ctx = lru_cache(maxsize=65536)(self._context)
        self._strategy_envs = {l.env for l in library.labels() if l.kind == "matrix"}
        self._menus: dict[str, list[TalentView]] = {}

    def menu(self, env: str) -> list[TalentView]:
        """The routing menu: talents in content-id order, shown as ``T1``…``Tk`` (the same content, the same
        label in every library version that holds the same talents)."""
        if self.flat:
            return []
        if env not in self._menus:  # the library version is pinned: the menu never changes
            self._menus[env] = [TalentView(t.talent_id, t.name, t.when_to_apply, t.strategy, label=f"T{i}")
                                for i, t in enumerate(self.lib.talents(env), 1)]
        return list(self._menus[env])

    def _context(self, env: str, goal: str, task_type: str, talent_id: Optional[str], use_skills: bool) -> SkillContext:
        talent = None
        if talent_id is not None and not self.flat:
            t = self.lib.talent(talent_id)
            talent = TalentView(t.talent_id, t.name, t.when_to_apply, t.strategy, label=shown_id(self.menu(env), talent_id))
        if not use_skills or not self.lib.skills(env):
            return SkillContext(talent, [], [])
        res = self.lib.retrieve(
            goal,
            talent_id=None if self.flat else talent_id,
            lam=0.0 if self.flat else self.cfg.lam,
            delta=self.cfg.delta,
            env=env,
            task_type=task_type if self.cfg.filter_task_type else None,  # the gold label only in the ablation
        )
        views = [SkillView(s.skill_id, s.kind, s.title, s.principle) for s in res.skills]
        return SkillContext(talent, views, [s.skill_id for s in res.skills], [s.score for s in res.skills])

    def context(self, env: str, goal: str, task_type: str, talent_id: Optional[str], use_skills: bool = True) -> SkillContext:
        return self._ctx(env, goal, task_type, talent_id, use_skills)

    def nearest_talent(self, env: str, text: str) -> Optional[str]:
        return None if self.flat else self.lib.nearest_talent(env, text)

    def oracle_talent(self, env: str, task_type: str, task_id: str = "") -> Optional[str]:
        if self.flat:
            return None
        return (self.lib.label_for(task_id) if task_id else None) or self.lib.oracle_talent(env, task_type)

    def label_for(self, traj) -> Optional[str]:
        """The talent a trajectory's execution samples carry (a strategy trajectory: its strategy's talent)."""
        return None if self.flat else self.lib.label_for(traj)

    def routing_label(self, traj) -> Optional[str]:
        """The routing target of a trajectory's task: in a strategy library, the talent whose strategy measured
        best on the task's type (``strategy_labels.py``); otherwise the trajectory's own label."""
        if self.flat:
            return None
        if traj.env in self._strategy_envs:
            return self.lib.oracle_talent(traj.env, traj.task_type)
        return self.lib.label_for(traj)


def open_knowledge(cfg: LibraryConfig, flat: bool = False) -> LibraryKnowledge:
    from .library.store import Library

    return LibraryKnowledge(Library.open(cfg.uri, cfg=cfg), cfg, flat=flat)
