"""Generation backends: batched transformers sampling with optional constrained decoding, and OpenAI-compatible
endpoints (vLLM: ``generation_vllm``).

Constrained decoding (DESIGN.md §4): where the environment lists admissible commands, each generated
token is restricted to those that keep the completion a prefix of one allowed completion string
(``<action>cmd</action>`` or ``<talent>ID</talent>``), then end-of-turn. The policy is still the language
model: ``constrained_logprobs`` recomputes log-probabilities under the same mask for RL.

Per-row seeds: each row can carry its own sampling seed, so rollout j of every arm of a group draws the
same random numbers (matched interventions, DESIGN.md §5) whatever else is in the batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Hashable, Optional, Protocol, Sequence

import torch


class TokenTrie:
    """Token-id prefix tree over the allowed completions (each already tokenized, eos appended)."""

    def __init__(self, sequences: Sequence[Sequence[int]]):
        self.root: dict = {}
        for seq in sequences:
            node = self.root
            for t in seq:
                node = node.setdefault(int(t), {})

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        node = self.root
        for t in prefix:
            node = node.get(int(t))
            if node is None:
                return []
        return list(node.keys())

    def forced(self, prefix: Sequence[int]) -> list[int]:
        """The tokens that must follow ``prefix``: the chain of nodes with exactly one child.

        >>> TokenTrie([[5, 6, 7], [5, 6, 8]]).forced([])
        [5, 6]
        >>> TokenTrie([[5, 6, 7], [5, 6, 8]]).forced([5, 6, 8])
        []
        """
        node = self.root
        for t in prefix:
            node = node.get(int(t))
            if node is None:
                return []
        out: list[int] = []
        while len(node) == 1:
            (t, node), = node.items()
            out.append(t)
        return out


def completion_trie(tokenizer, completions: Sequence[str]) -> TokenTrie:
    eos = tokenizer.eos_token_id
    seqs = [tokenizer(c, add_special_tokens=False)["input_ids"] + [eos] for c in completions]
    return TokenTrie(seqs)


@dataclass
class GenRequest:
    prompt_ids: list[int]
    allowed: Optional[list[str]] = None
    "Allowed full completions (constrained decoding), or None for free generation."
    seed: Optional[int] = None
    "Sampling seed of this row (None: the backend's global generator)."
    cache_key: Optional[Hashable] = None
    "Keep this prompt's KV cache under this key; the next request with the key re-reads only what changed."


@dataclass
class GenResult:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    logprobs: list[float] = field(default_factory=list)


class Generator(Protocol):
    def generate(self, requests: Sequence[GenRequest], max_new_tokens: int, temperature: float) -> list[GenResult]: ...


def _mask_logits(logits: torch.Tensor, allowed: list[int]) -> torch.Tensor:
    masked = torch.full_like(logits, float("-inf"))
    masked[allowed] = logits[allowed]
    return masked


class TransformersGenerator:
    """Batched sampling with a KV cache over left-padded prompts; constrained rows use a token trie."""

    def __init__(self, model, tokenizer, max_context: Optional[int] = None, compute_dtype: torch.dtype = torch.float32,
                 reuse_kv: bool = True, skip_forced: bool = True):
        self.model = model
        self.reuse_kv = reuse_kv
        "Keep keyed prompts' KV caches between calls (False: every prompt is read whole; bench baseline)."
        self.skip_forced = skip_forced
        "Append trie-forced tokens without a forward (False: one forward per token; bench baseline)."
        self.compute_dtype = compute_dtype
        "Autocast dtype of the forward passes (``talentrl_core.precision``); the RL update uses the same."
        self.tok = tokenizer
        self.eos = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", 4096)
        self._tries: dict[tuple[str, ...], TokenTrie] = {}
        self._kv: dict[Hashable, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        "cache_key -> (token ids, per-layer (keys, values) of shape (kv_heads, T, head_dim)) of the last prompt."
        self.stats = {"prompt_tokens": 0, "prefilled_tokens": 0, "forwards": 0, "prompts_cut": 0}
        """Prompt tokens asked for, tokens actually run through the prefill (the rest came from the KV cache), forwards,
        prompts that lost their start to the context (the first one is also logged)."""

    def _trie(self, allowed: list[str]) -> TokenTrie:
        key = tuple(allowed)
        if key not in self._tries:
            if len(self._tries) > 4096:
                self._tries.clear()
            self._tries[key] = completion_trie(self.tok, allowed)
        return self._tries[key]

    def generate(self, requests: Sequence[GenRequest], max_new_tokens: int, temperature: float) -> list[GenResult]:
        from .precision import autocast

        device = next(self.model.parameters()).device if requests else "cpu"
        if not self.reuse_kv:
            requests = [dataclasses.replace(r, cache_key=None) for r in requests]
        # Rows that continue a cached prompt and rows that start afresh go through separate passes: in one
        # (B, R + S) layout a fresh 450-token row would make every continuing row pad to R + 450.
        warm = [i for i, r in enumerate(requests) if r.cache_key is not None and r.cache_key in self._kv]
        warm_set = set(warm)
        cold = [i for i in range(len(requests)) if i not in warm_set]
        results: list[Optional[GenResult]] = [None] * len(requests)
        with torch.no_grad(), autocast(self.compute_dtype, device):
            for part in (warm, cold):
                if part:
                    for i, res in zip(part, self._generate([requests[i] for i in part], max_new_tokens, temperature)):
                        results[i] = res
        keys = {r.cache_key for r in requests if r.cache_key is not None}
        if keys:  # a keyed call lists every live episode: drop the caches of episodes that ended
            self._kv = {k: v for k, v in self._kv.items() if k in keys}
        return [r for r in results if r is not None]

    def _seeded(self, requests: Sequence[GenRequest]) -> list[Optional[torch.Generator]]:
        gens: list[Optional[torch.Generator]] = []
        for r in requests:
            g = None
            if r.seed is not None:
                g = torch.Generator(device="cpu")
                g.manual_seed(int(r.seed) % (2**63))
            gens.append(g)
        return gens

    def _pick(self, logits: torch.Tensor, trie: Optional[TokenTrie], prefix: list[int], temperature: float,
              gen: Optional[torch.Generator]) -> tuple[Optional[int], float]:
        """Sample (or argmax) one token of one row under its trie mask; None when the trie allows nothing."""
        row = logits.cpu()
        if temperature > 0:
            row = row / temperature
        if trie is not None:
            allowed = trie.allowed(prefix)
            if not allowed:  # cannot happen with a well-formed trie; end the row
                return None, 0.0
            row = _mask_logits(row, allowed)
        logp = torch.log_softmax(row, -1)
        if temperature > 0:
            t = int(torch.multinomial(logp.exp(), 1, generator=gen).item())
        else:
            t = int(torch.argmax(logp).item())
        return t, float(logp[t])

    def _reused(self, req: GenRequest, seq: list[int]) -> int:
        """How many leading tokens of ``seq`` the cache under ``req.cache_key`` already holds (≤ len(seq) − 1)."""
        hit = self._kv.get(req.cache_key) if req.cache_key is not None else None
        if hit is None:
            return 0
        old, n = hit[0], 0
        for a, b in zip(old, seq):
            if a != b:
                break
            n += 1
        return min(n, len(seq) - 1)  # at least one token is read: its logits start the decode

    def _prefill(self, requests: Sequence[GenRequest], seqs: list[list[int]], device):
        """One forward over every row's new tokens; rows whose key is cached reuse their common prefix.

        Layout (B, R + S): the reused KV of row i right-aligned in the first R slots, its r_i..end tokens
        right-aligned in the last S; padding is masked and positions continue from r_i, so each row sees exactly
        its own sequence. Within an episode the system text, task, strategy and skills repeat every turn
        (~60% of a demo prompt): only the rest is read again. Returns (cache, last logits, mask, next positions).
        """
        B = len(seqs)
        r = [self._reused(q, s) for q, s in zip(requests, seqs)]
        R, S = max(r), max(len(s) - n for s, n in zip(seqs, r))
        ids = torch.full((B, S), self.pad, dtype=torch.long)
        attn = torch.zeros((B, R + S), dtype=torch.long)
        pos = torch.zeros((B, S), dtype=torch.long)
        for i, (q, n) in enumerate(zip(seqs, r)):
            new = q[n:]
            ids[i, S - len(new):] = torch.tensor(new)
            attn[i, R - n:R] = 1
            attn[i, R + S - len(new):] = 1
            pos[i, S - len(new):] = torch.arange(n, len(q))
        past = None
        if R:
            from transformers import DynamicCache

            past = DynamicCache()
            layers = self._kv[next(q.cache_key for q, n in zip(requests, r) if n)][1]
            for li in range(len(layers)):
                k0, v0 = layers[li]
                k = torch.zeros((B, k0.shape[0], R, k0.shape[-1]), dtype=k0.dtype, device=device)
                v = torch.zeros_like(k)
                for i, (q, n) in enumerate(zip(requests, r)):
                    if n:
                        kc, vc = self._kv[q.cache_key][1][li]
                        k[i, :, R - n:] = kc[:, :n]
                        v[i, :, R - n:] = vc[:, :n]
                past.update(k, v, li)
        ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True,
                         logits_to_keep=1)
        self.stats["forwards"] += 1
        self.stats["prompt_tokens"] += sum(len(s) for s in seqs)
        self.stats["prefilled_tokens"] += sum(len(s) - n for s, n in zip(seqs, r))
        self._keep_kv(requests, seqs, r, R, S, out.past_key_values)
        return out.past_key_values, out.logits[:, -1, :].float(), attn, pos[:, -1] + 1

    def _keep_kv(self, requests, seqs, r, R: int, S: int, cache) -> None:
        """Store each keyed row's KV of its whole sequence (``generate`` drops the keys of ended episodes)."""
        keyed = [i for i, q in enumerate(requests) if q.cache_key is not None]
        if not keyed:
            return
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for i in keyed:
            n, m = r[i], len(seqs[i]) - r[i]
            kv = []
            for k, v in layers:
                kv.append((torch.cat([k[i, :, R - n:R], k[i, :, R + S - m:]], dim=1),
                           torch.cat([v[i, :, R - n:R], v[i, :, R + S - m:]], dim=1)))
            self._kv[requests[i].cache_key] = (list(seqs[i]), kv)

    def _generate(self, requests: Sequence[GenRequest], max_new_tokens: int, temperature: float) -> list[GenResult]:
        """Prefill every prompt, then decode; tokens the trie forces are appended without a model call.

        Where the admissible completions leave one choice (``<action>`` at the start, ``</action>`` + end of turn
        after the command is determined) the constrained policy's probability is 1 (log-prob 0, as
        ``constrained_logprobs`` recomputes), so those tokens need no logits: a forced prefix joins the prefill
        and a row whose remaining path is unique ends at once. On TextWorld this cut the decode forward passes
        per turn from ~5.6 to ~1 (measured). Forced tokens that precede another choice are fed one per step.
        """
        if not requests:
            return []
        device = next(self.model.parameters()).device
        keep = self.max_context - max_new_tokens
        prompts = [r.prompt_ids[-keep:] for r in requests]  # left truncation keeps the current observation
        cut = [len(r.prompt_ids) for r in requests if len(r.prompt_ids) > keep]
        if cut and not self.stats["prompts_cut"]:
            logging.getLogger(__name__).warning(
                "a prompt of %d tokens was cut to %d (the context, model.max_position_embeddings=%d, less "
                "max_new_tokens): its start, the task line with it, is lost", max(cut), keep, self.max_context)
        self.stats["prompts_cut"] += len(cut)
        tries = [self._trie(r.allowed) if r.allowed else None for r in requests]
        gens = self._seeded(requests)
        B = len(prompts)
        forced = (lambda tr, prefix: tr.forced(prefix) if tr is not None and self.skip_forced else [])
        generated = [forced(tr, ()) for tr in tries]
        logps: list[list[float]] = [[0.0] * len(g) for g in generated]
        done = [bool(g) and g[-1] == self.eos for g in generated]
        feed: list[list[int]] = [[] for _ in range(B)]  # forced tokens still to be read before the next choice
        seqs = [p + g for p, g in zip(prompts, generated)]
        past, logits, attn, next_pos = None, None, None, None
        if not all(done):
            past, logits, attn, next_pos = self._prefill(requests, seqs, device)
        while not all(done):
            next_tokens = torch.full((B,), self.pad, dtype=torch.long)
            for i in range(B):
                if done[i]:
                    continue
                if not feed[i]:  # the last forward's logits are this row's: choose, then add what is forced
                    t, lp = self._pick(logits[i], tries[i], generated[i], temperature, gens[i])
                    if t is None:
                        done[i] = True
                        continue
                    tail = forced(tries[i], generated[i] + [t])
                    generated[i] += [t] + tail
                    logps[i] += [lp] + [0.0] * len(tail)
                    feed[i] = [t] + tail
                    if generated[i][-1] == self.eos or len(generated[i]) >= max_new_tokens:
                        done[i] = True
                        continue
                next_tokens[i] = feed[i].pop(0)
            if all(done):
                break
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
            out = self.model(input_ids=next_tokens[:, None].to(device), attention_mask=attn,
                             position_ids=next_pos[:, None], past_key_values=past, use_cache=True)
            self.stats["forwards"] += 1
            past, logits = out.past_key_values, out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        results = []
        for i in range(B):
            toks = generated[i][:max_new_tokens]
            text_toks = toks[:-1] if toks and toks[-1] == self.eos else toks
            results.append(GenResult(text=self.tok.decode(text_toks, skip_special_tokens=False), token_ids=toks,
                                     prompt_tokens=len(prompts[i]), logprobs=logps[i][:max_new_tokens]))
        return results


def constrained_mask(tokenizer, completion_ids: Sequence[int], allowed: Optional[list[str]], vocab_size: int, trie: Optional[TokenTrie] = None) -> Optional[torch.Tensor]:
    """(T, V) bool mask of the tokens allowed at each completion position (None when unconstrained).

    RL recomputes log-probs with ``log_softmax(logits.masked_fill(~mask, -inf))`` so the ratio is taken
    under the same policy that sampled (the constrained one).
    """
    if not allowed:
        return None
    trie = trie or completion_trie(tokenizer, allowed)
    mask = torch.zeros((len(completion_ids), vocab_size), dtype=torch.bool)
    for t in range(len(completion_ids)):
        ok = trie.allowed(completion_ids[:t])
        if ok:
            mask[t, ok] = True
        else:  # off-trie (should not happen for constrained samples): leave the position unconstrained
            mask[t, :] = True
    return mask


class OpenAIGenerator:
    """Any OpenAI-compatible chat endpoint (a `vllm serve` model, or a hosted one). Free decoding only.

    Takes chat messages rather than token ids: ``generate_chat``. The key comes from an environment
    variable and is never logged.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0):
        import httpx

        from .endpoints import warn_plain_http_key

        self.model = model
        self.base_url = base_url.rstrip("/")
        key = os.environ.get(api_key_env, "")
        warn_plain_http_key(self.base_url, bool(key), "model.openai_base_url")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def _post(self, body: dict) -> dict:
        """One chat completion; any transport, HTTP or body error names the endpoint."""
        import httpx

        url = f"{self.base_url}/chat/completions"
        try:
            r = self.client.post("/chat/completions", json=body)
            r.raise_for_status()
            d = r.json()
            d["choices"][0]["message"]
            return d
        except httpx.HTTPStatusError as e:
            raise RuntimeError(f"{url} answered HTTP {e.response.status_code}: {e.response.text[:200]}") from None
        except httpx.HTTPError as e:
            raise RuntimeError(f"{url}: {type(e).__name__}: {e} (is the server running?)") from None
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise RuntimeError(f"{url} did not answer a chat completion ({type(e).__name__}: {str(e)[:100]})") from None

    def generate_chat(self, conversations: Sequence[list[dict]], max_new_tokens: int, temperature: float, seeds: Sequence[Optional[int]] = ()) -> list[GenResult]:
        out = []
        for i, msgs in enumerate(conversations):
            body = {"model": self.model, "messages": msgs, "max_tokens": max_new_tokens, "temperature": temperature}
            if i < len(seeds) and seeds[i] is not None:
                body["seed"] = int(seeds[i])
            d = self._post(body)
            usage = d.get("usage", {})
            out.append(GenResult(text=d["choices"][0]["message"]["content"] or "", token_ids=[], prompt_tokens=int(usage.get("prompt_tokens", 0))))
        return out
