"""Model FLOP utilisation (MFU) of the demo model's hot loops, float32 vs bfloat16 autocast, on this machine.

Measures, in one process and one run:

* the machine's matmul peak per dtype (best of a few GEMM shapes the model uses, plus a large square one);
* SFT step (forward + backward + AdamW on float32 master weights), batch × length tokens;
* RL update (same computation as SFT plus the log-softmax over the vocabulary at every position);
* evaluation prefill (no grad, full prompt) and decode (one token per row with a KV cache);
* the attention kernel under bf16: sdpa (the CPU flash kernel) vs eager, on one SFT micro-batch (B/4).

Each row prints achieved model GFLOP/s, MFU against the peak *of the same dtype* and the bfloat16/float32
throughput ratio. FLOPs are counted analytically (Kaplan et al. 2020): forward = 2·N_matmul per token plus
attention 2·n_layer·ctx·d (causal average), training = 3× forward. The model is the demo's Qwen2
(256 × 8, ffn 768, vocab 2048, random init), so nothing is loaded from disk.

    .venv/bin/python bench/bench_mfu.py                 # ~1-2 min on 2 cores
    .venv/bin/python bench/bench_mfu.py --threads 1 --length 256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from talentrl_core.precision import autocast, cpu_has_native_bf16  # noqa: E402
from bench.common import bench_model  # noqa: E402


def timed(fn, repeats: int) -> float:
    """Best seconds of ``repeats`` calls after one warm-up."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak(dtype: torch.dtype, repeats: int) -> float:
    """Best GFLOP/s over GEMM shapes of the model (tokens × d @ d × ffn) and one 2048³."""
    best = 0.0
    for m, k, n in ((7200, 256, 768), (7200, 768, 256), (7200, 256, 2048), (2048, 2048, 2048)):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        s = timed(lambda: a @ b, repeats)
        best = max(best, 2 * m * k * n / s / 1e9)
    return best


def build_model(args, attn: str = "sdpa"):
    return bench_model(args.vocab, 1024, args.hidden, args.layers, args.ffn, attn_implementation=attn)


def matmul_params(model) -> int:
    """Parameters that take part in a matmul per token: every Linear plus the (tied) output head."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))  # lm_head included


def fwd_flops_per_token(model, ctx: int) -> float:
    c = model.config
    return 2 * matmul_params(model) + 2 * c.num_hidden_layers * ctx * c.hidden_size


def sft_step(model, opt, ids, dtype, rl: bool):
    with autocast(dtype):
        logits = model(input_ids=ids).logits
        if rl:  # RL: per-token log-probs of the taken tokens over the full vocabulary
            logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
            loss = -logp.mean()
        else:
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@torch.no_grad()
def prefill(model, ids, dtype):
    with autocast(dtype):
        return model(input_ids=ids, use_cache=True)


@torch.no_grad()
def decode(model, ids, dtype, new_tokens: int):
    with autocast(dtype):
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(new_tokens):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)


def attention_kernels(args, ids) -> dict:
    """bf16 SFT step and prefill with the CPU flash kernel (sdpa, transformers' default and ``auto``'s choice) vs
    eager attention (``auto``'s choice for bf16 on a CPU until 2026-12-06), same weights, one run."""
    out = {}
    for attn in ("sdpa", "eager"):
        model = build_model(args, attn)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        model.train()
        s_sft = timed(lambda: sft_step(model, opt, ids, torch.bfloat16, rl=False), args.repeats)
        model.eval()
        s_pre = timed(lambda: prefill(model, ids, torch.bfloat16), args.repeats)
        out[attn] = {"sft_step_s": round(s_sft, 4), "prefill_s": round(s_pre, 4)}
    print(f"attention kernel, bf16 (seconds): sft step sdpa {out['sdpa']['sft_step_s']:.3f} eager "
          f"{out['eager']['sft_step_s']:.3f} (eager/sdpa {out['eager']['sft_step_s'] / out['sdpa']['sft_step_s']:.2f}); "
          f"prefill sdpa {out['sdpa']['prefill_s']:.3f} eager {out['eager']['prefill_s']:.3f} "
          f"(eager/sdpa {out['eager']['prefill_s'] / out['sdpa']['prefill_s']:.2f})")
    return out


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    model = build_model(args)
    B, L = args.batch, args.length
    ids = torch.randint(0, args.vocab, (B, L))
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    rows: dict[str, dict] = {}
    peak = {name: matmul_peak(dt, args.repeats) for name, dt in dtypes.items()}
    train_flops = 3 * fwd_flops_per_token(model, L // 2) * B * L
    prefill_flops = fwd_flops_per_token(model, L // 2) * B * L
    for name, dt in dtypes.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        model.train()
        s_sft = timed(lambda: sft_step(model, opt, ids, dt, rl=False), args.repeats)
        s_rl = timed(lambda: sft_step(model, opt, ids, dt, rl=True), args.repeats)
        model.eval()
        eb = args.eval_batch
        eids = ids[:eb] if eb <= B else ids.repeat(eb // B + 1, 1)[:eb]
        s_pre = timed(lambda: prefill(model, eids, dt), args.repeats)
        s_dec_total = timed(lambda: decode(model, eids, dt, args.new_tokens), args.repeats)
        s_dec = max(s_dec_total - s_pre, 1e-9) / args.new_tokens  # seconds per decoded token (all rows)
        dec_flops = fwd_flops_per_token(model, L) * eb
        e_pre = fwd_flops_per_token(model, L // 2) * eb * L
        rows[name] = {
            "sft_step": (train_flops / s_sft, s_sft),
            "rl_update": (train_flops / s_rl, s_rl),
            "eval_prefill": (e_pre / s_pre, s_pre),
            "eval_decode": (dec_flops / s_dec, s_dec),
        }
        del opt
    report = {"threads": args.threads, "native_bf16": cpu_has_native_bf16(), "batch": B, "length": L,
              "peak_gflops": {k: round(v, 1) for k, v in peak.items()}, "rows": {}}
    print(f"matmul peak (GFLOP/s, {args.threads} threads): float32 {peak['float32']:.1f}, bfloat16 {peak['bfloat16']:.1f}"
          f"  (CPU native bf16: {cpu_has_native_bf16()})")
    print(f"model: {args.hidden}x{args.layers} ffn {args.ffn}, {matmul_params(model) / 1e6:.2f}M matmul params; "
          f"train batch {B}x{L}, eval batch {args.eval_batch}x{L}")
    print(f"{'loop':<14}{'fp32 GFLOP/s':>13}{'MFU':>7}{'bf16 GFLOP/s':>14}{'MFU':>7}{'bf16/fp32':>11}")
    for loop in rows["float32"]:
        f32, b16 = rows["float32"][loop][0] / 1e9, rows["bfloat16"][loop][0] / 1e9
        m32, m16 = f32 / peak["float32"], b16 / peak["bfloat16"]
        print(f"{loop:<14}{f32:>13.1f}{m32:>7.0%}{b16:>14.1f}{m16:>7.0%}{b16 / f32:>10.2f}x")
        report["rows"][loop] = {"fp32_gflops": round(f32, 1), "fp32_mfu": round(m32, 3), "bf16_gflops": round(b16, 1),
                                "bf16_mfu": round(m16, 3), "bf16_over_fp32": round(b16 / f32, 2)}
    report["attention"] = attention_kernels(args, ids[: max(B // 4, 1)])  # one SFT micro-batch
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16, help="training batch (SFT is 16)")
    p.add_argument("--length", type=int, default=400, help="tokens per sequence (demo prompts are ~400)")
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    report = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_mfu")(main)())
