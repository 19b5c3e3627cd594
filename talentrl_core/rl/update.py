"""The policy update: PPO-clip over routing and execution tokens, accumulated, all-reduced, clipped, AdamW.

``PolicyUpdate.update(samples, step)`` runs ``rl.ppo_epochs`` passes, each ``rl.mini_batches`` AdamW steps. Within
a step the loss is a sum over micro-batches (routing ones first, then execution), each the PPO-clip loss of its
tokens against the log-probs recorded at rollout, recomputed under the same decoding mask
(``loss.ppo_clip_loss``, ``samples.token_logprobs``), weighted so that the sum over micro-batches and processes is
the mini-batch-wide aggregate of ``rl.token_agg`` (routing micro-batches × ``rl.alpha_route``; ``+ β·KL`` to the
frozen initial policy when ``rl.beta_kl > 0``). Gradients are all-reduced once per step (DDP ``no_sync`` before
the last micro-batch) and clipped to ``rl.max_grad_norm``.
"""

from __future__ import annotations

import random
from contextlib import nullcontext
from typing import Sequence

import torch

from ..config import RLConfig, TalentRLConfig
from ..precision import autocast
from .loss import ppo_clip_loss
from .samples import Sample, TrieCache, collate, token_logprobs
from .seeding import derive_seed


def reduce_sum(acc, values: dict[str, float]) -> dict[str, float]:
    """Sum named floats over processes (every process passes the same keys)."""
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=acc.device)
    if acc.num_processes > 1:
        t = acc.reduce(t, reduction="sum")
    return dict(zip(keys, t.tolist()))


def reduce_max(acc, x: int) -> int:
    if acc.num_processes == 1:
        return x
    return int(acc.gather(torch.tensor([x], device=acc.device)).max().item())


class PolicyUpdate:
    """One RL run's optimisation: the prepared model, optimizer and schedule, and what a loss needs."""

    def __init__(self, acc, model, opt, sched, params, tok, vocab: int, tries: TrieCache, rl: RLConfig,
                 temperature: float, compute_dtype, ref_model=None):
        self.acc, self.model, self.opt, self.sched, self.params = acc, model, opt, sched, params
        self.tok, self.vocab, self.tries, self.rl = tok, vocab, tries, rl
        self.temperature, self.compute_dtype, self.ref_model = temperature, compute_dtype, ref_model

    @property
    def world(self) -> int:
        return self.acc.num_processes

    def units(self, samples: Sequence[Sample]) -> float:
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
            return token_logprobs(self.ref_model, batch, self.temperature)
        model = self.acc.unwrap_model(self.model)
        with model.disable_adapter():  # LoRA: the frozen base model is the reference
            return token_logprobs(model, batch, self.temperature)

    def mini_batches(self, samples: list[Sample], step: int) -> list[list[Sample]]:
        """``rl.mini_batches`` parts of this process's samples: a seeded shuffle (step, rank), dealt round-robin."""
        k = self.rl.mini_batches
        if k == 1:
            return [list(samples)]
        order = list(samples)
        random.Random(derive_seed(self.rl.seed, step, "mini-batches", self.acc.process_index)).shuffle(order)
        return [order[i::k] for i in range(k)]

    def update(self, samples: list[Sample], step: int = 0) -> dict[str, float]:
        """``ppo_epochs`` passes, each ``mini_batches`` AdamW steps; ``rl/*`` metrics (``rl/skipped`` 1 when every
        group of every process was filtered: the schedule still advances)."""
        rl = self.rl
        parts = self.mini_batches(samples, step)
        n_opt = rl.ppo_epochs * len(parts)
        acc = {"tokens": 0.0, "loss": 0.0, "clip": 0.0, "kl": 0.0, "kl_ref": 0.0, "ctok": 0.0, "grad_norm": 0.0, "zero_adv": 0.0}
        n_samples = reduce_sum(self.acc, {"samples": len(samples)})["samples"]
        if n_samples == 0:
            for _ in range(n_opt):
                self.sched.step()
            return {"rl/skipped": 1.0, "rl/lr": self.sched.get_last_lr()[0], "perf/update_tokens": 0.0}
        self.model.train()
        for _ in range(rl.ppo_epochs):
            for part in parts:
                self.optimizer_step(part, acc)
        self.opt.zero_grad(set_to_none=True)
        tot = reduce_sum(self.acc, {k: v for k, v in acc.items() if k != "grad_norm"})
        ctok = max(tot["ctok"], 1.0)
        out = {"rl/loss": tot["loss"] / n_opt, "rl/clip_frac": tot["clip"] / ctok, "rl/kl": tot["kl"] / ctok,
               "rl/grad_norm": acc["grad_norm"] / n_opt, "rl/lr": self.sched.get_last_lr()[0],
               "rl/samples": n_samples, "rl/skipped": 0.0, "perf/update_tokens": tot["tokens"],
               "rl/zero_adv_skipped_share": tot["zero_adv"] / (n_samples * rl.ppo_epochs)}
        if rl.beta_kl > 0:
            out["rl/kl_ref"] = tot["kl_ref"] / ctok
        return out

    def _micro_batches(self, samples: Sequence[Sample], acc: dict[str, float]) -> list[tuple[str, list[Sample]]]:
        """Routing then execution micro-batches of ``samples``; whole zero-advantage ones dropped where exact."""
        rl = self.rl
        # The loss is a sum over micro-batches, so order is free: samples sorted by their tokens put a task's turns side
        # by side, whose common prefix is then read once (rl.share_prefix); else micro-batches of similar length.
        if rl.share_prefix:
            ordered = sorted(samples, key=lambda s: s.prompt_ids + s.completion_ids)
        else:
            ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
        mb = rl.micro_batch_size
        micro = []
        for kind in ("route", "exec"):
            part = [s for s in ordered if s.kind == kind]
            micro += [(kind, part[i:i + mb]) for i in range(0, len(part), mb)]
        if rl.skip_zero_advantage and rl.beta_kl == 0:
            # -min(ρA, clip(ρ)A) is 0 with a 0 gradient where A = 0, and the step's units still count those samples in
            # the aggregate's denominator. A micro-batch whose every advantage is 0 therefore adds exactly 0: skipping
            # it (and only whole ones, so the others keep their padding) leaves the update bitwise as it was. In a
            # TalentRL group whose arms each succeed or fail as a whole, every execution advantage is 0.
            kept = [(kind, chunk) for kind, chunk in micro if any(s.advantage != 0 for s in chunk)]
            acc["zero_adv"] += sum(len(c) for _, c in micro) - sum(len(c) for _, c in kept)
            micro = kept
        return micro

    def _micro_loss(self, kind: str, chunk: list[Sample], units: dict[str, float], acc: dict[str, float]) -> torch.Tensor:
        rl = self.rl
        batch = collate(chunk, self.tok, self.vocab, self.acc.device, self.tries, rl.share_prefix)
        with autocast(self.compute_dtype, self.acc.device):
            logp = token_logprobs(self.model, batch, self.temperature)  # (B, T), carries the gradient
            ref = self._ref_logprobs(batch) if rl.beta_kl > 0 else None
        loss_k, m = ppo_clip_loss(logp, batch.old_logprobs, batch.advantages, batch.mask, rl.clip_eps, rl.token_agg,
                                  ref, rl.beta_kl)
        # Weight so that the sum over micro-batches and processes is the mini-batch-wide aggregate;
        # × world because DDP averages gradients over processes.
        w = self.units(chunk) / units[kind] * self.world * (rl.alpha_route if kind == "route" else 1.0)
        n_tok = batch.n_completion_tokens
        acc["tokens"] += batch.n_tokens
        acc["ctok"] += n_tok
        acc["loss"] += loss_k.item() * w / self.world
        acc["clip"] += m["clip_frac"] * n_tok
        acc["kl"] += m["approx_kl"] * n_tok
        acc["kl_ref"] += m.get("kl_ref", 0.0) * n_tok
        return loss_k * w

    def optimizer_step(self, samples: Sequence[Sample], acc: dict[str, float]) -> None:
        """One AdamW step on ``samples`` (every process calls it the same number of times: collectives align)."""
        units = reduce_sum(self.acc, {"route": self.units([s for s in samples if s.kind == "route"]),
                                      "exec": self.units([s for s in samples if s.kind == "exec"]),
                                      "samples": len(samples)})
        micro = self._micro_batches(samples, acc)
        # at least one pass: with every sample skipped, a zero loss still gives every weight a zero gradient, so
        # AdamW's step (momentum, weight decay) is the one the full computation would take
        n_micro = max(reduce_max(self.acc, len(micro)), 1)
        self.opt.zero_grad(set_to_none=True)
        if units["samples"] == 0:  # an empty mini-batch on every process: keep the schedule's length
            self.sched.step()
            return
        for i in range(n_micro):
            sync = i == n_micro - 1
            with nullcontext() if sync or self.world == 1 else self.acc.no_sync(self.model):
                loss = self._dummy_loss() if i >= len(micro) else self._micro_loss(*micro[i], units, acc)
                self.acc.backward(loss)
        norm = self.acc.clip_grad_norm_(self.params, self.rl.max_grad_norm if self.rl.max_grad_norm > 0 else float("inf"))
        acc["grad_norm"] += float(norm)
        self.opt.step()
        self.sched.step()


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


def build_update(cfg: TalentRLConfig, init_checkpoint: str, acc) -> PolicyUpdate:
    """The model from ``init_checkpoint`` (LoRA-wrapped or with a frozen KL reference as configured), AdamW and the
    linear schedule, prepared by ``acc``."""
    from transformers import get_linear_schedule_with_warmup

    from ..models import load_model
    from ..precision import resolve_compute_dtype
    from ..prompts import check_prompt_settings
    from .samples import TrieCache

    rl = cfg.rl
    check_prompt_settings(cfg.env, init_checkpoint)  # RL's prompts are the ones its start learnt on
    model, tok = load_model(init_checkpoint, cfg.model, device="cpu")
    ref_model = None
    if cfg.model.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.model.lora_r, lora_alpha=2 * cfg.model.lora_r,
                                                 task_type="CAUSAL_LM", target_modules="all-linear"))
    elif rl.beta_kl > 0:
        ref_model = load_model(init_checkpoint, cfg.model, device="cpu")[0].eval().requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=rl.lr, betas=(0.9, 0.95), weight_decay=rl.weight_decay)
    total = rl.steps * rl.ppo_epochs * rl.mini_batches  # optimizer steps
    sched = get_linear_schedule_with_warmup(opt, min(rl.warmup_steps, total), max(total, 1))
    model, opt, sched = acc.prepare(model, opt, sched)
    if ref_model is not None:
        ref_model.to(acc.device)
    # Rollout, routing scores and the update share one autocast dtype: PPO ratios compare like with like.
    compute_dtype = resolve_compute_dtype(cfg.model.compute_dtype, acc.device)
    vocab = acc.unwrap_model(model).get_output_embeddings().weight.shape[0]
    return PolicyUpdate(acc, model, opt, sched, params, tok, vocab, TrieCache(tok), rl, cfg.model.temperature,
                        compute_dtype, ref_model)
