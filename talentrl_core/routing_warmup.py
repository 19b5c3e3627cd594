"""The routing warm-up: SFT's first steps on routing samples only, fixed or ended when the router has learned.

SFT's first steps may train on routing samples only (``sft.routing_warmup_steps``, a curriculum phase: on the fork
the mix never teaches the router, a router learned first survives it; docs/talents.md §13). How many steps the router
needs is a draw: on the fork, SFT seed 0 learned it between steps 25 and 50, seed 1 not within 60. With
``sft.routing_warmup_until`` > 0 the step count is a cap, and every ``routing_warmup_check_every`` steps the routing
samples are scored teacher-forced; the warm-up ends once, for every routing label, that share of its samples have
every label token as the model's top token (a lower bound on constrained routing accuracy: the menu only removes
wrong choices).

The warm-up's steps come on top of ``sft.max_steps``, which counts the mix's steps: a late router does not cost the
executor its steps (with the warm-up inside ``max_steps``, a 150-step warm-up that never passed left a 150-step mix
whose executor solved nothing; docs/talents.md §14). One trainer run, one optimizer: the dataset holds the order of
``cap + max_steps`` steps (``sft.length_sorted_order``: routing-only steps, then the mix), ``WarmupSampler`` reads it
in order until the warm-up ends, then jumps to the mix, and the run stops ``max_steps`` steps later. The learning
rate (``warmup_schedule``) rises over ``sft.warmup_steps``, holds through the routing warm-up and decays linearly to
zero over the mix, wherever the warm-up ended. A check that passes after step k ends the warm-up after step k + 1:
the trainer has already drawn step k + 1's first rows (its loader reads one batch ahead). The end is written to the
trainer's ``log_history`` (saved with every checkpoint), so a resumed run reads the same rows and learning rates.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

from torch.utils.data import Sampler

from .workdir import say

CHECK_ROWS_PER_LABEL = 32
"Routing samples scored per label at a check (a seeded choice, the same at every check)."


class WarmupGate:
    """Where the warm-up ends: ``end`` steps (the cap until a check passes; with ``until`` 0 no check runs), followed
    by ``mix`` steps of the mix."""

    def __init__(self, cap: int, mix: int, per_step: int, until: float = 0.0, every: int = 10,
                 rows: Sequence[dict] = (), seed: int = 0):
        self.cap, self.mix, self.per_step, self.until, self.every = cap, mix, per_step, until, every
        self.end = cap
        self.checks = check_rows(rows, seed) if until else []

    @property
    def last(self) -> int:
        """The run's last step: the warm-up's, then the mix's."""
        return self.end + self.mix

    @property
    def passed(self) -> bool:
        """Whether a check ended the warm-up (checks run only where ending it leaves steps before the cap)."""
        return self.end < self.cap

    def position(self, p: int) -> int:
        """Dataset row read at sample position ``p`` (positions past the warm-up skip its unused steps)."""
        return p if p < self.end * self.per_step else p + (self.cap - self.end) * self.per_step

    def restore(self, checkpoint: Optional[Path]) -> None:
        """The end a resumed run's checkpoint recorded (none: the warm-up had not ended by then)."""
        end = recorded_end(checkpoint) if checkpoint else None
        if end is not None:
            self.end = end


class WarmupSampler(Sampler):
    """Sequential positions up to the run's last step, mapped through the gate as the trainer draws them (lazily: the
    gate may move while a run goes on). Its length is the most the run can take (the cap's warm-up and the mix)."""

    def __init__(self, gate: WarmupGate):
        self.gate = gate

    def __len__(self) -> int:
        return (self.gate.cap + self.gate.mix) * self.gate.per_step

    def __iter__(self):
        p = 0
        while p < self.gate.last * self.gate.per_step:
            yield self.gate.position(p)
            p += 1


def warmup_schedule(gate: WarmupGate, warmup_steps: int):
    """The learning-rate factor at step ``s``: linear rise over ``warmup_steps``, the peak through the routing warm-up,
    then linear decay to zero over the mix (transformers' "linear" schedule, started where the mix starts). Read
    lazily: where the warm-up ends moves the decay.

    >>> f = warmup_schedule(WarmupGate(cap=10, mix=4, per_step=1), warmup_steps=2)
    >>> [f(s) for s in range(15)]
    [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    """

    def factor(s: int) -> float:
        if s < warmup_steps:
            return s / warmup_steps
        start = max(warmup_steps, gate.end)
        return 1.0 if s <= start else max(0.0, (gate.last - s) / max(1, gate.last - start))

    return factor


def check_rows(rows: Sequence[dict], seed: int) -> list[dict]:
    """Up to ``CHECK_ROWS_PER_LABEL`` rows per label (the tokens under the assistant mask), a seeded choice."""
    by_label: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by_label[label_tokens(r)].append(r)
    rng = random.Random(seed)
    out = []
    for label in sorted(by_label):
        group = list(by_label[label])
        rng.shuffle(group)
        out += group[:CHECK_ROWS_PER_LABEL]
    return out


def label_tokens(row: dict) -> tuple[int, ...]:
    return tuple(i for i, m in zip(row["input_ids"], row["assistant_masks"]) if m)


def label_accuracy(model, rows: Sequence[dict], micro_batch: int = 8) -> dict:
    """Teacher-forced exact match of each row's label: ``{"min": lowest per-label share, "by_label": {label tokens
    as text key: share}}``. A row counts when every token under its assistant mask is the model's top token."""
    import torch

    hits: dict[tuple, list[bool]] = defaultdict(list)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for b in range(0, len(rows), micro_batch):
                batch = rows[b:b + micro_batch]
                width = max(len(r["input_ids"]) for r in batch)
                ids = torch.zeros(len(batch), width, dtype=torch.long)
                att = torch.zeros(len(batch), width, dtype=torch.long)
                for i, r in enumerate(batch):
                    ids[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
                    att[i, :len(r["input_ids"])] = 1
                top = model(input_ids=ids.to(model.device), attention_mask=att.to(model.device)).logits.argmax(-1).cpu()
                for i, r in enumerate(batch):
                    mask = torch.tensor(r["assistant_masks"][1:], dtype=torch.bool)
                    target = torch.tensor(r["input_ids"][1:])
                    hits[label_tokens(r)].append(bool((top[i, :len(target)][mask] == target[mask]).all()))
    finally:
        model.train(was_training)
    shares = {" ".join(map(str, k)): sum(v) / len(v) for k, v in sorted(hits.items())}
    return {"min": min(shares.values()) if shares else 0.0, "by_label": shares}


def recorded_end(checkpoint: Path) -> Optional[int]:
    """The warm-up end in ``checkpoint``'s trainer state, if the warm-up had ended by then."""
    path = Path(checkpoint) / "trainer_state.json"
    try:
        history = json.loads(path.read_text())["log_history"]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{path}: cannot read the trainer state to resume the routing warm-up ({e})") from e
    ends = [h["routing_warmup_end"] for h in history if "routing_warmup_end" in h]
    return int(ends[-1]) if ends else None


def gate_callback(gate: WarmupGate, tracker=None):
    """A Trainer callback that stops the run (and saves) after the mix's last step, and, with ``gate.until``, scores
    the routing samples every ``gate.every`` steps of the warm-up and ends it once every label's share reaches
    ``gate.until``; each check goes to ``log_history`` (and ``tracker`` as ``sft/*``)."""
    from transformers import TrainerCallback

    class RoutingWarmupGate(TrainerCallback):
        def on_step_end(self, args_, state, control, model=None, **kw):
            k = state.global_step
            if k >= gate.last:
                control.should_training_stop = control.should_save = True
            if not gate.until or gate.passed or k % gate.every or k + 1 >= gate.cap or model is None:
                return
            acc = label_accuracy(model, gate.checks)
            entry = {"step": k, "routing_warmup_accuracy": round(acc["min"], 4)}
            verdict = f"below {gate.until}: the warm-up goes on (cap {gate.cap})"
            if acc["min"] >= gate.until:
                gate.end = k + 1
                entry["routing_warmup_end"] = gate.end
                verdict = f">= {gate.until}: the warm-up ends after step {gate.end}"
            say(f"sft: routing check at step {k}: {acc['min']:.3f} of the worst label's routing samples right, {verdict}")
            state.log_history.append(entry)
            if tracker is not None:
                tracker.log({f"sft/{n}": v for n, v in entry.items() if n != "step"}, step=k)

    return RoutingWarmupGate()


def gated_trainer(base, gate: WarmupGate, warmup_steps: int):
    """``base`` (a transformers Trainer) drawing its training rows through the gate (``WarmupSampler``) under
    ``warmup_schedule``'s learning rates."""
    from torch.optim.lr_scheduler import LambdaLR

    class GatedWarmup(base):
        def _get_train_sampler(self, train_dataset=None):
            return WarmupSampler(gate)

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer, warmup_schedule(gate, warmup_steps))
                self._created_lr_scheduler = True
            return self.lr_scheduler

    return GatedWarmup
