"""Training samples for RL: what a trajectory contributes to the loss, as token tensors (DESIGN.md §4).

Two sample kinds, one layout (``Sample``):

* **routing** — prompt = ``routing_messages(env, goal, menu)`` through the chat template, completion =
  ``<talent>ID</talent>`` + eos, decoded under the menu's constrained mask;
* **execution** — one per step of a trajectory: prompt = the step's stored chat messages (``Step.prompt``)
  through the chat template with the generation prompt, completion = ``Step.completion_ids`` exactly as
  sampled (eos included when generated), old log-probs = ``Step.logprobs`` recorded at rollout.

Only completion tokens carry loss: the prompt (system rules, task, skills, observations — everything the
environment or the library wrote) is context, never a target. Where decoding was constrained, the
log-probs are recomputed under the same per-position mask (``generation.constrained_mask``) and the
same temperature, so the PPO ratio compares the policy that sampled with the policy being trained.

Prompts are left-truncated exactly as ``TransformersGenerator`` truncated them (``keep`` tokens), and the
batch is left-padded with positions counted from the first real token, as the generator does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..generation import TokenTrie, completion_trie, constrained_mask
from ..prompts import CHAT_TEMPLATE_KWARGS
from ..policies import action_completions
from ..trajectories import Trajectory


@dataclass
class Sample:
    kind: str
    "'route' (routing sample) or 'exec' (one execution step)."
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    "Per completion token, recorded when it was sampled (under the decoding mask and temperature)."
    allowed: Optional[list[str]] = None
    "Allowed full completions where decoding was constrained (None: free decoding)."
    group: int = 0
    "Index of the task group within the step (global over processes)."
    arm: int = 0
    "0-based arm of the group."
    traj: int = -1
    "Index of the trajectory within its group (0..G-1); -1 for a routing sample."
    advantage: float = 0.0
    "Set by the trainer: A_route of the arm (routing) or A_exec of the trajectory (execution)."

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def chat_prompt_ids(tokenizer, messages: list[dict], keep: Optional[int] = None) -> list[int]:
    """Token ids of ``messages`` + the assistant generation prompt, left-truncated to ``keep`` tokens.

    The same ids ``LLMPolicy.prompt_ids`` fed the generator, which keeps the last ``max_context −
    max_new_tokens`` of them (the current observation sits at the end).
    """
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True,
                                        **CHAT_TEMPLATE_KWARGS)["input_ids"]
    return list(ids[-keep:]) if keep else list(ids)


def completion_ids_of(tokenizer, text: str) -> list[int]:
    """Ids of a full completion as constrained decoding produces it: the text's tokens, then eos."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


def execution_samples(traj: Trajectory, tokenizer, keep: Optional[int], constrained: bool, group: int, arm: int,
                      traj_index: int) -> list[Sample]:
    """One sample per model-generated execution step of ``traj`` (routing steps and empty completions skipped)."""
    out = []
    for step in traj.steps:
        if step.is_routing or not step.completion_ids:
            continue
        if not step.logprobs or len(step.logprobs) != len(step.completion_ids):
            raise ValueError(
                f"trajectory {traj.traj_uid}: a step has {len(step.completion_ids)} completion ids but "
                f"{len(step.logprobs or [])} rollout log-probs; RL needs both (an LLM policy records them)"
            )
        allowed = action_completions(traj.env, step.admissible) if constrained else None
        out.append(Sample("exec", chat_prompt_ids(tokenizer, json.loads(step.prompt), keep), list(step.completion_ids),
                          [float(x) for x in step.logprobs], allowed, group, arm, traj_index))
    return out


class TrieCache:
    """Token tries of allowed-completion lists, built once per distinct list (admissible sets repeat)."""

    def __init__(self, tokenizer, max_size: int = 4096):
        self.tok = tokenizer
        self.max_size = max_size
        self._tries: dict[tuple[str, ...], TokenTrie] = {}

    def get(self, allowed: Sequence[str]) -> TokenTrie:
        key = tuple(allowed)
        if key not in self._tries:
            if len(self._tries) >= self.max_size:
                self._tries.clear()
            self._tries[key] = completion_trie(self.tok, list(allowed))
        return self._tries[key]


@dataclass
class Batch:
    """A micro-batch: prompts + completions left-padded into one sequence per row.

    Completion tokens are right-aligned in a window of the last ``T`` positions, so row ``i``'s
    completion occupies ``[:, T − c_i:]`` of ``targets``/``mask``/``old_logprobs``/``allowed``.
    """

    input_ids: torch.Tensor  # (B, L) long
    attention_mask: torch.Tensor  # (B, L) long
    position_ids: torch.Tensor  # (B, L) long
    targets: torch.Tensor  # (B, T) long, completion ids (pad elsewhere)
    mask: torch.Tensor  # (B, T) float, 1 on completion tokens
    old_logprobs: torch.Tensor  # (B, T) float
    advantages: torch.Tensor  # (B,) float
    allowed: Optional[torch.Tensor]  # (B, T, V) bool, None when no row is constrained
    n_tokens: int  # tokens the forward reads: the shared prefix once, then each row's own (non-pad) tokens
    prefix_ids: Optional[torch.Tensor] = None
    "(1, P) tokens every row starts with, read once (``collate(share_prefix=True)``); then ``input_ids`` holds each row's\n    tokens after them, ``attention_mask`` is (B, P + L) and ``position_ids`` start at P."

    @property
    def n_completion_tokens(self) -> int:
        return int(self.mask.sum().item())


MIN_SHARED_PREFIX = 16
"Shorter common prefixes are not worth a separate forward (``collate(share_prefix=True)``)."


def shared_prefix_len(samples: Sequence[Sample]) -> int:
    """Length of the prompt prefix every sample starts with, leaving each row at least its last prompt token
    (whose logits predict the first completion token); 0 for a single sample or below ``MIN_SHARED_PREFIX``.

    >>> s = lambda p: Sample("exec", p, [9], [0.0])
    >>> shared_prefix_len([s(list(range(40))), s(list(range(30)) + [7] * 10)])
    30
    >>> shared_prefix_len([s(list(range(40))), s(list(range(20)))])   # row 2 keeps its last prompt token
    19
    >>> shared_prefix_len([s([1] * 40), s([2] * 40)])
    0
    """
    if len(samples) < 2:
        return 0
    prompts = [s.prompt_ids for s in samples]
    n = min(len(os.path.commonprefix(prompts)), min(len(p) for p in prompts) - 1)  # commonprefix takes any sequences
    return n if n >= MIN_SHARED_PREFIX else 0


def collate(samples: Sequence[Sample], tokenizer, vocab_size: int, device, tries: Optional[TrieCache] = None,
            share_prefix: bool = False) -> Batch:
    """Samples as one left-padded batch (``Batch``).

    ``share_prefix``: the prompt prefix all rows have in common (same task: system text, task, skills) goes into
    ``prefix_ids`` and is read once, its keys and values shared by every row (``token_logprobs``); the rows hold
    only what follows it. The log-probs are the same function of the weights; only the float rounding differs.
    """
    if not samples:
        raise ValueError("collate needs at least one sample")
    tries = tries or TrieCache(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    P = shared_prefix_len(samples) if share_prefix else 0
    seqs = [s.prompt_ids[P:] + s.completion_ids for s in samples]
    B, L = len(samples), max(len(x) for x in seqs)
    T = max(len(s.completion_ids) for s in samples)
    if T == 0:
        raise ValueError("every sample of a batch has an empty completion")
    ids = torch.full((B, L), pad, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    targets = torch.full((B, T), pad, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    old = torch.zeros((B, T), dtype=torch.float32)
    allowed = None
    if any(s.allowed for s in samples):
        allowed = torch.ones((B, T, vocab_size), dtype=torch.bool)
    for i, (s, seq) in enumerate(zip(samples, seqs)):
        c = len(s.completion_ids)
        ids[i, L - len(seq):] = torch.tensor(seq, dtype=torch.long)
        attn[i, L - len(seq):] = 1
        if c == 0:
            continue
        targets[i, T - c:] = torch.tensor(s.completion_ids, dtype=torch.long)
        mask[i, T - c:] = 1.0
        if s.old_logprobs:  # empty while scoring candidates at rollout time
            old[i, T - c:] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if s.allowed:
            allowed[i, T - c:] = constrained_mask(tokenizer, s.completion_ids, s.allowed, vocab_size, tries.get(s.allowed))
    n_tokens = int(attn.sum().item()) + P
    prefix = None
    if P:
        prefix = torch.tensor([samples[0].prompt_ids[:P]], dtype=torch.long).to(device)
        attn = torch.cat([torch.ones((B, P), dtype=torch.long), attn], dim=1)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, P:]  # positions from each row's first real token, as in generation
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return Batch(ids.to(device), attn.to(device), pos.to(device), targets.to(device), mask.to(device), old.to(device),
                 adv.to(device), None if allowed is None else allowed.to(device), n_tokens, prefix)


def _prefix_cache(model, batch: Batch):
    """Keys and values of ``batch.prefix_ids``, computed once and repeated for every row (None without a prefix).

    The gradient flows back through the repeat into the one prefix forward, so every row's loss reaches the prefix
    weights as it would through its own copy. It runs on the unwrapped module: under DDP the one wrapped forward
    (the rows') prepares the gradient reduction, which covers every use of a weight in the backward.
    """
    if batch.prefix_ids is None:
        return None
    ids = batch.prefix_ids
    pos = torch.arange(ids.shape[1], device=ids.device)[None]
    out = getattr(model, "module", model)(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos,
                                            use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(batch.input_ids.shape[0])
    return cache


def token_logprobs(model, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """``(B, T)`` log π(y_t | prompt, y_<t) of the completion tokens, under the decoding mask and temperature.

    Only the last ``T + 1`` positions go through the LM head (``logits_to_keep``): position ``p`` predicts
    token ``p + 1``, so the logits for the ``T`` completion slots are those of positions ``L−T−1 .. L−2``.
    Off-completion slots are 0.
    """
    T = batch.targets.shape[1]
    past = _prefix_cache(model, batch)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                past_key_values=past, logits_to_keep=T + 1, use_cache=past is not None)
    logits = out.logits[:, :-1, :].float()  # (B, T, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature  # the generator samples from softmax(logits / temperature)
    if batch.allowed is not None:
        logits = logits.masked_fill(~batch.allowed[:, :, : logits.shape[-1]], float("-inf"))
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return logp.masked_fill(batch.mask == 0, 0.0)


def unpad_rows(values: torch.Tensor, samples: Sequence[Sample]) -> list[list[float]]:
    """Per-sample lists of the completion slots of a ``(B, T)`` right-aligned tensor."""
    T = values.shape[1]
    vals = values.detach().cpu()
    return [vals[i, T - len(s.completion_ids):].tolist() if s.completion_ids else [] for i, s in enumerate(samples)]


@torch.no_grad()
def score_completions(model, tokenizer, samples: Sequence[Sample], vocab_size: int, temperature: float,
                      micro_batch: int = 16, tries: Optional[TrieCache] = None, share_prefix: bool = False
                      ) -> list[list[float]]:
    """Teacher-forced per-token log-probs of each sample's completion (under its mask), without gradient.

    Used at rollout time for routing samples: scoring every ``<talent>ID</talent>`` of the menu gives the
    policy's routing distribution, and the chosen completions' scores are their ``old_logprobs``.
    ``share_prefix`` (``collate``): a micro-batch's common prompt prefix is read once, as where every sample is one
    prompt's candidate commands.
    """
    device = next(model.parameters()).device
    tries = tries or TrieCache(tokenizer)
    out: list[list[float]] = []
    for i in range(0, len(samples), micro_batch):
        chunk = list(samples[i:i + micro_batch])
        batch = collate(chunk, tokenizer, vocab_size, device, tries, share_prefix)
        out.extend(unpad_rows(token_logprobs(model, batch, temperature), chunk))
    return out
