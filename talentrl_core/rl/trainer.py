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

Where this departs from DESIGN.md §5 (and from the paper, whose code is not public):

* Arms 2..M are the next most likely talents (the "uniform" alternative is not implemented). The
  no-talent arm has no routing sample; its mean reward still enters the contrast as a baseline.
* The routing sample is not produced by the rollout loop's generator: scoring the whole (small) menu
  gives the exact constrained routing distribution, and a seeded draw from it *is* a sample of the
  constrained policy; its old log-probs are those scores (no grad, before any update of the step).
* The routing prompt needs the task's goal before any rollout: one extra env reset per task (cached).
* AEM (off by default) modulates execution advantages only; ``η_t`` runs over ``rl.steps``.
* Flat-skill GRPO baseline (``rl.flat_baseline``): no routing, talent ``None`` (the knowledge's flat
  retrieval, λ = 0), one arm of ``G`` rollouts, the same loss.
* The reference for ``β·KL`` is the initial checkpoint (with LoRA: the model with adapters disabled).

Run (CPU, one process; two processes with gloo via torchrun — ``accelerate launch --cpu`` starts one
process on a single machine unless given an MPI hostfile)::

    python -m talentrl_core.rl.cli --config cfg.json --init artifacts/models/sft \\
        --out artifacts/models/rl --knowledge bank.json --set rl.steps=20
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 -m talentrl_core.rl.cli --config cfg.json ...
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Backend, Decoding, TalentRLConfig
from ..envs.base import Task
from ..checkpoints import model_digest, newest_sound, seal
from ..io import atomic_dir, disk_full_named, read_json, remove_orphans, write_json
from ..workdir import JOB_FILE, claim, record_job, say, set_aside
from ..prompts import format_talent, routing_messages, routing_view
from ..precision import autocast, resolve_compute_dtype
from ..rollout import EpisodeSpec, Knowledge, LLMPolicy, RolloutSettings, run_episodes
from ..tracking import NullTracker, redact
from ..trajectories import Trajectory
from .advantages import (aem_eta, aem_modulate, execution_advantages, matched_divergence, response_surprisal, routing_advantages,
                         zero_variance_mask)
from .loss import ppo_clip_loss, token_advantages
from .samples import Sample, TrieCache, chat_prompt_ids, collate, completion_ids_of, execution_samples, score_completions, token_logprobs
from .seeding import derive_seed

META_FILE = "talentrl_meta.json"
STATE_FILE = "trainer_state.json"


@dataclass
class Group:
    """One task of a step: its arms (talent interventions), their routing samples and rollouts."""

    index: int
    "Global index of the task within the step (seeds derive from it, so sharding never changes them)."
    task: Task
    talents: list[Optional[str]] = field(default_factory=list)
    "Talent of each arm (None: no talent)."
    seeds: list[int] = field(default_factory=list)
    "Seed of rollout j, shared by every arm."
    goal: str = ""
    menu_ids: list[str] = field(default_factory=list)
    menu_probs: list[float] = field(default_factory=list)
    "The policy's routing distribution over the menu."
    route_samples: list[Optional[Sample]] = field(default_factory=list)
    "Routing sample of each arm (None for the no-talent arm and in the flat baseline)."
    trajs: list[Trajectory] = field(default_factory=list)
    "Arm-major: rollout j of arm k at k * (G/M) + j."
    specs: list[EpisodeSpec] = field(default_factory=list)

    @property
    def arm_of(self) -> list[int]:
        n = len(self.trajs) // max(len(self.talents), 1)
        return [i // n for i in range(len(self.trajs))]


@dataclass
class StepBatch:
    """Everything one update used: groups (with rollouts) and the samples that carry loss."""

    step: int
    groups: list[Group]
    samples: list[Sample]
    stats: dict[str, float]


# --------------------------------------------------------------------------------------------------------------
# The trainer


def own_precision_accelerator(cpu: bool):
    """An Accelerator that leaves precision to ``precision.autocast`` (``mixed_precision="no"``).

    Accelerate keeps one ``AcceleratorState`` per process: after a TRL/Trainer run in the same process with
    ``bf16=True`` (SFT under Dagster's in-process executor, a notebook, the test suite) a new Accelerator would
    inherit that state and wrap the RL model's forward in bf16 autocast, whatever ``model.compute_dtype`` says, and
    rollout and training log-probs would no longer match. Such a state is reset; the distributed one is kept.
    ``step_scheduler_with_optimizer=False``: accelerate would otherwise step the schedule once per process.
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    if AcceleratorState._shared_state.get("_mixed_precision", "no") != "no":
        AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(cpu=cpu, mixed_precision="no", step_scheduler_with_optimizer=False)


class RLTrainer:
    def __init__(self, cfg: TalentRLConfig, family, knowledge: Knowledge, init_checkpoint: str, out_dir: Path,
                 tracker=None, progress: bool = True):
        from accelerate.utils import set_seed

        self.cfg, self.rl = cfg, cfg.rl
        self.family, self.knowledge = family, knowledge
        self.init_checkpoint = str(init_checkpoint)
        self.out_dir = Path(out_dir)
        self.work_dir = self.out_dir.with_name(self.out_dir.name + ".work")
        check_config(cfg)
        if self.rl.evolve_every > 0:
            from .evolve import library_of

            library_of(knowledge)  # fail before any compute: evolution needs a LanceDB-backed knowledge
        device = cfg.model.device
        cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        self.acc = own_precision_accelerator(cpu)
        self.main = self.acc.is_main_process
        self.tracker = tracker if (tracker is not None and self.main) else NullTracker()
        self.progress = progress and self.main
        set_seed(self.rl.seed)

        from ..models import load_model

        model, self.tok = load_model(self.init_checkpoint, cfg.model, device="cpu")
        self.ref_model = None
        if cfg.model.lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=cfg.model.lora_r, lora_alpha=2 * cfg.model.lora_r,
                                                     task_type="CAUSAL_LM", target_modules="all-linear"))
        elif self.rl.beta_kl > 0:
            from ..models import load_model as _lm

            self.ref_model = _lm(self.init_checkpoint, cfg.model, device="cpu")[0].eval().requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.rl.lr, betas=(0.9, 0.95), weight_decay=self.rl.weight_decay)
        from transformers import get_linear_schedule_with_warmup

        total = self.rl.steps * self.rl.ppo_epochs * self.rl.mini_batches  # optimizer steps
        sched = get_linear_schedule_with_warmup(opt, min(self.rl.warmup_steps, total), max(total, 1))
        self.model, self.opt, self.sched = self.acc.prepare(model, opt, sched)
        if self.ref_model is not None:
            self.ref_model.to(self.acc.device)
        self.params = params
        # Rollout, routing scores and the update share one autocast dtype: PPO ratios compare like with like.
        self.compute_dtype = resolve_compute_dtype(cfg.model.compute_dtype, self.acc.device)
        self.vocab = self.acc.unwrap_model(self.model).get_output_embeddings().weight.shape[0]
        self.tries = TrieCache(self.tok)

        from ..agent import make_generator
        from ..generation import TransformersGenerator

        gen = make_generator(cfg, self.acc.unwrap_model(self.model), self.tok, self.init_checkpoint)
        # vLLM constrains through structured outputs and returns processed log-probs, so both backends train the
        # policy that sampled (generation.VLLMGenerator).
        constrained = cfg.model.decoding == Decoding.constrained
        # The generator keeps the last (max_context - max_new_tokens) prompt tokens: samples must too.
        self.keep = gen.max_context - cfg.model.max_new_tokens if isinstance(gen, TransformersGenerator) else None
        self.policy = LLMPolicy(gen, self.tok, cfg.model.max_new_tokens, cfg.model.temperature, constrained, name="rl")
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

    # -- helpers ---------------------------------------------------------------------------------------------

    @property
    def world(self) -> int:
        return self.acc.num_processes

    def unwrapped(self):
        return self.acc.unwrap_model(self.model)

    def _sum(self, values: dict[str, float]) -> dict[str, float]:
        """Sum named floats over processes (every process passes the same keys)."""
        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.acc.device)
        if self.world > 1:
            t = self.acc.reduce(t, reduction="sum")
        return dict(zip(keys, t.tolist()))

    def _max(self, x: int) -> int:
        if self.world == 1:
            return x
        return int(self.acc.gather(torch.tensor([x], device=self.acc.device)).max().item())

    # -- 1. tasks ------------------------------------------------------------------------------------------

    def step_tasks(self, step: int) -> list[tuple[int, Task]]:
        """This process's (global index, task) pairs of ``step``: the same draw on every process and every run."""
        rng = random.Random(derive_seed(self.rl.seed, "tasks", step))
        n = self.rl.tasks_per_step
        idx = rng.sample(range(len(self.pool)), n) if n <= len(self.pool) else [rng.randrange(len(self.pool)) for _ in range(n)]
        self.step_all_tasks = [self.pool[i] for i in idx]
        mine = [(g, self.pool[i]) for g, i in enumerate(idx) if g % self.world == self.acc.process_index]
        if hasattr(self.family, "prepare") and mine:  # TextWorld: generate games missing from the cache
            self.family.prepare([t for _, t in mine], workers=1, progress=False)
        return mine

    def _goal(self, task: Task) -> tuple[str, str]:
        """(goal, what the router sees of the first observation) of ``task``, read once from a reset."""
        if task.task_id not in self._goals:
            if self._goal_env is None:
                self._goal_env = self.family.make()
            first = self._goal_env.reset(task)
            goal = self._goal_env.goal()
            self._goals[task.task_id] = (goal, routing_view(goal, first, self.settings.routing_obs_chars))
        return self._goals[task.task_id]

    # -- 2. route ------------------------------------------------------------------------------------------

    def route(self, step: int, tasks: list[tuple[int, Task]]) -> list[Group]:
        """Arms of every group: the sampled talent, the next most likely ones, optionally no talent."""
        groups = []
        for g, task in tasks:
            base = derive_seed(self.rl.seed, "rollout", step, g) % 2**40
            groups.append(Group(g, task, seeds=[base + j for j in range(self.per_arm)]))
        if self.flat:
            for gr in groups:
                gr.talents, gr.route_samples = [None], [None]
            return groups
        candidates: list[Sample] = []
        for gr in groups:
            gr.goal, seen = self._goal(gr.task)
            menu = self.knowledge.menu(gr.task.env)
            if len(menu) < self.n_talent_arms:
                raise ValueError(
                    f"env {gr.task.env}: the talent menu has {len(menu)} talents but {self.n_talent_arms} talent arms are "
                    f"needed (rl.n_arms={self.rl.n_arms}, no_talent_arm={self.rl.no_talent_arm}); lower rl.n_arms "
                    "or train the flat baseline (rl.flat_baseline=true)"
                )
            gr.menu_ids = [t.talent_id for t in menu]
            prompt = chat_prompt_ids(self.tok, routing_messages(gr.task.env, gr.goal, menu, seen), self.keep)
            allowed = [format_talent(t.shown) for t in menu]
            for t in menu:
                candidates.append(Sample("route", prompt, completion_ids_of(self.tok, format_talent(t.shown)), [], allowed, gr.index))
        model = self.unwrapped()
        model.eval()
        with autocast(self.compute_dtype, self.acc.device):
            scores = score_completions(model, self.tok, candidates, self.vocab, self.cfg.model.temperature,
                                       self.rl.micro_batch_size, self.tries)
        pos = 0
        for gr in groups:
            n = len(gr.menu_ids)
            cand, sc = candidates[pos:pos + n], scores[pos:pos + n]
            pos += n
            seq = torch.tensor([sum(s) for s in sc], dtype=torch.float64)  # log π(talent) under the menu mask
            probs = torch.softmax(seq, 0)  # already sums to 1 up to rounding: renormalise
            gr.menu_probs = probs.tolist()
            gen = torch.Generator().manual_seed(derive_seed(self.rl.seed, "route", step, gr.index) % 2**63)
            first = int(torch.multinomial(probs, 1, generator=gen).item())
            rest = sorted((i for i in range(n) if i != first), key=lambda i: (-gr.menu_probs[i], i))
            chosen = [first] + rest[: self.n_talent_arms - 1]
            gr.talents = [gr.menu_ids[i] for i in chosen] + ([None] if self.rl.no_talent_arm else [])
            gr.route_samples = []
            for k, i in enumerate(chosen):
                s = cand[i]
                gr.route_samples.append(Sample("route", s.prompt_ids, s.completion_ids, sc[i], s.allowed, gr.index, k, -1))
            if self.rl.no_talent_arm:
                gr.route_samples.append(None)
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
        rl = self.rl
        samples: list[Sample] = []
        st: dict[str, float] = {"groups": 0, "groups_zero_var": 0, "groups_kept": 0, "route_abs_sum": 0.0,
                                "exec_abs_sum": 0.0, "exec_abs_n": 0, "entropy_sum": 0.0, "p_first_sum": 0.0,
                                "divergence_sum": 0.0, "groups_tied": 0}
        for k in range(self.n_arms):
            st[f"arm{k + 1}_reward_sum"] = 0.0
            st[f"arm{k + 1}_n"] = 0
        for gr in groups:
            R = np.array([t.final_reward for t in gr.trajs], dtype=np.float64)  # (G,) returns, penalties included
            arms = np.array(gr.arm_of)  # (G,)
            st["groups"] += 1
            for k in range(self.n_arms):
                st[f"arm{k + 1}_reward_sum"] += float(R[arms == k].sum())
                st[f"arm{k + 1}_n"] += int((arms == k).sum())
            if gr.menu_probs:
                p = np.asarray(gr.menu_probs)
                st["entropy_sum"] += float(-(p * np.log(np.clip(p, 1e-30, 1.0))).sum())
                st["p_first_sum"] += float(p[gr.menu_ids.index(gr.talents[0])])
            acts = [[x.action for x in t.steps if not x.action.startswith("talent:")] for t in gr.trajs]
            st["divergence_sum"] += matched_divergence([[a for a, k in zip(acts, arms) if k == arm] for arm in range(self.n_arms)])
            if zero_variance_mask([R])[0]:
                st["groups_zero_var"] += 1
                if rl.filter_zero_var:
                    continue
            st["groups_kept"] += 1
            a_route = routing_advantages([R[arms == k] for k in range(self.n_arms)], rl.eps)  # (M,)
            st["groups_tied"] += int(self.n_talent_arms > 0 and not np.any(a_route))
            a_exec = execution_advantages(R, arms, rl.eps, rl.exec_group)  # (G,)
            ex = [execution_samples(t, self.tok, self.keep, self.policy.constrained, gr.index, int(arms[i]), i)
                  for i, t in enumerate(gr.trajs)]
            if rl.aem:
                a_exec = aem_modulate(a_exec, self._surprisal(ex), aem_eta(step, rl.steps, rl.aem_eta0), rl.aem_clip, rl.eps)
            # copies: the group keeps its routing samples unchanged (advantages are per build)
            group_samples = [dataclasses.replace(s) for s in gr.route_samples if s is not None] if rl.alpha_route > 0 else []
            group_samples += [s for traj_samples in ex for s in traj_samples]
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

    @staticmethod
    def _surprisal(ex: list[list[Sample]]) -> np.ndarray:
        """u_i: mean NLL of trajectory i's execution tokens under the rollout policy (AEM, DESIGN.md §5)."""
        rows = [(i, s.old_logprobs) for i, ss in enumerate(ex) for s in ss]
        u = np.zeros(len(ex))
        if not rows:
            return u
        T = max(len(lp) for _, lp in rows)
        lp = np.zeros((len(rows), T))
        m = np.zeros((len(rows), T))
        for r, (_, x) in enumerate(rows):
            lp[r, :len(x)], m[r, :len(x)] = x, 1.0
        labels, vals = response_surprisal(lp, m, [i for i, _ in rows])
        u[:] = vals.mean()
        u[labels] = vals
        return u

    # -- 6.–7. loss and step -------------------------------------------------------------------------------

    def _units(self, samples: Sequence[Sample]) -> float:
        """What the aggregation divides by: completion tokens (token_mean) or sequences (seq_mean_token_sum)."""
        if getattr(self.rl.token_agg, "value", self.rl.token_agg) == "token_mean":
            return float(sum(len(s.completion_ids) for s in samples))
        return float(sum(1 for s in samples if s.completion_ids))

    def _dummy_loss(self) -> torch.Tensor:
        """A zero loss through the whole model: keeps DDP's collectives aligned when this process has fewer
        micro-batches than another (after zero-variance filtering the shards differ in size)."""
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        ids = torch.full((1, 2), pad, dtype=torch.long, device=self.acc.device)
        with autocast(self.compute_dtype, self.acc.device):
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1, use_cache=False)
        return out.logits.float().sum() * 0.0

    @torch.no_grad()
    def _ref_logprobs(self, batch) -> torch.Tensor:
        if self.ref_model is not None:
            return token_logprobs(self.ref_model, batch, self.cfg.model.temperature)
        model = self.unwrapped()
        with model.disable_adapter():  # LoRA: the frozen base model is the reference
            return token_logprobs(model, batch, self.cfg.model.temperature)

    def mini_batches(self, samples: list[Sample], step: int) -> list[list[Sample]]:
        """``rl.mini_batches`` parts of this process's samples: a seeded shuffle (step, rank), dealt round-robin."""
        k = self.rl.mini_batches
        if k == 1:
            return [list(samples)]
        order = list(samples)
        random.Random(derive_seed(self.rl.seed, step, "mini-batches", self.acc.process_index)).shuffle(order)
        return [order[i::k] for i in range(k)]

    def update(self, samples: list[Sample], step: int = 0) -> dict[str, float]:
        """``ppo_epochs`` passes, each ``mini_batches`` AdamW steps (PPO-clip loss, accumulated over micro-batches)."""
        rl = self.rl
        parts = self.mini_batches(samples, step)
        n_opt = rl.ppo_epochs * len(parts)
        acc = {"tokens": 0.0, "loss": 0.0, "clip": 0.0, "kl": 0.0, "kl_ref": 0.0, "ctok": 0.0, "grad_norm": 0.0, "zero_adv": 0.0}
        n_samples = self._sum({"samples": len(samples)})["samples"]
        if n_samples == 0:  # every group of every process was filtered
            for _ in range(n_opt):
                self.sched.step()
            return {"rl/skipped": 1.0, "rl/lr": self.sched.get_last_lr()[0], "perf/update_tokens": 0.0}
        self.model.train()
        for _ in range(rl.ppo_epochs):
            for part in parts:
                self._optimizer_step(part, acc)
        self.opt.zero_grad(set_to_none=True)
        self._sync_generator()
        tot = self._sum({k: v for k, v in acc.items() if k != "grad_norm"})
        ctok = max(tot["ctok"], 1.0)
        out = {"rl/loss": tot["loss"] / n_opt, "rl/clip_frac": tot["clip"] / ctok, "rl/kl": tot["kl"] / ctok,
               "rl/grad_norm": acc["grad_norm"] / n_opt, "rl/lr": self.sched.get_last_lr()[0],
               "rl/samples": n_samples, "rl/skipped": 0.0, "perf/update_tokens": tot["tokens"],
               "rl/zero_adv_skipped_share": tot["zero_adv"] / (n_samples * rl.ppo_epochs)}
        if rl.beta_kl > 0:
            out["rl/kl_ref"] = tot["kl_ref"] / ctok
        return out

    def _optimizer_step(self, samples: Sequence[Sample], acc: dict[str, float]) -> None:
        """One AdamW step on ``samples`` (every process calls it the same number of times: collectives align)."""
        rl = self.rl
        temp = self.cfg.model.temperature
        # The loss is a sum over micro-batches, so order is free: samples sorted by their tokens put a task's turns side
        # by side, whose common prefix is then read once (rl.share_prefix); else micro-batches of similar length.
        if rl.share_prefix:
            ordered = sorted(samples, key=lambda s: s.prompt_ids + s.completion_ids)
        else:
            ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
        route = [s for s in ordered if s.kind == "route"]
        exe = [s for s in ordered if s.kind == "exec"]
        units = self._sum({"route": self._units(route), "exec": self._units(exe), "samples": len(samples)})
        mb = rl.micro_batch_size
        micro = [("route", route[i:i + mb]) for i in range(0, len(route), mb)] + [("exec", exe[i:i + mb]) for i in range(0, len(exe), mb)]
        if rl.skip_zero_advantage and rl.beta_kl == 0:
            # -min(ρA, clip(ρ)A) is 0 with a 0 gradient where A = 0, and ``units`` above still counts those samples in
            # the aggregate's denominator. A micro-batch whose every advantage is 0 therefore adds exactly 0: skipping
            # it (and only whole ones, so the others keep their padding) leaves the update bitwise as it was. In a
            # TalentRL group whose arms each succeed or fail as a whole, every execution advantage is 0.
            kept = [(kind, chunk) for kind, chunk in micro if any(s.advantage != 0 for s in chunk)]
            acc["zero_adv"] += sum(len(c) for _, c in micro) - sum(len(c) for _, c in kept)
            micro = kept
        # at least one pass: with every sample skipped, a zero loss still gives every weight a zero gradient, so
        # AdamW's step (momentum, weight decay) is the one the full computation would take
        n_micro = max(self._max(len(micro)), 1)
        self.opt.zero_grad(set_to_none=True)
        if units["samples"] == 0:  # an empty mini-batch on every process: keep the schedule's length
            self.sched.step()
            return
        for i in range(n_micro):
            sync = i == n_micro - 1
            with nullcontext() if sync or self.world == 1 else self.acc.no_sync(self.model):
                if i >= len(micro):
                    loss = self._dummy_loss()
                else:
                    kind, chunk = micro[i]
                    batch = collate(chunk, self.tok, self.vocab, self.acc.device, self.tries, rl.share_prefix)
                    with autocast(self.compute_dtype, self.acc.device):
                        logp = token_logprobs(self.model, batch, temp)  # (B, T), carries the gradient
                        ref = self._ref_logprobs(batch) if rl.beta_kl > 0 else None
                    loss_k, m = ppo_clip_loss(logp, batch.old_logprobs, batch.advantages, batch.mask, rl.clip_eps,
                                              rl.token_agg, ref, rl.beta_kl)
                    # Weight so that the sum over micro-batches and processes is the mini-batch-wide aggregate;
                    # × world because DDP averages gradients over processes.
                    w = self._units(chunk) / units[kind] * self.world * (rl.alpha_route if kind == "route" else 1.0)
                    loss = loss_k * w
                    n_tok = batch.n_completion_tokens
                    acc["tokens"] += batch.n_tokens
                    acc["ctok"] += n_tok
                    acc["loss"] += loss_k.item() * w / self.world
                    acc["clip"] += m["clip_frac"] * n_tok
                    acc["kl"] += m["approx_kl"] * n_tok
                    acc["kl_ref"] += m.get("kl_ref", 0.0) * n_tok
                self.acc.backward(loss)
        norm = self.acc.clip_grad_norm_(self.params, rl.max_grad_norm if rl.max_grad_norm > 0 else float("inf"))
        acc["grad_norm"] += float(norm)
        self.opt.step()
        self.sched.step()

    def _sync_generator(self) -> None:
        """vLLM backend: push the updated weights into the engine (the transformers backend shares the model)."""
        gen = self.policy.gen
        if not hasattr(gen, "load_weights"):
            return
        model = self.unwrapped()  # pragma: no cover - GPU only below
        if not self.cfg.model.lora:
            gen.load_weights(model)
            return
        model.merge_adapter()  # LoRA: vLLM holds plain weights, so merge, push the base names, unmerge

        class _Merged:
            @staticmethod
            def state_dict():
                sd = {}
                for k, v in model.state_dict().items():
                    if "lora_" in k:
                        continue
                    sd[k.replace("base_model.model.", "").replace(".base_layer", "")] = v
                return sd

        try:
            gen.load_weights(_Merged())
        finally:
            model.unmerge_adapter()

    # -- one update, top to bottom ---------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
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

        from .evolve import evolve_step, pin_version

        trajs = [t for g in groups for t in g.trajs]
        if self.world > 1:
            trajs = gather_object(trajs)
        payload: list = [None]
        if self.main:
            self.knowledge, m = evolve_step(self, trajs, self.step_all_tasks, step)
            payload = [(self.knowledge.version, m)]
        if self.world > 1:
            broadcast_object_list(payload)
        version, m = payload[0]
        if not self.main and version != self.knowledge.version:
            self.knowledge = pin_version(self.knowledge, version)
        return m

    def _metrics(self, groups, st, upd, t_roll, t_upd, t_step) -> dict[str, float]:
        trajs = [t for g in groups for t in g.trajs]
        local = dict(st)
        local.update({
            "episodes": len(trajs), "reward_sum": sum(t.final_reward for t in trajs), "success": sum(t.success for t in trajs),
            "env_steps": sum(sum(1 for s in t.steps if not s.action.startswith("talent:")) for t in trajs),
            "invalid": sum(t.n_invalid for t in trajs), "errors": sum(1 for t in trajs if t.error),
            "gen_tokens": sum(s.completion_tokens for t in trajs for s in t.steps),
        })
        tot = self._sum(local)
        n_ep, n_g = max(tot["episodes"], 1), max(tot["groups"], 1)
        m = {
            "rollout/reward": tot["reward_sum"] / n_ep,
            "rollout/success": tot["success"] / n_ep,
            "rollout/episode_len": tot["env_steps"] / n_ep,
            "rollout/invalid_share": tot["invalid"] / max(tot["env_steps"], 1),
            "rollout/errors": tot["errors"],
            "rl/groups_kept": tot["groups_kept"],
            "rl/groups_zero_var": tot["groups_zero_var"],
            "rl/adv_exec_abs": tot["exec_abs_sum"] / max(tot["exec_abs_n"], 1),
            "perf/rollout_s": t_roll,
            "perf/update_s": t_upd,
            "perf/step_s": t_step,
            "perf/env_steps_per_s": tot["env_steps"] / max(t_roll, 1e-9),
            "perf/gen_tokens_per_s": tot["gen_tokens"] / max(t_roll, 1e-9),
            "perf/tokens_per_s": upd.pop("perf/update_tokens") * 1.0 / max(t_upd, 1e-9),
        }
        for k in range(self.n_arms):
            m[f"rollout/reward_arm{k + 1}"] = tot[f"arm{k + 1}_reward_sum"] / max(tot[f"arm{k + 1}_n"], 1)
        if not self.flat:
            m["route/entropy"] = tot["entropy_sum"] / n_g
            m["route/p_sampled"] = tot["p_first_sum"] / n_g
            m["route/contrast"] = tot["route_abs_sum"] / max(tot["groups_kept"], 1)
            # talent sensitivity: matched rollouts whose actions differ between arms; kept groups with no contrast
            m["route/divergence"] = tot["divergence_sum"] / n_g
            if tot["groups_kept"]:  # undefined when every group was filtered (absent, not a misleading 0)
                m["route/tied_share"] = tot["groups_tied"] / tot["groups_kept"]
        m.update(upd)
        return m

    # -- checkpoints -------------------------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        "How this run names itself in messages."
        return "rl_flat_grpo" if self.rl.flat_baseline else "rl"

    def checkpoints(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.work_dir.glob("checkpoint-*"):
            if p.is_dir() and p.name.split("-")[-1].isdigit() and (p / STATE_FILE).exists():
                out.append((int(p.name.split("-")[-1]), p))
        return sorted(out)

    def save_checkpoint(self, step: int) -> Path:
        """accelerate state (model, optimizer, scheduler, RNG per process) + trainer_state.json, atomically:
        written into a temporary folder, renamed to ``checkpoint-<step>`` only when complete."""
        final = self.work_dir / f"checkpoint-{step}"
        tmp = self.work_dir / f".checkpoint-{step}.tmp"
        if self.main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self.acc.wait_for_everyone()
        with disk_full_named(final, "writing the checkpoint"):
            self.acc.save_state(str(tmp))
        self.acc.wait_for_everyone()
        if self.main:
            record_job(self.work_dir, self.job())
            write_json(tmp / STATE_FILE, {"step": step, "library_version": getattr(self.knowledge, "version", None),
                                          "history": self.history, "init_checkpoint": self.init_checkpoint,
                                          "world_size": self.world})
            seal(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            if self.rl.keep_checkpoints > 0:
                for _, old in self.checkpoints()[: -self.rl.keep_checkpoints]:
                    shutil.rmtree(old, ignore_errors=True)
        self.acc.wait_for_everyone()
        return final

    def job(self) -> dict:
        """What a checkpoint must match to be resumed: the same job (config, initial weights, library); computed
        once (it hashes the initial weights)."""
        if getattr(self, "_job", None) is None:
            self._job = self._describe_job()
        return self._job

    def _describe_job(self) -> dict:
        rl = {k: v for k, v in dataclasses.asdict(self.rl).items() if k not in ("resume", "checkpoint_every", "keep_checkpoints")}
        env = {k: v for k, v in dataclasses.asdict(self.cfg.env).items() if k != "cache_dir"}  # where, not what
        return {"rl": rl, "env": env, "model": dataclasses.asdict(self.cfg.model),
                "init": model_digest(self.init_checkpoint), "library_version": self.initial_library_version}

    def maybe_resume(self) -> int:
        """Resume from the newest checkpoint of this job; another job's folder is moved aside (``workdir.claim``)."""
        if self.main:
            claim(self.work_dir, self.job(), self.cfg.keep_previous_runs, self.stage,
                  holds_work=lambda w: bool(self.checkpoints()))
            for orphan in self.work_dir.glob(".checkpoint-*.tmp"):
                shutil.rmtree(orphan, ignore_errors=True)
            remove_orphans(self.out_dir)
            if self.rl.resume:  # verified once, by the main process: a damaged newest one is named and set aside
                newest_sound(self.checkpoints(), self.stage, say)
        self.acc.wait_for_everyone()
        ckpts = self.checkpoints() if self.rl.resume else []
        if not ckpts:
            return 0
        step, path = ckpts[-1]
        self.acc.load_state(str(path))
        state = read_json(path / STATE_FILE)
        self.history = list(state.get("history", []))
        saved = state.get("library_version")
        if saved is not None and saved != getattr(self.knowledge, "version", None) and getattr(self.knowledge, "lib", None) is not None:
            from .evolve import pin_version

            self.knowledge = pin_version(self.knowledge, saved)  # continue on the version the run had reached
        self.start_step, self.resumed_from = int(state["step"]), str(path)
        return self.start_step

    def weights_digest(self) -> str:
        h = hashlib.sha256()
        for name, p in sorted(self.unwrapped().state_dict().items()):
            h.update(name.encode())
            h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()

    def save_final(self, meta: dict) -> None:
        self.acc.wait_for_everyone()
        if self.main:
            model = self.unwrapped()
            if self.cfg.model.lora:
                model = model.merge_and_unload()
            for p in model.parameters():
                if not torch.isfinite(p).all():
                    raise FloatingPointError("RL produced non-finite weights; lower rl.lr")
            job = self.job()
            set_aside(self.out_dir, job, self.cfg.keep_previous_runs, self.stage)
            with disk_full_named(self.out_dir, "writing the model"), atomic_dir(self.out_dir) as tmp:
                model.save_pretrained(tmp)
                self.tok.save_pretrained(tmp)
                write_json(tmp / META_FILE, meta)
                write_json(tmp / JOB_FILE, job)
        self.acc.wait_for_everyone()

    # -- the run ----------------------------------------------------------------------------------------------

    def run(self) -> dict:
        t0 = time.time()
        start = self.maybe_resume()
        bar = tqdm(total=self.rl.steps, initial=start, desc="rl" + ("-flat" if self.flat else ""), disable=not self.progress)
        try:
            for step in range(start, self.rl.steps):
                m = self.train_step(step)
                self.history.append({"step": step + 1, **m})
                self.tracker.log(m, step=step + 1)
                bar.update(1)
                bar.set_postfix(reward=f"{m['rollout/reward']:.3f}", succ=f"{m['rollout/success']:.2f}")
                if self.rl.checkpoint_every and (step + 1) % self.rl.checkpoint_every == 0 and step + 1 < self.rl.steps:
                    self.save_checkpoint(step + 1)
        finally:
            bar.close()
            if self._goal_env is not None:
                self._goal_env.close()
        digest = self.weights_digest()
        result = {
            "steps": self.rl.steps,
            "start_step": start,
            "resumed_from": self.resumed_from,
            "flat_baseline": self.flat,
            "n_arms": self.n_arms,
            "world_size": self.world,
            "library_version": getattr(self.knowledge, "version", None),
            "init_checkpoint": self.init_checkpoint,
            "out_dir": str(self.out_dir),
            "reward_curve": [h["rollout/reward"] for h in self.history],
            "success_curve": [h["rollout/success"] for h in self.history],
            "final_metrics": self.history[-1] if self.history else {},
            "weights_digest": digest,
            "seconds": round(time.time() - t0, 2),
        }
        self.save_final({**result, "stage": "rl", "config": redact(self.cfg), "history": self.history})
        return result


def check_config(cfg: TalentRLConfig) -> None:
    """Cross-field checks the RL stage needs beyond ``RLConfig.__post_init__``; messages say what to change."""
    if cfg.model.temperature <= 0:
        raise ValueError("RL samples its rollouts: set model.temperature > 0 (greedy groups carry no contrast)")
    if cfg.model.backend == Backend.openai:
        raise ValueError("model.backend=openai cannot be trained: use transformers (CPU/GPU) or vllm (GPU)")
    if cfg.rl.beta_kl < 0 or cfg.rl.alpha_route < 0:
        raise ValueError("rl.beta_kl and rl.alpha_route are loss weights: make them >= 0")


def train_rl(cfg: TalentRLConfig, family, knowledge: Knowledge, init_checkpoint: str, out_dir: Path,
             tracker=None, progress: bool = True) -> dict:
    """Train with contrastive routing RL + GRPO execution RL (or the flat baseline); returns run metadata.

    Resumes from the last ``<out_dir>.work/checkpoint-<step>`` when ``rl.resume``; writes the final model
    (``save_pretrained`` + tokenizer + ``talentrl_meta.json``) atomically into ``out_dir``. The tracker (any
    object with ``.log(dict, step)`` and ``.finish(exit_code)``; a null object by default) is finished in ``finally``,
    with exit code 1 when training raised.
    """
    tracker = tracker if tracker is not None else NullTracker()
    done = False
    try:
        trainer = RLTrainer(cfg, family, knowledge, init_checkpoint, Path(out_dir), tracker, progress)
        result = trainer.run()
        done = True
        return result
    finally:
        tracker.finish(exit_code=0 if done else 1)  # a crashed run is marked failed


if __name__ == "__main__":  # the CLI lives in rl/cli.py; this keeps `python -m talentrl_core.rl.trainer` working
    import runpy

    runpy.run_module("talentrl_core.rl.cli", run_name="__main__", alter_sys=True)
