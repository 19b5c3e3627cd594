"""Talent-aware SFT (DESIGN.md §4): TRL's ``SFTTrainer`` with assistant-only loss on the samples of ``sft_data``.

``train_sft`` trains on random batches run as length-sorted micro-batches (``training_order``; an optional routing
warm-up first, ``routing_warmup.py``), with the LM head only at labelled positions (``labelled_positions_trainer``),
crash-safe sealed checkpoints and a fingerprinted resume (``talentrl_core.checkpoints``, shared with RL), and swaps
the finished model in atomically. The samples themselves (routing and execution, the context inference retrieves)
are built and tokenised in ``sft_data.py``; its public names are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Optional, Sequence

from .checkpoints import Paused, claim_work_dir, commit_staged, model_digest, model_job, newest_sound, step_folders, write_final
from .config import ModelConfig, SFTConfig
from .io import disk_full_named, write_json
from .preemption import stop_signals
from .sft_data import (SFTData, assistant_mask_by_prefix, build_sft_data, check_cut, execution_samples,  # noqa: F401
                       forced, rendered_flat, routing_label, step_observations, tokenize_sample)
from .workdir import say, work_dir


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
    repeats = [cfg.routing_weight * smp.get("weight", 1) if smp["kind"] == "route" else smp.get("weight", 1)
               for smp in data.samples]
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


def labelled_positions_trainer(base, prompt_weight: float = 0.0):
    """``base`` (TRL's SFTTrainer) with a loss that runs the LM head only where there is a label.

    An execution sample is ~450 prompt tokens and ~5 label tokens, so TRL's fused LM head (log-probs,
    entropy and top-1 over the 2k-token vocabulary at *every* position) cost more than the model body on the
    demo (measured: bf16 SFT step 3.1 s with it). The loss is the same mean token NLL over the labelled
    positions (or ``sum / num_items_in_batch`` under gradient accumulation, as TRL); entropy and token accuracy
    are logged over the same positions. ``prompt_weight`` (``sft.prompt_loss_weight``) adds that times the prompt
    tokens' mean NLL (the LM head then runs at every position). Multi-process runs keep TRL's path (DDP needs the
    wrapped forward), which has no prompt term: a prompt weight there is refused.
    """
    import torch

    class LabelledPositionsSFTTrainer(base):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if return_outputs or self.accelerator.num_processes > 1 or "labels" not in inputs:
                if prompt_weight and not return_outputs:
                    raise ValueError("sft.prompt_loss_weight runs in one process only (TRL's multi-process loss has "
                                     "no prompt term): set it to 0 or launch a single process")
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            lm = self.accelerator.unwrap_model(model)
            lm = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
            labels = inputs["labels"][:, 1:]  # position p predicts token p + 1
            sel = labels != -100
            with self.accelerator.autocast():  # the wrapped forward would apply the mixed precision; we bypass it
                body = lm.model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                                position_ids=inputs.get("position_ids"), use_cache=False)
                hidden = body.last_hidden_state[:, :-1]
                logits = lm.lm_head(hidden[sel]).float()  # (N, vocab): only the labelled positions
            target = labels[sel]
            nll = torch.nn.functional.cross_entropy(logits, target, reduction="sum")
            n = sel.sum() if num_items_in_batch is None else num_items_in_batch
            loss = nll / torch.as_tensor(n).clamp(min=1)
            if prompt_weight:
                loss = loss + prompt_weight * self._prompt_nll(lm, inputs, hidden, sel, num_items_in_batch)
            with torch.no_grad():
                logp = torch.log_softmax(logits, -1)
                valid = max(int(sel.sum()), 1)
                m = self._metrics["train"]
                m["entropy"].append(float(-(logp.exp() * logp).sum(-1).sum()) / valid)
                m["mean_token_accuracy"].append(float((logits.argmax(-1) == target).sum()) / valid)
                self._total_train_tokens += int(inputs["attention_mask"].sum()) if "attention_mask" in inputs else 0
                m["num_tokens"] = [self._total_train_tokens]
            return loss

        def _prompt_nll(self, lm, inputs, hidden, sel, num_items_in_batch):
            """The prompt tokens' mean NLL in this micro-batch (padding excluded), scaled as the Trainer scales the
            answer loss under gradient accumulation; logged as ``prompt_loss``."""
            real = inputs["attention_mask"][:, 1:].bool() if "attention_mask" in inputs else torch.ones_like(sel)
            where = real & ~sel
            with self.accelerator.autocast():
                logits = lm.lm_head(hidden[where]).float()
            nll = torch.nn.functional.cross_entropy(logits, inputs["input_ids"][:, 1:][where])
            self._metrics["train"]["prompt_loss"].append(float(nll.detach()))
            summed = num_items_in_batch is not None and self.model_accepts_loss_kwargs  # the Trainer will not divide
            return nll / (self.current_gradient_accumulation_steps if summed else 1)

    return LabelledPositionsSFTTrainer


SITTING = ("resume", "save_steps", "keep_checkpoints", "max_minutes")
"SFT settings of how a run is carried out, not of what it makes: not part of its job (``workdir.claim``)."
DAGGER = ("dagger_rounds", "dagger_games", "dagger_beta", "dagger_steps", "dagger_weight", "dagger_teacher",
          "dagger_routing_warmup")
("Settings of the DAgger rounds (``dagger``): round 0 does not depend on them, a later round through its data, its "
 "steps and its samples' weight.")


def sft_job(base_model: str, data: SFTData, cfg: SFTConfig, model_cfg: ModelConfig) -> dict:
    """What an SFT result depends on (its checkpoints resume only under the same job; ``workdir.claim``). The base
    model by content (``checkpoints.model_digest``), not by path: a moved or copied artifacts folder resumes."""
    import dataclasses

    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SITTING + DAGGER}
    samples = hashlib.sha1(json.dumps([s["messages"] for s in data.samples], sort_keys=True).encode()).hexdigest()
    job = {"base_model": model_digest(base_model), "sft": settings, "model": model_job(model_cfg),
           "data": {"samples": len(data.samples), "sha1": samples}}
    weights = sorted({s.get("weight", 1) for s in data.samples if s.get("dagger")})
    if weights:
        job["data"]["dagger_weights"] = weights
    return job


def prepare_work_dir(out_dir: Path, job: dict, keep_previous: int = 1) -> Path:
    """``<out_dir>.work``, kept for resume when an interrupted run of *this* job left it; another job's folder is
    moved aside; staging folders of a checkpoint write that never finished are removed (``checkpoints.claim_work_dir``)."""
    work = work_dir(out_dir)
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


def sitting(max_minutes: float):
    """A Trainer callback for what belongs to this sitting, not to the job: the checkpoint interval of this call
    (Transformers keeps a resumed checkpoint's ``save_steps`` otherwise) and its wall-clock budget, ``max_minutes``
    (0: none), past which, or at a stop signal (``stop``, ``preemption.py``), it checkpoints and stops (``paused_at``:
    the step, ``why``: what stopped it); ``train_sft`` then raises ``Paused`` instead of writing the model. A budget
    spent on the last step of a gated warm-up's shortened run is taken for a pause: the rerun finds nothing left to
    train and writes the model."""
    from transformers import TrainerCallback

    from .preemption import StopRequest, budget_spent, stop_reason

    class Sitting(TrainerCallback):
        def __init__(self):
            self.t0, self.paused_at, self.why, self.stop = time.time(), None, "", StopRequest()

        def on_train_begin(self, args_, state, control, **kw):
            state.save_steps = args_.save_steps

        def on_step_end(self, args_, state, control, **kw):
            late = budget_spent(max_minutes, self.t0)
            if over_anywhere(late or self.stop.name is not None) and state.global_step < state.max_steps:
                control.should_training_stop = True
                control.should_save = True
                self.paused_at = state.global_step
                self.why = stop_reason(self.stop.name, late, f"sft.max_minutes={max_minutes:g}")

    return Sitting()


def over_anywhere(over: bool) -> bool:
    """``over`` on any process of a distributed run (torchrun / accelerate), so that all of them stop at one step."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return over
    flag = torch.tensor([float(over)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def free_cpus(threads: int):
    """A Trainer callback that sets the compute threads to the CPUs free of other work before every step
    (``threads.follow_free_cpus``; ``threads`` > 0 fixes the count)."""
    from transformers import TrainerCallback

    from .threads import follow_free_cpus

    class FreeCPUs(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kw):
            follow_free_cpus(threads)

    return FreeCPUs()


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
    rows = [tokenize_sample(tok, s["messages"], max_length, s.get("label_upto")) for s in data.samples]
    cut = check_cut(rows, max_length, cfg.max_cut_share)
    ds, gate = training_order(data, rows, cfg)
    bf16 = model_cfg.dtype == "bfloat16" or resolve_compute_dtype(model_cfg.compute_dtype, model.device) == torch.bfloat16
    args = TRLSFTConfig(**training_args(cfg, model_cfg, work, max_length, report_to, bf16))
    trainer_cls = crash_safe_checkpoints(labelled_positions_trainer(SFTTrainer, cfg.prompt_loss_weight))
    clock = sitting(cfg.max_minutes)
    callbacks = [clock, to_tracker(tracker), free_cpus(model_cfg.threads)]
    if gate is not None:
        from .routing_warmup import gate_callback, gated_trainer

        trainer_cls = gated_trainer(trainer_cls, gate, cfg.warmup_steps)
        callbacks.append(gate_callback(gate, tracker))
    trainer = trainer_cls(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=callbacks)
    resume = last_complete_checkpoint(work) if cfg.resume else None
    if gate is not None:
        gate.restore(resume)
    t0 = time.time()
    with stop_signals("sft") as clock.stop:
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if clock.paused_at is not None:
        raise Paused(f"sft paused at step {trainer.state.global_step} of {trainer.state.max_steps} after "
                     f"{clock.why} (checkpoint in {work}); run the same command to resume")
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
        "samples_cut": cut,
        **(meta or {}),
    }
    def write(tmp: Path) -> None:
        final.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "talentrl_meta.json", info)

    write_final(out_dir, job, keep_previous, "sft", write)
    return info
