"""DAgger after SFT: the student plays, the teacher labels every state the student reaches (issue 39).

Behaviour cloning trains on the teacher's states only; a student that errs once reaches states the teacher never
showed it and does not know what to do there. On ALFWorld the 6.8M SFT student walks back and forth between two
receptacles it has already searched, while its memory line says so: no demonstration ever stood in a state where it
had walked back. DAgger (Ross, Gordon & Bagnell 2011; ALFWorld's own BUTLER agent is trained with it) closes that
gap: each round the current student plays training games, mixed with the teacher (``sft.dagger_beta``: the share of
steps whose command is the teacher's, BUTLER's ``fraction_assist``), every state reached is labelled with the
teacher's command there, and SFT continues from the student on the aggregate of the demonstrations and every
round's labelled states.

The teacher is a strategy expert (``envs.strategies``): a pure function of what the agent has seen (goal, first
observation, the current observation, the admissible commands, its own transcript). So labels are computed from the
stored trajectory (``teacher_labels``), exactly as the live environment's ``strategy_action`` would give them, and a
round's trajectories are an ordinary trajectory file.

Layout under ``<sft checkpoint>.dagger/``: ``round-0`` the behaviour-cloning model (``sft.max_steps``), ``round-r/``
the student's games of round r (played in resumable parts) and, but for the last round, its model; the last round's
model is the SFT checkpoint itself. Every round resumes: a finished model of the same job is kept, a played part is
read back, and SFT resumes from its checkpoints. A sitting's end (``sft.max_minutes``, SIGTERM/SIGUSR1) pauses the
games between parts as it pauses SFT between steps (``checkpoints.Paused``, exit 75).

Departures from the paper's DAgger: one mixing rate for every round (the paper decays beta; BUTLER anneals it over
50,000 episodes), SFT continues from the last model instead of training a fresh one on the aggregate, and the
student's states may be weighted (``sft.dagger_weight``). Run it with the SFT stage::

    python -m pipeline.run sft experiment=alfworld sft.dagger_rounds=1 sft.dagger_games=256 sft.dagger_steps=500
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from .envs.strategies import EpisodeView, Strategy, chosen, get_strategy
from .generation import GenResult
from .prompts import format_action
from .trajectories import Trajectory, read_trajectories, trajectory_files, write_trajectories

ROOT_SUFFIX = ".dagger"
PART_GAMES = 32
"The student's games are kept in parts of this many: what a killed round loses at most (~10 minutes of ALFWorld)."


def teacher_labels(t: Trajectory, strategy: Strategy) -> list[Optional[str]]:
    """The teacher's command at every environment step of ``t`` (None where it has none, or where it names a command
    the step did not admit); invalid steps, which never reached the environment, get None and leave the transcript
    unchanged."""
    obs, transcript, out = t.initial_observation, [], []
    for s in t.env_steps():
        if not s.valid or not s.action:
            out.append(None)
            continue
        view = EpisodeView(t.goal, t.initial_observation, obs, tuple(s.admissible or ()), tuple(transcript))
        want = strategy.act(view)
        out.append(want if want and (s.admissible is None or want in s.admissible) else None)
        transcript.append((s.action, s.observation))
        obs = s.observation
    return out


class Mixture:
    """DAgger's mixed policy: at each execution step the teacher's command with probability ``beta`` (seeded), the
    student's otherwise; routing steps are the student's. Where the teacher has no command the student acts."""

    name = "dagger"

    def __init__(self, student, teacher: str, beta: float, seed: int):
        self.student, self.teacher, self.beta = student, teacher, beta
        self.rng = random.Random(seed)

    def complete(self, items) -> list[Optional[GenResult]]:
        out: list[Optional[GenResult]] = [None] * len(items)
        for i, it in enumerate(items):
            if it.kind == "exec" and it.env is not None and self.rng.random() < self.beta:
                act = it.env.strategy_action(self.teacher)
                if act:
                    out[i] = GenResult(text=format_action(it.env_name, act), token_ids=[], prompt_tokens=0)
        ask = [i for i, r in enumerate(out) if r is None]
        for i, r in zip(ask, self.student.complete([items[i] for i in ask]) if ask else ()):
            out[i] = r
        return out


def dagger_root(checkpoint: str | Path) -> Path:
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + ROOT_SUFFIX)


def teacher_name(cfg) -> str:
    """``sft.dagger_teacher``, else the one strategy expert collection imitated; a named error otherwise."""
    if cfg.sft.dagger_teacher:
        try:
            return get_strategy(cfg.env.name, cfg.sft.dagger_teacher).name
        except KeyError as e:
            raise ValueError(f"sft.dagger_teacher: {e.args[0]}") from None
    imitated = [s for s in chosen(cfg.env.name, list(cfg.collect.strategies)) if s]
    if len(imitated) != 1:
        raise ValueError(f"sft.dagger_rounds > 0 needs one teacher that can label any state: set sft.dagger_teacher to "
                         f"a strategy expert of env={cfg.env.name} (collect imitated {imitated or 'no strategy expert'})")
    return imitated[0]


def student_games(cfg, family, knowledge, student: str, teacher: str, rnd: int, folder: Path,
                  stop: Optional[Callable[[], str]] = None) -> list[Trajectory]:
    """Round ``rnd``'s games: the student (``model.temperature``) mixed with the teacher on ``sft.dagger_games``
    training tasks drawn with the round's seed, the talent the task's oracle one, played in resumable parts under
    ``folder``; read back when the round's file is there. ``stop`` (``preemption.sitting_over``) pauses between parts."""
    from .agent import load_policy
    from .collect_parts import finish_parts, run_in_parts
    from .rollout import EpisodeSpec, RolloutSettings, run_episodes

    run_id = f"dagger-{family.name}-round{rnd}"
    done = [f for f in trajectory_files(folder) if f.stem == run_id]
    if done:
        return read_trajectories(done[0])
    c = cfg.sft
    tasks = family.tasks(cfg.collect.split, c.dagger_games, seed=c.seed + rnd)
    family.prepare(tasks, workers=1, progress=False)
    policy, _ = load_policy(cfg, student, name="dagger")
    mixed = Mixture(policy, teacher, c.dagger_beta, seed=c.seed * 1_000_003 + rnd)
    settings = RolloutSettings.of(cfg.env, run_id=run_id, split=cfg.collect.split, checkpoint=student)
    specs = [EpisodeSpec(t, routing="oracle", use_skills=True, group_uid=f"{run_id}-{t.task_id}",
                         seed=c.seed * 100_003 + rnd * 10_007 + i) for i, t in enumerate(tasks)]
    trajs = run_in_parts(specs, lambda chunk: run_episodes(family.make, chunk, mixed, settings, knowledge,
                                                           batch_size=cfg.collect.batch_size), folder, run_id,
                         part_episodes=PART_GAMES, stop=stop)
    write_trajectories(trajs, folder, run_id)
    finish_parts(folder, run_id)
    return trajs


def labelled_samples(trajs: Sequence[Trajectory], knowledge, teacher: Strategy, cfg) -> list[dict]:
    """Execution samples of the student's states with the teacher's commands as targets (each with the DAgger
    weight); every trajectory counts, won or not, environment errors aside."""
    from .sft_data import execution_samples

    out = []
    for t in trajs:
        if t.error:
            continue
        talent = t.talent_id or knowledge.label_for(t)  # the talent the student was shown (the oracle one)
        rows = execution_samples(t, knowledge, talent, cfg.env.history, cfg.env.obs_chars, False, cfg.env.memory_mode,
                                 labels=teacher_labels(t, teacher))
        out += [{**r, "dagger": True, "weight": cfg.sft.dagger_weight} for r in rows]
    return out


def train_rounds(cfg, family, knowledge, data0, base: str, out: Path, meta: Optional[dict] = None,
                 keep_previous: int = 1, tracker=None) -> dict:
    """Behaviour cloning (round 0, ``sft.max_steps``) then ``sft.dagger_rounds`` rounds of DAgger, each continuing
    SFT from the previous round's model for ``sft.dagger_steps`` steps; the last round's model lands in ``out``."""
    from .preemption import sitting_over, stop_signals

    t0 = time.time()
    with stop_signals("sft") as request:  # shared with each round's SFT, and asked between the games' parts
        return _rounds(cfg, family, knowledge, data0, base, out, meta, keep_previous, tracker, t0,
                       sitting_over(cfg.sft.max_minutes, t0, request, "sft.max_minutes"))


def _rounds(cfg, family, knowledge, data0, base: str, out: Path, meta, keep_previous: int, tracker, t0: float,
            over: Callable[[], str]) -> dict:
    """``train_rounds``' work; ``t0`` the sitting's start, ``over`` its ``preemption.sitting_over``."""
    from .sft_data import SFTData

    root = dagger_root(out)
    teacher = get_strategy(cfg.env.name, teacher_name(cfg))
    rounds = cfg.sft.dagger_rounds
    info = kept_or_trained(data0, base, root / "round-0", cfg.sft, cfg.model, keep_previous, tracker,
                           {**(meta or {}), "dagger_round": 0})
    student, labelled, report = str(root / "round-0"), [], []
    for rnd in range(1, rounds + 1):
        trajs = student_games(cfg, family, knowledge, student, teacher.name, rnd, root / f"round-{rnd}", stop=over)
        new = labelled_samples(trajs, knowledge, teacher, cfg)
        labelled += new
        report.append({"round": rnd, "games": len(trajs), "won": sum(t.success for t in trajs), "samples": len(new)})
        data = SFTData(list(data0.samples) + labelled, {**data0.report, "dagger": report})
        target = out if rnd == rounds else root / f"round-{rnd}"
        cfg_r = round_settings(cfg.sft, time.time() - t0)
        info = kept_or_trained(data, student, target, cfg_r, cfg.model, keep_previous, tracker,
                               {**(meta or {}), "dagger_round": rnd, "dagger": list(report)})
        student = str(target)
    return {**info, "dagger": report}


def kept_or_trained(data, base: str, out: Path, sft_cfg, model_cfg, keep_previous: int, tracker, meta: dict) -> dict:
    """``train_sft`` into ``out``, unless ``out`` already holds the finished model of this very job (kept: a resumed
    DAgger run does not train a finished round again)."""
    from .io import read_json
    from .sft import sft_job, train_sft
    from .workdir import holds_job

    if holds_job(out, sft_job(base, data, sft_cfg, model_cfg)) and (out / "talentrl_meta.json").exists():
        return {**read_json(out / "talentrl_meta.json"), "kept": True}
    return train_sft(data, base, out, sft_cfg, model_cfg, meta=meta, keep_previous=keep_previous, tracker=tracker)


def round_settings(sft_cfg, spent_s: float = 0.0):
    """The SFT settings of a DAgger round: ``sft.dagger_steps`` steps, and with ``sft.dagger_routing_warmup`` a
    routing warm-up first (capped there, ended once every label passes ``sft.routing_warmup_until``, 0.9 if unset).
    ``sft.max_minutes`` is the whole sitting's: the round's SFT gets what the sitting has left after ``spent_s``
    (``Paused`` when nothing is left: the games are kept, the rerun trains).

    >>> from talentrl_core.config import SFTConfig
    >>> r = round_settings(SFTConfig(dagger_steps=7, max_minutes=10, dagger_routing_warmup=5), spent_s=240)
    >>> r.max_steps, r.max_minutes, r.routing_warmup_steps, r.routing_warmup_until
    (7, 6.0, 5, 0.9)
    """
    from .checkpoints import Paused

    extra = {}
    if sft_cfg.max_minutes:
        left = sft_cfg.max_minutes - spent_s / 60
        if left <= 0:
            raise Paused(f"sft paused before a DAgger round's SFT after sft.max_minutes={sft_cfg.max_minutes:g} (its games "
                         "are kept); run the same command to resume")
        extra["max_minutes"] = round(left, 2)
    if sft_cfg.dagger_routing_warmup:
        extra.update(routing_warmup_steps=sft_cfg.dagger_routing_warmup,
                     routing_warmup_until=sft_cfg.routing_warmup_until or 0.9)
    return dataclasses.replace(sft_cfg, max_steps=sft_cfg.dagger_steps, **extra)
