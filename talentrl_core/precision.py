"""Compute precision: bfloat16 autocast where the hardware runs it natively, float32 elsewhere.

On CPUs with AVX-512 BF16 or AMX (AMD EPYC Zen 4+, Intel Sapphire Rapids+) oneDNN runs bfloat16 matmuls
~4x faster than float32 (ECOSYSTEM.md: 24 vs 101 GFLOP/s for the demo model's MLP shape on 2 cores).
Training keeps float32 master weights and optimizer state; only the forward/backward matmuls run in
bfloat16 under ``torch.autocast`` (no loss scaling: bfloat16 has float32's exponent range). Inference uses
the same autocast, so rollouts, RL log-probs and evaluation see one numeric policy.

``model.compute_dtype``: ``auto`` (bfloat16 where supported), ``float32`` or ``bfloat16`` (forced).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Iterator

import torch

CHOICES = ("auto", "float32", "bfloat16")


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True when the CPU advertises AVX-512 BF16 or AMX-BF16 (Linux ``/proc/cpuinfo`` flags).

    Elsewhere (macOS, Windows, older x86) this is False and ``auto`` keeps float32: emulated bfloat16 is
    slower than float32 there.
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_compute_dtype(choice: str, device: torch.device | str = "cpu") -> torch.dtype:
    """The autocast dtype for ``choice`` on ``device``.

    >>> resolve_compute_dtype("float32")
    torch.float32
    >>> resolve_compute_dtype("bfloat16")
    torch.bfloat16
    >>> resolve_compute_dtype("fp8")
    Traceback (most recent call last):
    ...
    ValueError: model.compute_dtype='fp8': choose one of auto, float32, bfloat16
    """
    if choice not in CHOICES:
        raise ValueError(f"model.compute_dtype={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "float32":
        return torch.float32
    if choice == "bfloat16":
        return torch.bfloat16
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def autocast(dtype: torch.dtype, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``dtype`` on ``device``'s type; a no-op context for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


@contextlib.contextmanager
def compute_context(choice: str, device: torch.device | str = "cpu") -> Iterator[torch.dtype]:
    """Run the block under the resolved compute dtype; yields that dtype."""
    dtype = resolve_compute_dtype(choice, device)
    with autocast(dtype, device):
        yield dtype
