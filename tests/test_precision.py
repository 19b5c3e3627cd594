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


def test_attention_kernel_auto_is_sdpa_and_a_forced_one_is_kept(tmp_path, shared_data):
    """auto: transformers' default (sdpa) on a CPU under bf16 too; a forced value is kept and a bad one named. The
    loaded model really runs the chosen kernel, and both kernels give the same log-probs."""
    from talentrl_core.models import build_tiny, load_model

    cfg = ModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=600, compute_dtype="bfloat16")
    build_tiny(cfg, tmp_path / "m", shared_data, ["go north", "take coin"])
    auto, tok = load_model(tmp_path / "m", cfg)
    assert auto.config._attn_implementation == "sdpa"
    cfg.attn_implementation = "eager"
    eager, _ = load_model(tmp_path / "m", cfg)
    assert eager.config._attn_implementation == "eager"
    ids = torch.tensor([tok("go north then take coin")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(eager(ids).logits, auto(ids).logits, atol=1e-4)  # float32 outside autocast
    with pytest.raises(ValueError, match="model.attn_implementation='fast'.*eager"):
        ModelConfig(attn_implementation="fast")
