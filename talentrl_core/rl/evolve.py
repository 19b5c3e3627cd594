"""Library evolution during RL (DESIGN.md §3 "Evolution"), through the library's gated API.

Every ``rl.evolve_every`` updates, from that step's **training** rollouts only
(``library.evolution.propose_candidates`` refuses any other split):

1. **propose** candidate skills for task types whose success rate is below
   ``rl.evolve_success_threshold`` (at most ``rl.evolve_max_candidates``);
2. **test** each candidate with matched rollouts on up to ``rl.evolve_tasks`` of the step's tasks of its
   task type: rollout ``j`` *with* the candidate injected at the top of the retrieved skills and rollout
   ``j`` *without* it share seed ``j``, the task and the talent (the task type's oracle talent; none in
   the flat baseline);
3. **promote** through ``library.evolution.promote`` (gain in success rate ``> 0`` and ``>= rl.evolve_min_gain``;
   size cap ``library.max_skills`` with eviction by utility) — every promotion is a new library version;
4. the trainer continues on a knowledge pinned to the new version, which is recorded in checkpoints
   (a resumed run reopens the same version: ``pin_version``).

Process 0 evolves (the others wait) and broadcasts the resulting version. Caveat on exact resume: a step
re-run after a crash re-proposes a candidate that the crashed run may already have committed; ``promote``
then refuses it ("already in the library") and the run continues on the checkpointed version.

Needs a LanceDB-backed knowledge (``talentrl_core.knowledge.LibraryKnowledge``: ``.lib``, ``.cfg``, ``.flat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..config import RLConfig
from ..envs.base import Task
from ..prompts import SkillView
from ..rollout import EpisodeSpec, Knowledge, SkillContext, run_episodes
from ..trajectories import Trajectory


def library_of(knowledge: Knowledge):
    lib = getattr(knowledge, "lib", None)
    if lib is None or not hasattr(lib, "commit"):
        raise NotImplementedError(
            f"rl.evolve_every > 0 needs a LanceDB-backed knowledge (talentrl_core.knowledge.LibraryKnowledge); "
            f"got {type(knowledge).__name__}"
        )
    return lib


def pin_version(knowledge: Knowledge, version: int) -> Knowledge:
    """A knowledge like ``knowledge`` pinned to library ``version`` (fresh retrieval cache)."""
    from ..knowledge import LibraryKnowledge

    if not isinstance(knowledge, LibraryKnowledge):
        raise NotImplementedError(f"cannot re-pin a {type(knowledge).__name__} to library version {version}")
    lib = knowledge.lib.refresh(int(version))
    return LibraryKnowledge(lib, knowledge.cfg, flat=knowledge.flat)


class WithSkill:
    """``base`` with one extra skill at the top of every retrieved context (the 'with' arm of a test)."""

    def __init__(self, base: Knowledge, skill: SkillView):
        self.base, self.skill = base, skill
        self.version = base.version

    def context(self, env, goal, task_type, talent_id, use_skills=True) -> SkillContext:
        ctx = self.base.context(env, goal, task_type, talent_id, use_skills)
        if not use_skills:
            return ctx
        return SkillContext(ctx.talent, [self.skill, *ctx.skills], [self.skill.skill_id, *ctx.skill_ids], [1.0, *ctx.scores])

    def __getattr__(self, name):
        return getattr(self.base, name)


@dataclass
class EvolveRun:
    """What the matched with/without test of a candidate skill needs from the RL run."""

    rl: RLConfig
    make_env: Callable
    policy: object
    settings: object
    per_arm: int
    "Rollouts per task and per side of the test."
    flat: bool
    "The flat baseline tests without a talent."


def evolve_step(run: EvolveRun, knowledge: Knowledge, trajectories: Sequence[Trajectory], tasks: Sequence[Task],
                step: int) -> tuple[Knowledge, dict]:
    """Propose → matched test → promote, on process 0; returns (knowledge to use next, metrics)."""
    from ..library.evolution import promote, propose_candidates
    from .seeding import derive_seed

    rl = run.rl
    lib = library_of(knowledge)
    metrics = {"evolve/candidates": 0.0, "evolve/promoted": 0.0, "evolve/gain_mean": 0.0}
    envs = sorted({t.env for t in trajectories})
    gains = []
    new_version: Optional[int] = None
    for env in envs:
        cands = propose_candidates([t for t in trajectories if t.env == env], lib, env, cfg=lib.cfg,
                                   success_threshold=rl.evolve_success_threshold, max_candidates=rl.evolve_max_candidates)
        metrics["evolve/candidates"] += len(cands)
        for ci, cand in enumerate(cands):
            pool = [t for t in tasks if t.env == env and t.task_type == cand.task_type][: rl.evolve_tasks]
            if not pool:
                continue
            view = SkillView(cand.skill.skill_id, cand.skill.kind, cand.skill.title, cand.skill.principle)
            specs = []
            for ti, task in enumerate(pool):
                talent = None if run.flat else knowledge.oracle_talent(env, task.task_type, task.task_id)
                base = derive_seed(rl.seed, "evolve", step, env, ci, ti) % 2**40
                specs += [EpisodeSpec(task, routing="fixed" if talent else "none", talent_id=talent, arm=0,
                                      seed=base + j) for j in range(run.per_arm)]
            runs = {}
            for arm, kn in (("with", WithSkill(knowledge, view)), ("without", knowledge)):
                trajs = run_episodes(run.make_env, specs, run.policy, run.settings, kn,
                                     batch_size=rl.rollout_batch_size, progress=False)
                runs[arm] = sum(t.success for t in trajs) / max(len(trajs), 1)
            gains.append(runs["with"] - runs["without"])
            v = promote(lib, cand, runs["with"], runs["without"], rl.evolve_min_gain,
                        max_skills=lib.cfg.max_skills, n_rollouts=2 * len(specs))
            if v is not None:
                metrics["evolve/promoted"] += 1
                new_version = v
    metrics["evolve/gain_mean"] = sum(gains) / len(gains) if gains else 0.0
    if new_version is not None:
        knowledge = pin_version(knowledge, new_version)
    metrics["evolve/library_version"] = float(knowledge.version or 0)
    return knowledge, metrics
