"""Talking to an LLM teacher: an OpenAI-compatible endpoint or a local transformers model, with a cache.

* ``OpenAIChat`` posts to ``<base_url>/chat/completions`` (vLLM's ``vllm serve``, or any hosted
  OpenAI-compatible API). The key is read from the environment variable *named* by
  ``LibraryConfig.teacher_api_key_env`` at call time; it is sent as a Bearer header and never logged,
  cached or stored. Timeouts, transport errors, 429 and 5xx are retried with exponential backoff
  (tenacity): ``teacher_retries`` attempts, waits ``teacher_backoff_s``·2^k capped at 30 s.
* ``hf_generator`` wraps a local Hugging Face causal LM as the same kind of callable (GPU users).
* ``Teacher`` asks a prompt once: a response is cached on disk by the SHA-256 of (model, messages,
  temperature) — only when it parsed and validated, so a later run re-asks what was unusable. Unusable
  answers (not JSON, or failing the schema) are counted and skipped by the caller.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TypeVar

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..endpoints import warn_plain_http_key
from ..io import atomic_path

log = logging.getLogger(__name__)
T = TypeVar("T")
Generate = Callable[[list[dict]], str]
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class TeacherError(RuntimeError):
    """The teacher could not be reached (after retries) or refused the request."""


class _RetryableStatus(Exception):
    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


def _retryable(e: BaseException) -> bool:
    return isinstance(e, (httpx.TimeoutException, httpx.TransportError, _RetryableStatus))


@dataclass
class Counters:
    requests: int = 0
    "Calls that reached the generator (HTTP requests counted once per prompt, retries separately)."
    retries: int = 0
    cache_hits: int = 0
    unusable: int = 0
    unusable_reasons: list[str] = field(default_factory=list)


class OpenAIChat:
    """A chat-completions client for an OpenAI-compatible server; call it with messages, get text."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "TEACHER_API_KEY",
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 1.0,
        temperature: float = 0.0,
        max_tokens: int = 2048,
    ):
        if not base_url or not model:
            raise ValueError("OpenAIChat needs a base_url and a model name (library.teacher_base_url / teacher_model)")
        self.base_url = base_url.rstrip("/")
        warn_plain_http_key(self.base_url, bool(os.environ.get(api_key_env, "")), "library.teacher_base_url")
        self.model = model
        self.model_id = f"openai:{model}"
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.n_retries = 0

    def _headers(self) -> dict:
        key = os.environ.get(self.api_key_env, "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _post(self, client: httpx.Client, messages: list[dict]) -> str:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, "max_tokens": self.max_tokens}
        r = client.post(f"{self.base_url}/chat/completions", json=body, headers=self._headers())
        if r.status_code in RETRY_STATUS:
            raise _RetryableStatus(r.status_code)
        if r.status_code >= 400:
            raise TeacherError(f"teacher at {self.base_url} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            return ""  # not a chat completion: the caller counts it as unusable

    def __call__(self, messages: list[dict]) -> str:
        retrying = Retrying(
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=self.backoff_s, min=self.backoff_s, max=30),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        with httpx.Client(timeout=self.timeout_s) as client:
            try:
                for attempt in retrying:
                    with attempt:
                        if attempt.retry_state.attempt_number > 1:
                            self.n_retries += 1
                        return self._post(client, messages)
            except (httpx.HTTPError, _RetryableStatus) as e:
                raise TeacherError(
                    f"teacher at {self.base_url} failed after {self.retries} attempts: {type(e).__name__}: {e}"
                ) from None
        raise TeacherError("unreachable")


def hf_generator(name_or_path: str, max_new_tokens: int = 1024, device: Optional[str] = None, temperature: float = 0.0) -> Generate:
    """A local transformers causal LM as a teacher callable (loaded on first call; chat template applied)."""
    state: dict = {}

    def generate(messages: list[dict]) -> str:
        if not state:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
            state["tok"] = AutoTokenizer.from_pretrained(name_or_path)
            state["model"] = AutoModelForCausalLM.from_pretrained(name_or_path, dtype="auto").to(dev).eval()
            state["device"] = dev
        import torch

        tok, model = state["tok"], state["model"]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt").to(state["device"])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None, pad_token_id=tok.pad_token_id or tok.eos_token_id,
            )
        return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    generate.model_id = f"hf:{name_or_path}"  # type: ignore[attr-defined]
    return generate


class ResponseCache:
    """Raw teacher answers by prompt hash: one JSON file each in ``folder`` (memory only when None)."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder else None
        self._mem: dict[str, str] = {}

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[str]:
        if key in self._mem:
            return self._mem[key]
        if self.folder is not None and self._path(key).exists():
            try:
                return json.loads(self._path(key).read_text())["response"]
            except (ValueError, KeyError):
                return None  # a damaged entry is a miss
        return None

    def put(self, key: str, model_id: str, response: str) -> None:
        self._mem[key] = response
        if self.folder is not None:
            with atomic_path(self._path(key)) as tmp:
                tmp.write_text(json.dumps({"model": model_id, "response": response}))


def prompt_key(model_id: str, messages: list[dict], temperature: float) -> str:
    blob = json.dumps({"model": model_id, "messages": messages, "temperature": temperature}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class Teacher:
    """Ask-once semantics over a generator: cache lookup, generation, parsing, counting."""

    def __init__(self, generate: Generate, cache: ResponseCache, temperature: float = 0.0, model_id: Optional[str] = None):
        self.generate = generate
        self.cache = cache
        self.temperature = temperature
        self.model_id = model_id or getattr(generate, "model_id", None) or getattr(generate, "__name__", "local")
        self.counters = Counters()

    def ask(self, messages: list[dict], parse: Callable[[str], T], what: str = "") -> Optional[T]:
        """The parsed answer, or None when it was unusable (counted, logged without content, not cached)."""
        key = prompt_key(self.model_id, messages, self.temperature)
        cached = self.cache.get(key)
        if cached is not None:
            try:
                obj = parse(cached)
                self.counters.cache_hits += 1
                return obj
            except ValueError:
                pass  # a cached answer that no longer validates is asked again
        self.counters.requests += 1
        text = self.generate(messages)
        try:
            obj = parse(text)
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            self.counters.unusable += 1
            reason = f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            self.counters.unusable_reasons.append(reason)
            log.warning("teacher answer unusable (%s); skipped", reason)
            return None
        self.cache.put(key, self.model_id, text)
        return obj

    def report(self) -> dict:
        c = self.counters
        return {
            "model": self.model_id,
            "requests": c.requests,
            "retries": int(getattr(self.generate, "n_retries", 0)),
            "cache_hits": c.cache_hits,
            "unusable": c.unusable,
            "unusable_reasons": c.unusable_reasons[:20],
        }
