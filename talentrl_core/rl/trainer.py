"""Contrastive talent routing RL + group-relative (GRPO) execution RL, on accelerate (DESIGN.md §4–§5).

One update (``RLTrainer.train_step``) reads top to bottom:

1. **tasks**     ``rl.tasks_per_step`` training tasks drawn with a seed derived from ``(rl.seed, step)``
                 (never the global RNG, so a resumed run replays exactly); process ``r`` of ``n`` takes
                 groups ``r, r+n, …``.
2. **route**     for each task the policy's routing distribution over the talent menu: every
                 ``<talent>ID</talent>`` + eos is scored with the model (teacher forcing, under the menu's
                 constrained mask and the sampling temperature). Arm 1 = a talent sampled from it with a
                 seeded generator, arms 2..M = the next most likely talents, and optionally a no-talent
                 arm as the last arm.
3. **rollout**   one batched ``run_episodes`` call for every group of the step: ``G = rl.group_size``
                 rollouts per task, ``G/M`` per arm, all from the same ``Task`` (same initial state);
                 rollout ``j`` of every arm samples with seed ``base + j`` (matched interventions) and
                 retrieval differs only by the talent (``routing="fixed"``).
4. **reward**    ``R_i`` = the trajectory's return (TextWorld: normalised score; invalid actions are
                 penalised through the env reward, ``env.invalid_penalty``).
5. **advantage** ``A_route(k)`` from the contrast of the arms' mean rewards, ``A_exec(i)`` within the arm
                 (or the task, ``rl.exec_group``); groups with all-equal rewards dropped
                 (``rl.filter_zero_var``); optional AEM modulation (``rl.aem``). Routing tokens get the
                 routing advantage, execution tokens the execution advantage (``token_advantages``).
6. **loss**      PPO clip per completion token against the log-probs recorded at rollout, recomputed
                 under the same decoding mask; ``L = L_exec + α_route · L_route (+ β · KL to the frozen
                 initial policy when rl.beta_kl > 0)``, aggregated by ``rl.token_agg`` over the whole
                 step (every process, every micro-batch).
7. **step**      gradients accumulated over micro-batches and all-reduced once per update (DDP
                 ``no_sync``), clipped; AdamW; linear schedule (optional warm-up).
8. **log**       one namespaced metrics dict per step (``rollout/…``, ``route/…``, ``rl/…``, ``perf/…``).

Every ``rl.evolve_every`` updates (off by default) the library evolves from that step's training rollouts
through its gated API (``rl/evolve.py``: propose → matched with/without test → promote); the version
reached is recorded in checkpoints and reopened on resume.

Modules: ``routing.py`` (arms, the routing contrast, route metrics), ``update.py`` (the PPO-clip update), ``metrics.py``
(the step's dict), ``advantages.py`` / ``loss.py`` (the formulas), ``samples.py`` (tokens and log-probs), checkpoints
through ``talentrl_core.checkpoints`` (shared with SFT). Where this departs from DESIGN.md §5 (and from the paper, whose
code is not public): the routing choices in ``routing.py``; the routing prompt needs the task's goal before any
rollout (one extra env reset per task, cached); AEM (off by default) modulates execution advantages only, ``η_t``
over ``rl.steps``; the flat-skill GRPO baseline (``rl.flat_baseline``) has no routing, talent ``None`` (the
knowledge's flat retrieval, λ = 0), one arm of ``G`` rollouts and the same loss; the reference for ``β·KL`` is the
initial checkpoint (with LoRA: the model with adapters disabled).

Run (CPU, one process; two processes with gloo via torchrun — ``accelerate launch --cpu`` starts one
process on a single machine unless given an MPI hostfile)::

    python -m talentrl_core.rl.cli --config cfg.json --init artifacts/models/sft \\
        --out artifacts/models/rl --knowledge bank.json --set rl.steps=20
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 -m talentrl_core.rl.cli --config cfg.json ...
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checkpoints import Paused, model_digest, model_job
from ..config import ArmChoice, Backend, TalentRLConfig
from ..envs.base import Task
from ..io import write_json
from ..models import weights_digest
from ..precision import autocast
from ..preemption import stop_signals
from ..prompts import prompt_settings
from ..rollout import EpisodeSpec, Knowledge, RolloutSettings, run_episodes
from ..threads import follow_free_cpus
from ..tracking import NullTracker, redact
from . import routing
from .advantages import (aem_eta, aem_modulate, execution_advantages, trajectory_surprisal,
                         zero_variance_mask)
from .loss import token_advantages
from .metrics import add_group_stats, new_step_stats, rollout_counts, step_metrics
from .routing import Group
from .run_files import META_FILE, RunFiles, past_budget
from .samples import Sample, execution_samples, score_completions
from .seeding import derive_seed
from .update import build_update, own_precision_accelerator, reduce_sum


SITTING = ("resume", "checkpoint_every", "keep_checkpoints", "max_minutes")
"RL settings of how a run is carried out, not of what it makes: not part of its job (``workdir.claim``)."


@dataclass
class StepBatch:
    """Everything one update used: groups (with rollouts) and the samples that carry loss."""

    step: int
    groups: list[Group]
    samples: list[Sample]
    stats: dict[str, float]


# --------------------------------------------------------------------------------------------------------------
# The trainer


class RLTrainer:
    """One RL run (TalentRL or the flat-GRPO baseline): ``run()`` resumes, trains ``rl.steps`` updates, saves."""

    def __init__(self, cfg: TalentRLConfig, family, knowledge: Knowledge, init_checkpoint: str, out_dir: Path,
                 tracker=None, progress: bool = True):
        from accelerate.utils import set_seed

        self.cfg, self.rl = cfg, cfg.rl
        self.family, self.knowledge = family, knowledge
        self.init_checkpoint, self.out_dir = str(init_checkpoint), Path(out_dir)
        check_config(cfg)
        if self.rl.evolve_every > 0:
            from .evolve import library_of

            library_of(knowledge)  # fail before any compute: evolution needs a LanceDB-backed knowledge
        device = cfg.model.device
        self.acc = own_precision_accelerator(device == "cpu" or (device == "auto" and not torch.cuda.is_available()))
        self.main = self.acc.is_main_process
        self.tracker = tracker if (tracker is not None and self.main) else NullTracker()
        self.progress = progress and self.main
        self.files = RunFiles(self.acc, self.out_dir, self.stage, cfg.keep_previous_runs, self.rl.keep_checkpoints)
        self.work_dir = self.files.work_dir
        set_seed(self.rl.seed)
        self.updater = build_update(cfg, self.init_checkpoint, self.acc)
        self.model, self.opt, self.sched, self.tok = self.updater.model, self.updater.opt, self.updater.sched, self.updater.tok
        self.vocab, self.tries, self.compute_dtype = self.updater.vocab, self.updater.tries, self.updater.compute_dtype
        self.policy, self.keep = build_policy(cfg, self.unwrapped(), self.tok, self.init_checkpoint)
        self.settings = RolloutSettings.of(cfg.env, run_id=f"rl-{cfg.experiment}", split=self.rl.split, checkpoint=self.init_checkpoint)
        self.initial_library_version = getattr(knowledge, "version", None)
        self.flat = self.rl.flat_baseline
        self.n_arms = 1 if self.flat else self.rl.n_arms
        self.per_arm = self.rl.group_size // self.n_arms
        self.n_talent_arms = 0 if self.flat else self.n_arms - int(self.rl.no_talent_arm)
        self.pool = family.tasks(self.rl.split)
        if not self.pool:
            raise ValueError(f"family {family.name} has no {self.rl.split!r} tasks")
        self._goal_env = None
        self._goals: dict[str, tuple[str, str]] = {}
        self.history: list[dict] = []
        self.start_step = 0
        self.resumed_from: Optional[str] = None
        self.last_batch: Optional[StepBatch] = None

    @property
    def world(self) -> int:
        return self.acc.num_processes

    @property
    def stage(self) -> str:
        "How this run names itself in messages."
        return "rl_flat_grpo" if self.rl.flat_baseline else "rl"

    def unwrapped(self):
        return self.acc.unwrap_model(self.model)

    # -- 1. tasks ------------------------------------------------------------------------------------------

    def step_tasks(self, step: int) -> list[tuple[int, Task]]:
        """This process's (global index, task) pairs of ``step``: the same draw on every process and every run."""
        rng = random.Random(derive_seed(self.rl.seed, "tasks", step))
        n = self.rl.tasks_per_step
        idx = rng.sample(range(len(self.pool)), n) if n <= len(self.pool) else [rng.randrange(len(self.pool)) for _ in range(n)]
        self.step_all_tasks = [self.pool[i] for i in idx]
        mine = [(g, self.pool[i]) for g, i in enumerate(idx) if g % self.world == self.acc.process_index]
        if mine:  # EnvFamily.prepare (TextWorld: generate games missing from the cache; a no-op elsewhere)
            self.family.prepare([t for _, t in mine], workers=1, progress=False)
        return mine

    def _goal(self, task: Task) -> tuple[str, str]:
        """(goal, first observation) of ``task``, read once from a reset."""
        if task.task_id not in self._goals:
            if self._goal_env is None:
                self._goal_env = self.family.make()
            first = self._goal_env.reset(task)
            self._goals[task.task_id] = (self._goal_env.goal(), first)
        return self._goals[task.task_id]

    # -- 2. route (routing.py) -----------------------------------------------------------------------------

    def route(self, step: int, tasks: list[tuple[int, Task]]) -> list[Group]:
        """Arms of every group: the sampled talent, the next most likely ones, optionally no talent."""
        groups = routing.plan_groups(self.rl.seed, step, tasks, self.per_arm)
        if self.flat:
            for gr in groups:
                gr.talents, gr.route_samples = [None], [None]
            return groups
        sample_all = self.rl.arms == ArmChoice.sample  # the sampled_talent_rl baseline: each arm draws its talent
        candidates = routing.menu_candidates(groups, self.knowledge, self.tok, self.keep, self._goal,
                                             self.settings.routing_obs_chars, 1 if sample_all else self.n_talent_arms,
                                             f"rl.n_arms={self.rl.n_arms}, no_talent_arm={self.rl.no_talent_arm}", self.settings.routing_cue)
        model = self.unwrapped()
        model.eval()
        with autocast(self.compute_dtype, self.acc.device):
            scores = score_completions(model, self.tok, candidates, self.vocab, self.cfg.model.temperature,
                                       self.rl.micro_batch_size, self.tries)
        routing.choose_arms(groups, candidates, scores, self.rl.seed, step, self.n_talent_arms, self.rl.no_talent_arm, sample_all)
        return groups

    # -- 3. rollout ----------------------------------------------------------------------------------------

    def rollout(self, step: int, groups: list[Group]) -> None:
        """All groups of the step through ONE batched ``run_episodes`` call (fills ``Group.trajs``)."""
        specs = []
        for gr in groups:
            gr.specs = [
                EpisodeSpec(gr.task, routing="none" if talent is None else "fixed", talent_id=talent, arm=k,
                            group_uid=f"{self.settings.run_id}-s{step}-g{gr.index}", seed=gr.seeds[j])
                for k, talent in enumerate(gr.talents) for j in range(self.per_arm)
            ]
            specs.extend(gr.specs)
        if not specs:
            return
        self.unwrapped().eval()
        trajs = run_episodes(self.family.make, specs, self.policy, self.settings, self.knowledge,
                             batch_size=self.rl.rollout_batch_size, progress=False)
        if len(trajs) != len(specs):
            raise RuntimeError(f"run_episodes returned {len(trajs)} trajectories for {len(specs)} episodes")
        pos = 0
        for gr in groups:
            gr.trajs = trajs[pos:pos + len(gr.specs)]
            pos += len(gr.specs)

    # -- 4.–5. reward and advantage -----------------------------------------------------------------------

    def build_samples(self, step: int, groups: list[Group]) -> tuple[list[Sample], dict[str, float]]:
        """Every kept group's routing and execution samples, each token carrying its advantage; step statistics."""
        rl = self.rl
        samples: list[Sample] = []
        st = new_step_stats(self.n_arms)
        kept: list[tuple[Group, np.ndarray, np.ndarray]] = []
        for gr in groups:
            R = np.array([t.final_reward for t in gr.trajs], dtype=np.float64)  # (G,) returns, penalties included
            arms = np.array(gr.arm_of)  # (G,)
            add_group_stats(st, gr, R, arms, self.n_arms)
            if zero_variance_mask([R])[0]:
                st["groups_zero_var"] += 1
                if rl.filter_zero_var:
                    continue
            st["groups_kept"] += 1
            kept.append((gr, R, arms))
        a_routes, st["groups_tied"] = routing.step_contrasts(kept, self.n_arms, self.n_talent_arms, rl.eps,
                                                             rl.shuffle_route_credit, rl.seed, step)
        for gr, R, arms in kept:
            a_route = a_routes[gr.index]
            a_exec = execution_advantages(R, arms, rl.eps, rl.exec_group)  # (G,)
            ex = [execution_samples(t, self.tok, self.keep, self.policy.constrained, gr.index, int(arms[i]), i)
                  for i, t in enumerate(gr.trajs)] if rl.train_execution else []
            if rl.aem and ex:
                a_exec = aem_modulate(a_exec, trajectory_surprisal(ex), aem_eta(step, rl.steps, rl.aem_eta0), rl.aem_clip, rl.eps)
            group_samples = routing.routing_samples(gr, rl.alpha_route) + [s for traj_samples in ex for s in traj_samples]
            if not group_samples:
                continue
            adv = token_advantages([s.kind for s in group_samples], a_route, a_exec,
                                   [s.arm for s in group_samples], [max(s.traj, 0) for s in group_samples])
            for s, a in zip(group_samples, adv.tolist()):
                s.advantage = a
            samples.extend(group_samples)
            st["route_abs_sum"] += float(np.abs(a_route).mean()) if self.n_talent_arms else 0.0
            st["exec_abs_sum"] += float(np.abs(a_exec).sum())
            st["exec_abs_n"] += len(a_exec)
        return samples, st

    # -- 6.–7. loss and step (update.py) ---------------------------------------------------------------------

    def mini_batches(self, samples: list[Sample], step: int) -> list[list[Sample]]:
        return self.updater.mini_batches(samples, step)

    def update(self, samples: list[Sample], step: int = 0) -> dict[str, float]:
        """The PPO-clip update (``update.PolicyUpdate``); a generator holding its own weights (vLLM) gets them."""
        out = self.updater.update(samples, step)
        sync = getattr(self.policy.gen, "sync_from", None)
        if sync is not None and not out.get("rl/skipped"):
            sync(self.unwrapped(), self.cfg.model.lora)
        return out

    # -- one update, top to bottom ---------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
        follow_free_cpus(self.cfg.model.threads)
        t0 = time.perf_counter()
        tasks = self.step_tasks(step)  # 1. this process's tasks of the step
        groups = self.route(step, tasks)  # 2. arms per task (routing distribution, seeded sample)
        self.rollout(step, groups)  # 3. one batched rollout for every group
        t_roll = time.perf_counter() - t0
        samples, st = self.build_samples(step, groups)  # 4.–5. rewards → advantages → samples
        self.last_batch = StepBatch(step, groups, samples, st)
        t1 = time.perf_counter()
        upd = self.update(samples, step)  # 6.–7. PPO-clip loss, accumulate, all-reduce, clip, AdamW, schedule
        t_upd = time.perf_counter() - t1
        if self.rl.evolve_every and (step + 1) % self.rl.evolve_every == 0:
            upd.update(self.evolve(step, groups))  # library evolution from this step's training rollouts
        return self._metrics(groups, st, upd, t_roll, t_upd, time.perf_counter() - t0)  # 8. one dict per step

    def evolve(self, step: int, groups: list[Group]) -> dict[str, float]:
        """Library evolution (rl/evolve.py) on process 0; every process continues on the new version."""
        from accelerate.utils import broadcast_object_list, gather_object

        from .evolve import EvolveRun, evolve_step, pin_version

        trajs = [t for g in groups for t in g.trajs]
        if self.world > 1:
            trajs = gather_object(trajs)
        payload: list = [None]
        if self.main:
            run = EvolveRun(self.rl, self.family.make, self.policy, self.settings, self.per_arm, self.flat)
            self.knowledge, m = evolve_step(run, self.knowledge, trajs, self.step_all_tasks, step)
            payload = [(self.knowledge.version, m)]
        if self.world > 1:
            broadcast_object_list(payload)
        version, m = payload[0]
        if not self.main and version != self.knowledge.version:
            self.knowledge = pin_version(self.knowledge, version)
        return m

    def _metrics(self, groups, st, upd, t_roll, t_upd, t_step) -> dict[str, float]:
        local = {**st, **rollout_counts([t for g in groups for t in g.trajs])}
        return step_metrics(reduce_sum(self.acc, local), upd, (t_roll, t_upd, t_step), self.n_arms, not self.flat)

    # -- checkpoints (run_files.py) ------------------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> Path:
        return self.files.save(step, self.job(), {
            "step": step, "library_version": getattr(self.knowledge, "version", None), "history": self.history,
            "init_checkpoint": self.init_checkpoint, "world_size": self.world})

    def job(self) -> dict:
        """What a checkpoint must match to be resumed: the same job (config, initial weights by content, library);
        computed once (it hashes the initial weights). Where the game cache lies is not part of it."""
        if getattr(self, "_job", None) is None:
            rl = {k: v for k, v in dataclasses.asdict(self.rl).items() if k not in SITTING}
            env = {k: v for k, v in dataclasses.asdict(self.cfg.env).items() if k != "cache_dir"}
            self._job = {"rl": rl, "env": env, "model": model_job(self.cfg.model),
                         "init": model_digest(self.init_checkpoint), "library_version": self.initial_library_version}
        return self._job

    def maybe_resume(self) -> int:
        """Resume from the newest checkpoint of this job that verifies (``RunFiles.resume``); 0 when none."""
        found = self.files.resume(self.job(), self.rl.resume)
        if found is None:
            return 0
        path, state = found
        self.history = list(state.get("history", []))
        saved = state.get("library_version")
        if saved is not None and saved != getattr(self.knowledge, "version", None) and getattr(self.knowledge, "lib", None) is not None:
            from .evolve import pin_version

            self.knowledge = pin_version(self.knowledge, saved)  # continue on the version the run had reached
        self.start_step, self.resumed_from = int(state["step"]), str(path)
        return self.start_step

    def weights_digest(self) -> str:
        return weights_digest(self.unwrapped())

    def save_final(self, meta: dict) -> None:
        model = self.unwrapped()
        if self.cfg.model.lora and self.main:
            model = model.merge_and_unload()

        def write(tmp: Path) -> None:
            model.save_pretrained(tmp)
            self.tok.save_pretrained(tmp)
            write_json(tmp / META_FILE, {**meta, "prompt": prompt_settings(self.cfg.env)})  # check_prompt_settings

        self.files.save_final(model, write, self.job())

    # -- the run ----------------------------------------------------------------------------------------------

    def run(self, started: Optional[float] = None) -> dict:
        t0 = time.time()
        start = self.maybe_resume()
        bar = tqdm(total=self.rl.steps, initial=start, desc="rl" + ("-flat" if self.flat else ""), disable=not self.progress)
        try:
            with stop_signals(self.stage) as stop:
                for step in range(start, self.rl.steps):
                    m = self.train_step(step)
                    self.history.append({"step": step + 1, **m})
                    self.tracker.log(m, step=step + 1)
                    bar.update(1)
                    bar.set_postfix(reward=f"{m['rollout/reward']:.3f}", succ=f"{m['rollout/success']:.2f}")
                    if step + 1 < self.rl.steps and (why := past_budget(self.acc, self.rl.max_minutes, started or t0, stop.name)):
                        self.save_checkpoint(step + 1)
                        raise Paused(f"rl paused at update {step + 1} of {self.rl.steps} after {why} (checkpoint in "
                                     f"{self.files.work_dir}); run the same command to resume")
                    if self.rl.checkpoint_every and (step + 1) % self.rl.checkpoint_every == 0 and step + 1 < self.rl.steps:
                        self.save_checkpoint(step + 1)
        finally:
            bar.close()
            if self._goal_env is not None:
                self._goal_env.close()
        result = {
            "steps": self.rl.steps, "start_step": start, "resumed_from": self.resumed_from, "flat_baseline": self.flat,
            "n_arms": self.n_arms, "world_size": self.world, "library_version": getattr(self.knowledge, "version", None),
            "init_checkpoint": self.init_checkpoint, "out_dir": str(self.out_dir),
            "reward_curve": [h["rollout/reward"] for h in self.history],
            "success_curve": [h["rollout/success"] for h in self.history],
            "final_metrics": self.history[-1] if self.history else {},
            "weights_digest": self.weights_digest(), "seconds": round(time.time() - t0, 2),
        }
        self.save_final({**result, "stage": "rl", "config": redact(self.cfg), "history": self.history})
        return result


def build_policy(cfg: TalentRLConfig, model, tok, init_checkpoint: str):
    """(the rollout policy on ``model``, how many prompt tokens samples keep). vLLM constrains through structured
    outputs and returns processed log-probs, so both backends train the policy that sampled."""
    from ..agent import make_generator
    from ..config import Decoding
    from ..generation import TransformersGenerator
    from ..policies import LLMPolicy

    gen = make_generator(cfg, model, tok, init_checkpoint)
    # The generator keeps the last (max_context - max_new_tokens) prompt tokens: samples must too.
    keep = gen.max_context - cfg.model.max_new_tokens if isinstance(gen, TransformersGenerator) else None
    constrained = cfg.model.decoding == Decoding.constrained
    return LLMPolicy(gen, tok, cfg.model.max_new_tokens, cfg.model.temperature, constrained, name="rl"), keep


def check_config(cfg: TalentRLConfig) -> None:
    """Cross-field checks the RL stage needs beyond ``RLConfig.__post_init__``; messages say what to change."""
    if cfg.model.temperature <= 0:
        raise ValueError("RL samples its rollouts: set model.temperature > 0 (greedy groups carry no contrast)")
    if cfg.model.backend == Backend.openai:
        raise ValueError("model.backend=openai cannot be trained: use transformers (CPU/GPU) or vllm (GPU)")
    if cfg.rl.beta_kl < 0 or cfg.rl.alpha_route < 0:
        raise ValueError("rl.beta_kl and rl.alpha_route are loss weights: make them >= 0")


def train_rl(cfg: TalentRLConfig, family, knowledge: Knowledge, init_checkpoint: str, out_dir: Path,
             tracker=None, progress: bool = True, started: Optional[float] = None, skip_finished: bool = False) -> dict:
    """Train with contrastive routing RL + GRPO execution RL (or the flat baseline); returns run metadata.

    Resumes from the last ``<out_dir>.work/checkpoint-<step>`` when ``rl.resume``; writes the final model
    (``save_pretrained`` + tokenizer + ``talentrl_meta.json``) atomically into ``out_dir``. ``tracker`` (any object
    with ``.log(dict, step)``; a null object by default) receives every update's metrics; whoever opened it finishes
    it (the stage's ``with`` block, the CLI's ``finally``), so it can still log the model afterwards. ``started``: when
    this sitting began, for ``rl.max_minutes`` (default: now); ``skip_finished``: a finished model of this job in
    ``out_dir`` is not trained again, its recorded result is returned (a stage rerun after the second system paused).
    """
    trainer = RLTrainer(cfg, family, knowledge, init_checkpoint, Path(out_dir), tracker, progress)
    done = trainer.files.finished(trainer.job()) if skip_finished else None
    return done if done is not None else trainer.run(started)
