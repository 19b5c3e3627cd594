"""Putting a policy together from config: model + tokenizer + generation backend → ``LLMPolicy``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .config import Backend, Decoding, TalentRLConfig
from .generation import OpenAIGenerator, TransformersGenerator
from .generation_vllm import VLLMGenerator
from .policies import LLMPolicy


def make_generator(cfg: TalentRLConfig, model, tokenizer, model_path: str):
    b = cfg.model.backend
    if b == Backend.transformers:
        from .precision import resolve_compute_dtype

        device = next(model.parameters()).device
        return TransformersGenerator(model, tokenizer, compute_dtype=resolve_compute_dtype(cfg.model.compute_dtype, device))
    if b == Backend.vllm:
        return VLLMGenerator(model_path, tokenizer)
    if not cfg.model.openai_base_url:
        raise ValueError("model.backend=openai needs model.openai_base_url")
    return OpenAIGenerator(cfg.model.openai_base_url, cfg.model.name_or_path or model_path, cfg.model.openai_api_key_env)


def load_policy(cfg: TalentRLConfig, checkpoint: str, temperature: Optional[float] = None, name: str = "llm"):
    """(policy, checkpoint) for a checkpoint folder or HF id; the model stays reachable as ``policy.model``. A
    checkpoint trained with another memory line than ``cfg.env`` builds is refused (``check_prompt_settings``)."""
    from .models import load_model
    from .prompts import check_prompt_settings

    check_prompt_settings(cfg.env, checkpoint)

    if cfg.model.backend == Backend.openai:
        from .models import load_tokenizer

        tok = load_tokenizer(checkpoint) if Path(checkpoint).exists() else None
        model = None
    else:
        model, tok = load_model(checkpoint, cfg.model)
        model.eval()
    gen = make_generator(cfg, model, tok, checkpoint)
    policy = LLMPolicy(
        gen, tok, max_new_tokens=cfg.model.max_new_tokens,
        temperature=cfg.model.temperature if temperature is None else temperature,
        constrained=cfg.model.decoding == Decoding.constrained, name=name,
    )
    policy.model = model
    return policy, checkpoint
