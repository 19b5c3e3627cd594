"""What several benches time: the demo/WebShop model (Qwen2 256 x 8, ffn 768, random init, built by the library's
``models.tiny_qwen2``) and one SFT step on it as ``sft.py`` trains (micro-batches of 4, then AdamW)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from talentrl_core.config.model import ModelConfig  # noqa: E402
from talentrl_core.models import tiny_qwen2  # noqa: E402
from talentrl_core.precision import autocast  # noqa: E402


def bench_model(vocab: int = 2048, length: int = 1024, hidden: int = 256, layers: int = 8, ffn: int = 768, **config):
    """The model the benches time; ``config``: further ``Qwen2Config`` fields (``attn_implementation``)."""
    cfg = ModelConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=ffn,
                      max_position_embeddings=max(1024, length))
    return tiny_qwen2(cfg, vocab, **config)


def sft_step(model, opt, ids: torch.Tensor, dtype: torch.dtype = torch.float32, micro: int = 4) -> None:
    """Forward + backward on the rows of ``ids`` (B, T) in micro-batches of ``micro`` (their causal-LM loss on
    themselves), under ``dtype`` autocast, then one optimiser step."""
    for i in range(0, len(ids), micro):
        x = ids[i:i + micro]
        with autocast(dtype):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
    opt.step()
    opt.zero_grad()
