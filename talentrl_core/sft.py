"""Talent-aware SFT (DESIGN.md §4, issue 5): data builder + TRL ``SFTTrainer`` with assistant-only loss.

From each *successful* trajectory:
  * one routing sample: task + talent menu → ``<talent>ID</talent>`` (label = the trajectory's talent from
    distillation);
  * one execution sample per step whose skill context comes from ``Knowledge.context`` under that talent —
    the very function the rollout loop calls at inference, on the same library version.
The builder reports and enforces: share of execution samples with ≥ 1 skill, label distribution,
duplicate share. The flat-SkillBank implementation this replaces had skills in ~1% of its samples.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .checkpoints import claim_work_dir, commit_staged, model_digest, newest_sound, step_folders, write_final
from .config import ModelConfig, SFTConfig
from .io import disk_full_named, write_json
from .prompts import (CHAT_TEMPLATE_KWARGS, ExecContext, execution_messages, format_action, format_talent, routing_messages,
                      routing_view, shown_id)
from .rl.seeding import derive_seed
from .rollout import Knowledge, action_completions
from .trajectories import Trajectory
from .workdir import say


@dataclass
class SFTData:
    samples: list[dict]
    "Each {'messages': [system, user, assistant], 'kind': 'route'|'exec', 'task_id', 'talent_id', 'skill_ids'}."
    report: dict = field(default_factory=dict)


def step_observations(t: Trajectory) -> list[str]:
    """The observation shown *before* each step (initial observation, then each step's answer)."""
    obs = [t.initial_observation]
    for s in t.steps[:-1]:
        obs.append(s.observation)
    return obs


def forced(env: str, admissible: Optional[Sequence[str]]) -> bool:
    """Whether constrained decoding allows exactly one completion at this step (it then takes it unasked).

    >>> forced("textworld", ["go north", "look", "inventory"]), forced("textworld", ["go north", "go east"])
    (True, False)
    >>> forced("qa", None)
    False
    """
    allowed = action_completions(env, list(admissible) if admissible is not None else None)
    return allowed is not None and len(allowed) == 1


def execution_samples(t: Trajectory, knowledge: Knowledge, talent_id: Optional[str], history: int, obs_chars: int,
                      skip_forced: bool = False) -> list[dict]:
    ctx = knowledge.context(t.env, t.goal, t.task_type, talent_id, True)
    out = []
    steps = t.env_steps()
    obs_before = [t.initial_observation] + [s.observation for s in steps[:-1]]
    hist: list[tuple[str, str]] = []
    for s, obs in zip(steps, obs_before):
        if not s.valid or not s.action or (skip_forced and forced(t.env, s.admissible)):
            hist.append((obs, s.action or s.completion))
            continue
        ec = ExecContext(env=t.env, goal=t.goal, observation=obs, talent=ctx.talent, skills=ctx.skills,
                         history=hist[-history:] if history else (), admissible=s.admissible, obs_chars=obs_chars,
                         actions=[a for _, a in hist])
        msgs = execution_messages(ec) + [{"role": "assistant", "content": format_action(t.env, s.action)}]
        out.append({"messages": msgs, "kind": "exec", "task_id": t.task_id, "talent_id": talent_id or "",
                    "skill_ids": list(ctx.skill_ids)})
        hist.append((obs, s.action))
    return out


def routing_label(knowledge: Knowledge, t: Trajectory) -> Optional[str]:
    """The routing target of ``t``'s task (``LibraryKnowledge.routing_label``; other knowledge: the trajectory's label)."""
    fn = getattr(knowledge, "routing_label", None)
    return fn(t) if fn is not None else knowledge.label_for(t)


def rendered_flat(t: Trajectory, share: float, seed: int = 0) -> bool:
    """Whether ``t``'s execution samples are rendered flat (``sft.flat_share``): a stable hash of the trajectory's
    uid and the seed, so the same data and seed give the same split on every machine.

    >>> rendered_flat(Trajectory("r", "textworld", "train", "t1", "x", "{}", traj_uid="a"), 0.0)
    False
    >>> rendered_flat(Trajectory("r", "textworld", "train", "t1", "x", "{}", traj_uid="a"), 1.0)
    True
    """
    return share > 0.0 and derive_seed(seed, t.traj_uid) / float(1 << 60) < share


def build_sft_data(
    trajs: Sequence[Trajectory],
    knowledge: Knowledge,
    cfg: SFTConfig,
    history: int = 2,
    obs_chars: int = 400,
    enforce: bool = True,
    routing_obs_chars: int = 0,
) -> SFTData:
    samples: list[dict] = []
    labels: Counter = Counter()
    n_succ = n_flat = 0
    routed: set[str] = set()
    for t in trajs:
        if not t.success or t.error:
            continue
        n_succ += 1
        talent = knowledge.label_for(t)
        labels[talent or "<none>"] += 1
        menu = knowledge.menu(t.env)
        route_to = routing_label(knowledge, t)
        if cfg.include_routing and route_to and menu and t.task_id not in routed:  # one routing sample per task
            routed.add(t.task_id)
            seen = routing_view(t.goal, t.initial_observation, routing_obs_chars)
            msgs = routing_messages(t.env, t.goal, menu, seen) + [{"role": "assistant", "content": format_talent(shown_id(menu, route_to))}]
            samples.append({"messages": msgs, "kind": "route", "task_id": t.task_id, "talent_id": route_to, "skill_ids": []})
        flat = rendered_flat(t, cfg.flat_share, cfg.seed)
        n_flat += flat
        samples.extend(execution_samples(t, knowledge, None if flat else talent, history, obs_chars, cfg.skip_forced))
    exec_s = [s for s in samples if s["kind"] == "exec"]
    with_skill = sum(1 for s in exec_s if s["skill_ids"])
    keys = [json.dumps(s["messages"], sort_keys=True) for s in samples]
    dup = 1 - len(set(keys)) / max(len(keys), 1)
    report = {
        "n_trajectories": len(trajs),
        "n_successful": n_succ,
        "n_samples": len(samples),
        "n_routing": len(samples) - len(exec_s),
        "n_execution": len(exec_s),
        "skill_context_share": with_skill / max(len(exec_s), 1),
        "label_distribution": dict(sorted(labels.items())),
        "flat_trajectories": n_flat,
        "duplicate_share": dup,
    }
    if enforce:
        if not samples:
            raise ValueError("SFT data is empty: no successful trajectories to learn from")
        if report["skill_context_share"] < cfg.min_skill_share:
            raise ValueError(
                f"only {report['skill_context_share']:.1%} of execution samples carry a skill "
                f"(sft.min_skill_share={cfg.min_skill_share}): check library.delta / the library version"
            )
        if dup > cfg.max_duplicate_share:
            raise ValueError(f"{dup:.1%} of SFT samples are duplicates (sft.max_duplicate_share={cfg.max_duplicate_share})")
    return SFTData(samples, report)


_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _render(tok, messages: list[dict], add_generation_prompt: bool = False) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt,
                                  **CHAT_TEMPLATE_KWARGS)
    return list(out["input_ids"])


def _common_suffix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def assistant_mask_by_prefix(tok, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of a chat sample for a template without ``{% generation %}`` markers (the official
    Qwen2.5, Qwen3 and Llama-3.1 templates): every assistant turn's tokens are what the template appends to the
    conversation before it rendered with the generation prompt — exactly what the model generates at inference —
    up to and including the end-of-turn token (``tok.eos_token``); the template's text after it is not labelled.

    Raises ValueError naming the turn when the template is not prefix-preserving for this sample.
    """
    full = _render(tok, messages)
    mask = [0] * len(full)
    eos = tok.eos_token_id
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _render(tok, messages[:i], add_generation_prompt=True)
        upto = _render(tok, messages[: i + 1])
        if full[: len(prompt)] != prompt or full[: len(upto)] != upto or upto[: len(prompt)] != prompt:
            raise ValueError(
                f"the chat template is not prefix-preserving at assistant turn {i}: rendering the conversation before it "
                "with the generation prompt is not a prefix of the rendered sample; give the template {% generation %} markers"
            )
        other = _render(tok, messages[:i] + [{**m, "content": m["content"] + " ~"}])
        end = len(upto) - _common_suffix(upto, other)  # where the assistant's own text stops
        tail = upto[end:]
        if eos is not None and eos in tail:
            end += tail.index(eos) + 1
        for j in range(len(prompt), max(end, len(prompt))):
            mask[j] = 1
    return full, mask


def tokenize_sample(tok, messages: list[dict], max_length: int) -> dict:
    """Chat-template token ids and the assistant-token mask (the loss mask) of one sample.

    A template with ``{% generation %}`` markers gives the mask directly; any other template gets it from the
    rendered prompt with and without each assistant turn (``assistant_mask_by_prefix``). A sample longer than
    ``max_length`` loses the start of its prompt, as generation does: the label (the assistant turn at the end)
    is never cut.
    """
    if _GENERATION_TAG.search(tok.chat_template or ""):
        out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                      **CHAT_TEMPLATE_KWARGS)
        ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    else:
        ids, mask = assistant_mask_by_prefix(tok, messages)
    if not any(mask):
        raise ValueError("the chat template marks no assistant tokens in this sample")
    return {"input_ids": ids[-max_length:], "assistant_masks": mask[-max_length:]}


def length_sorted_order(lengths: Sequence[int], per_step: int, steps: int, seed: int,
                        repeats: Optional[Sequence[int]] = None, first: int = 0,
                        first_rows: Optional[Sequence[int]] = None) -> list[int]:
    """Row order for ``steps`` optimizer steps of ``per_step`` rows: every step draws its rows at random (seeded
    epochs of permutations, as a shuffling sampler would), then sorts them by length, so the step's micro-batches
    hold similar lengths and pad little. The rows of a step, hence its gradient, are those of a random batch.
    ``repeats[i]`` (default 1) is how often row i comes in one epoch: a mixing weight, as in dataset interleaving.
    The first ``first`` steps draw from ``first_rows`` only (their own seeded epochs: a curriculum phase, e.g.
    ``sft.routing_warmup_steps``), the rest from all rows.

    Grouping by length *across* steps instead (transformers' LengthGroupedSampler) made batches of one sample
    kind and task type and broke learning on the demo (greedy success 0/200 vs 0.125; measured).

    >>> length_sorted_order([50, 10, 40, 30], per_step=2, steps=3, seed=0)
    [2, 0, 1, 3, 1, 0]
    >>> sorted(length_sorted_order([50, 10], per_step=4, steps=1, seed=0, repeats=[3, 1]))
    [0, 0, 0, 1]
    >>> length_sorted_order([50, 10, 40, 30], per_step=2, steps=2, seed=0, first=1, first_rows=[3])
    [3, 3, 2, 0]
    """
    import random

    rng = random.Random(seed)
    epoch = [i for i in range(len(lengths)) for _ in range(repeats[i] if repeats is not None else 1)]
    n_first = min(first, steps) if first_rows else 0
    order: list[int] = []
    for rows, n_steps in ((list(first_rows or ()), n_first), (epoch, steps - n_first)):
        pool: list[int] = []
        for _ in range(n_steps):
            while len(pool) < per_step:
                perm = list(rows)
                rng.shuffle(perm)
                pool += perm
            step, pool = pool[:per_step], pool[per_step:]
            order += sorted(step, key=lambda i: (lengths[i], i))
    return order


def training_order(data: SFTData, rows: list[dict], cfg: SFTConfig):
    """(the tokenised rows as a ``datasets.Dataset`` in training order, the routing warm-up's gate or None).

    With ``sft.routing_warmup_steps`` the order covers the warm-up's routing-only steps (its cap, with
    ``sft.routing_warmup_until``) and then ``max_steps`` steps of the mix, read through the gate
    (``routing_warmup.WarmupSampler``)."""
    from datasets import Dataset

    per_step = cfg.batch_size * cfg.grad_accum
    repeats = [cfg.routing_weight if smp["kind"] == "route" else 1 for smp in data.samples]
    routes = [i for i, smp in enumerate(data.samples) if smp["kind"] == "route"]
    order = length_sorted_order([len(r["input_ids"]) for r in rows], per_step, cfg.max_steps + cfg.routing_warmup_steps,
                                cfg.seed, repeats, first=cfg.routing_warmup_steps, first_rows=routes)
    gate = None
    if cfg.routing_warmup_steps:
        from .routing_warmup import WarmupGate

        gate = WarmupGate(cfg.routing_warmup_steps, cfg.max_steps, per_step, cfg.routing_warmup_until,
                          cfg.routing_warmup_check_every, [rows[i] for i in routes], cfg.seed)
    return Dataset.from_list(rows).select(order), gate


def warmup_report(history: list[dict], gate) -> dict:
    """How the routing warm-up went: its length in steps, whether a check ended it, and each check's accuracy."""
    checks = {h["step"]: h["routing_warmup_accuracy"] for h in history if "routing_warmup_accuracy" in h}
    return {"steps": gate.end if gate is not None else 0, "ended_by_check": bool(gate is not None and gate.passed),
            "checks": checks}


STAGING = ".staging-"
"Prefix of the folder a checkpoint is written into before it is renamed to ``checkpoint-<step>``."


def crash_safe_checkpoints(base):
    """``base`` (a transformers Trainer) writing each checkpoint into ``.staging-checkpoint-<step>`` and renaming
    it when complete (as RL does), so a kill or a full disk mid-write never leaves a ``checkpoint-*`` that cannot be
    resumed; a full disk is reported as one (``io.disk_full_named``)."""
    import shutil

    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

    class CrashSafeCheckpoints(base):
        def _save_checkpoint(self, model, trial):
            run_dir = Path(self.args.output_dir)
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            staging = run_dir / f"{STAGING}{name}"
            shutil.rmtree(staging, ignore_errors=True)
            self.args.output_dir = str(staging)
            try:
                with disk_full_named(run_dir / name, "writing the checkpoint"):
                    super()._save_checkpoint(model, trial)
            finally:
                self.args.output_dir = str(run_dir)
            if self.args.should_save:
                commit_staged(staging / name, run_dir / name)
                shutil.rmtree(staging, ignore_errors=True)
                rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit, use_mtime=True)

    return CrashSafeCheckpoints


def last_complete_checkpoint(work: Path, log=None) -> Optional[Path]:
    """The newest ``checkpoint-<step>`` in ``work`` that holds a trainer state and weights, and whose files verify
    (``checkpoints.newest_sound``: a damaged one is named and set aside). Incomplete ones (left by a version that
    wrote in place, or copied half) are removed, saying so."""
    import shutil

    complete = []
    for step, path in step_folders(work):
        if (path / "trainer_state.json").exists() and any(path.glob("*.safetensors")):
            complete.append((step, path))
        else:
            (log or say)(f"sft: {path} is incomplete (interrupted while it was written): removed")
            shutil.rmtree(path, ignore_errors=True)
    return newest_sound(complete, "sft", log or say)


def labelled_positions_trainer(base):
    """``base`` (TRL's SFTTrainer) with a loss that runs the LM head only where there is a label.

    An execution sample is ~450 prompt tokens and ~5 label tokens, so TRL's fused LM head (log-probs,
    entropy and top-1 over the 2k-token vocabulary at *every* position) cost more than the model body on the
    demo (measured: bf16 SFT step 3.1 s with it). The loss is the same mean token NLL over the labelled
    positions (or ``sum / num_items_in_batch`` under gradient accumulation, as TRL); entropy and token accuracy
    are logged over the same positions. Multi-process runs keep TRL's path (DDP needs the wrapped forward).
    """
    import torch

    class LabelledPositionsSFTTrainer(base):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if return_outputs or self.accelerator.num_processes > 1 or "labels" not in inputs:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            lm = self.accelerator.unwrap_model(model)
            lm = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
            labels = inputs["labels"][:, 1:]  # position p predicts token p + 1
            sel = labels != -100
            with self.accelerator.autocast():  # the wrapped forward would apply the mixed precision; we bypass it
                body = lm.model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                                position_ids=inputs.get("position_ids"), use_cache=False)
                hidden = body.last_hidden_state[:, :-1][sel]  # (N, d): only the labelled positions
                logits = lm.lm_head(hidden).float()
            target = labels[sel]
            nll = torch.nn.functional.cross_entropy(logits, target, reduction="sum")
            n = sel.sum() if num_items_in_batch is None else num_items_in_batch
            loss = nll / torch.as_tensor(n).clamp(min=1)
            with torch.no_grad():
                logp = torch.log_softmax(logits, -1)
                valid = max(int(sel.sum()), 1)
                m = self._metrics["train"]
                m["entropy"].append(float(-(logp.exp() * logp).sum(-1).sum()) / valid)
                m["mean_token_accuracy"].append(float((logits.argmax(-1) == target).sum()) / valid)
                self._total_train_tokens += int(inputs["attention_mask"].sum()) if "attention_mask" in inputs else 0
                m["num_tokens"] = [self._total_train_tokens]
            return loss

    return LabelledPositionsSFTTrainer


def sft_job(base_model: str, data: SFTData, cfg: SFTConfig, model_cfg: ModelConfig) -> dict:
    """What an SFT result depends on (its checkpoints resume only under the same job; ``workdir.claim``). The base
    model by content (``checkpoints.model_digest``), not by path: a moved or copied artifacts folder resumes."""
    import dataclasses

    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("resume", "save_steps", "keep_checkpoints")}
    samples = hashlib.sha1(json.dumps([s["messages"] for s in data.samples], sort_keys=True).encode()).hexdigest()
    return {"base_model": model_digest(base_model), "sft": settings, "model": dataclasses.asdict(model_cfg),
            "data": {"samples": len(data.samples), "sha1": samples}}


def prepare_work_dir(out_dir: Path, job: dict, keep_previous: int = 1) -> Path:
    """``<out_dir>.work``, kept for resume when an interrupted run of *this* job left it; another job's folder is
    moved aside; staging folders of a checkpoint write that never finished are removed (``checkpoints.claim_work_dir``)."""
    work = out_dir.with_name(out_dir.name + ".work")
    claim_work_dir(work, job, keep_previous, "sft", lambda w: any(w.glob("checkpoint-*")), f"{STAGING}*", out_dir)
    return work


def training_args(cfg: SFTConfig, model_cfg: ModelConfig, work: Path, max_length: int, report_to: str, bf16: bool) -> dict:
    """Keyword arguments of TRL's ``SFTConfig`` for this run."""
    return dict(
        output_dir=str(work),
        max_steps=cfg.max_steps + cfg.routing_warmup_steps,  # at most: a gated warm-up stops the run sooner
        learning_rate=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        lr_scheduler_type="linear",
        per_device_train_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.grad_accum * (cfg.batch_size // cfg.micro_batch_size),
        weight_decay=cfg.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.95,
        max_length=max_length,  # samples arrive cut to it (tokenize_sample): TRL's truncation is a no-op
        assistant_only_loss=False,  # the loss mask comes with the tokens (assistant_masks -> labels)
        save_steps=cfg.save_steps,
        save_total_limit=cfg.keep_checkpoints or None,  # TRL: None keeps every checkpoint
        logging_steps=max(1, min(10, cfg.max_steps // 6)),
        report_to=report_to,
        seed=cfg.seed,
        data_seed=cfg.seed,
        use_cpu=model_cfg.device == "cpu",
        dataloader_num_workers=0,
        train_sampling_strategy="sequential",  # the order is length_sorted_order's: random steps, sorted within
        disable_tqdm=False,
        bf16=bf16,  # bf16 autocast over float32 master weights where the hardware runs it natively (precision.py)
    )


def wall_clock(max_minutes: float):
    """A Trainer callback that stops (and saves) after ``max_minutes`` of wall-clock time (0: never)."""
    from transformers import TrainerCallback

    class WallClock(TrainerCallback):
        def __init__(self):
            self.t0 = time.time()

        def on_step_end(self, args_, state, control, **kw):
            if max_minutes and time.time() - self.t0 > max_minutes * 60:
                control.should_training_stop = True
                control.should_save = True

    return WallClock()


def to_tracker(tracker):
    """A Trainer callback that sends each logged step (loss, learning rate, grad norm, token accuracy, ...) to
    ``tracker`` as ``sft/<name>`` at the optimizer step (no-op without a tracker)."""
    from transformers import TrainerCallback

    class ToTracker(TrainerCallback):
        def on_log(self, args_, state, control, logs=None, **kw):
            if tracker is not None and logs:
                tracker.log({f"sft/{k}": v for k, v in logs.items() if isinstance(v, (int, float))}, step=state.global_step)

    return ToTracker()


def train_sft(
    data: SFTData,
    base_model: str,
    out_dir: str | Path,
    cfg: SFTConfig,
    model_cfg: ModelConfig,
    meta: Optional[dict] = None,
    report_to: str = "none",
    keep_previous: int = 1,
    tracker=None,
) -> dict:
    """Fine-tune with TRL's SFTTrainer (assistant-only loss); resumable from ``<out_dir>.work/checkpoint-*``.

    The finished model is swapped into ``out_dir`` atomically with ``talentrl_meta.json`` (config, library
    version, data report, losses). ``tracker`` (``tracking.start_run``) receives every logged step's loss, learning
    rate, grad norm and token accuracy as ``sft/*``.
    """
    import torch
    from trl import SFTConfig as TRLSFTConfig  # noqa: N814
    from trl import SFTTrainer

    from .models import load_model
    from .precision import resolve_compute_dtype

    out_dir = Path(out_dir)
    job = sft_job(base_model, data, cfg, model_cfg)
    work = prepare_work_dir(out_dir, job, keep_previous)
    model, tok = load_model(base_model, model_cfg)
    if model_cfg.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=model_cfg.lora_r, lora_alpha=2 * model_cfg.lora_r, task_type="CAUSAL_LM", target_modules="all-linear"))
    max_length = min(cfg.max_length, getattr(model.config, "max_position_embeddings", cfg.max_length))
    rows = [tokenize_sample(tok, s["messages"], max_length) for s in data.samples]
    ds, gate = training_order(data, rows, cfg)
    bf16 = model_cfg.dtype == "bfloat16" or resolve_compute_dtype(model_cfg.compute_dtype, model.device) == torch.bfloat16
    args = TRLSFTConfig(**training_args(cfg, model_cfg, work, max_length, report_to, bf16))
    trainer_cls = crash_safe_checkpoints(labelled_positions_trainer(SFTTrainer))
    callbacks = [wall_clock(cfg.max_minutes), to_tracker(tracker)]
    if gate is not None:
        from .routing_warmup import gate_callback, gated_trainer

        trainer_cls = gated_trainer(trainer_cls, gate, cfg.warmup_steps)
        callbacks.append(gate_callback(gate, tracker))
    trainer = trainer_cls(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=callbacks)
    resume = last_complete_checkpoint(work) if cfg.resume else None
    if gate is not None:
        gate.restore(resume)
    t0 = time.time()
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final = trainer.model.merge_and_unload() if model_cfg.lora else trainer.model
    for p in final.parameters():
        if not torch.isfinite(p).all():
            raise FloatingPointError("SFT produced non-finite weights; lower sft.lr")
    info = {
        "base_model": base_model,
        "steps": trainer.state.global_step,
        "train_loss": float(result.training_loss),
        "first_logged_loss": losses[0] if losses else None,
        "last_logged_loss": losses[-1] if losses else None,
        "seconds": time.time() - t0,
        "resumed": bool(resume),
        "resumed_from": str(resume) if resume else None,
        "routing_warmup": warmup_report(trainer.state.log_history, gate),
        "data_report": data.report,
        **(meta or {}),
    }
    def write(tmp: Path) -> None:
        final.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "talentrl_meta.json", info)

    write_final(out_dir, job, keep_previous, "sft", write)
    return info
