"""Compute precision: bf16 autocast only where the hardware runs it natively; a bad value names the key."""

import pytest
import torch

from talentrl_core.config import ModelConfig
from talentrl_core.precision import autocast, cpu_has_native_bf16, resolve_compute_dtype


def test_auto_follows_the_cpu_flags(monkeypatch):
    assert resolve_compute_dtype("auto", "cpu") == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    monkeypatch.setattr("talentrl_core.precision.cpu_has_native_bf16", lambda: False)
    assert resolve_compute_dtype("auto", "cpu") == torch.float32  # emulated bf16 is slower than float32
    assert resolve_compute_dtype("bfloat16", "cpu") == torch.bfloat16  # forced stays forced


def test_autocast_runs_matmuls_in_the_resolved_dtype():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with autocast(torch.bfloat16, "cpu"):
        assert (x @ w).dtype == torch.bfloat16
    with autocast(torch.float32, "cpu"):
        assert (x @ w).dtype == torch.float32


def test_bad_compute_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="model.compute_dtype='fp8'"):
        ModelConfig(compute_dtype="fp8")
