"""What several benches time: the demo/WebShop model (Qwen2 256 x 8, ffn 768, random init, built by the library's
``models.tiny_qwen2``) and one SFT step on it as ``sft.py`` trains (micro-batches, then AdamW); and how a bench runs
each variant in a process of its own (``run_worker``)."""

from __future__ import annotations

import json
import subprocess
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


def sft_step(model, opt, micro_batches, dtype: torch.dtype = torch.float32) -> None:
    """Forward + backward on each micro-batch of token ids (B, T) (its causal-LM loss on itself), under ``dtype``
    autocast, gradients summed, then one optimiser step."""
    for x in micro_batches:
        with autocast(dtype):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
    opt.step()
    opt.zero_grad()


def run_worker(script: str, args, flags: tuple[str, ...], env: dict, *extra: str) -> dict:
    """Run ``script --worker *extra`` in a fresh process under ``env``, passing on ``args``'s values of ``flags``
    (attribute names: ``min_length`` becomes ``--min-length``); return the JSON object its last line prints."""
    cmd = [sys.executable, script, "--worker", *extra]
    for name in flags:
        cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
