"""The benchmarks still run (a smallest size of each; figures are printed, never asserted on time).

A benchmark is code users run to compare us with TRL: an API change that breaks it must fail here, not in
a user's terminal (bench_rl once broke when ExecContext gained a field).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str, tmp_path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_bench_rl_compares_three_trainers(tmp_path, shared_data, session_cache):
    res = tmp_path / "rl.json"
    stdout = _run("bench_rl.py", "--steps", "1", "--tasks", "1", "--group", "2", "--max-steps", "2",
                  "--cache-dir", str(session_cache), "--json", str(res), tmp_path=tmp_path)
    assert "ratios vs trl-grpo" in stdout
    results = json.loads(res.read_text())["results"]
    assert set(results) == {"talentrl", "talentrl-noskip", "talentrl-flat", "talentrl-flat-noshare", "trl-grpo"}
    assert "zero-advantage skip" in stdout and "shared prompt prefix" in stdout
    for name, r in results.items():
        # at this size a group may have zero reward variance and be filtered, so only the rollout is certain
        assert r["env_steps_per_s"] > 0 and r["update_tokens_per_s"] >= 0, name


def test_bench_rollout_prints_the_ratio(tmp_path, shared_data, session_cache):
    stdout = _run("bench_rollout.py", "--episodes", "2", "--batch", "2", "--max-steps", "2", "--envs", "textworld",
                  "--cache", str(session_cache), tmp_path=tmp_path)
    assert "textworld  ratio" in stdout


def test_bench_eval_procs_evaluates_both_ways_on_the_same_tasks(tmp_path, shared_data):
    """Floors need no trained run: the bench's two ways play the same episodes (a random command is seeded by task)."""
    stdout = _run("bench_eval_procs.py", "--artifacts", str(tmp_path), "--systems", "random_action,strategy:eastfirst",
                  "--n", "2", tmp_path=tmp_path)
    assert "the baseline's speed" in stdout and "same outcome both ways: 4 of 4" in stdout
    assert "skipped: no finished run" in _run("bench_eval_procs.py", "--artifacts", str(tmp_path), tmp_path=tmp_path)


def test_bench_retrieval_prints_the_speedup(tmp_path):
    stdout = _run("bench_retrieval.py", "--sizes", "2000", "--queries", "5", "--flat-queries", "2", tmp_path=tmp_path)
    assert "speed-up" in stdout


def _load_bench(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_mfu_counts_flops_and_reports_both_precisions(tmp_path, monkeypatch, capsys):
    """Timing-free: every loop runs once for real (an API break still fails here), but the clock is replaced by fixed
    seconds per loop, so each reported GFLOP/s is the analytic FLOP count over that time, exactly, under any load."""
    import torch

    mod = _load_bench("bench_mfu")
    seconds = {"sft": 1e-3, "rl": 2e-3, "prefill": 1e-3, "decode": 3e-3}
    calls: list[str] = []

    def label(name, fn):
        def wrapped(*a, **k):
            calls.append(("rl" if k.get("rl") else "sft") if name == "sft" else name)
            return fn(*a, **k)
        return wrapped

    def fixed_clock(fn, repeats):
        calls.clear()
        fn()
        return seconds[calls[0]]

    for name, attr in (("sft", "sft_step"), ("prefill", "prefill"), ("decode", "decode")):
        monkeypatch.setattr(mod, attr, label(name, getattr(mod, attr)))
    monkeypatch.setattr(mod, "timed", fixed_clock)
    monkeypatch.setattr(mod, "matmul_peak", lambda dtype, repeats: 100.0 if dtype == torch.float32 else 50.0)
    threads = torch.get_num_threads()
    try:
        assert mod.main(["--threads", "1", "--hidden", "64", "--layers", "2", "--ffn", "128", "--batch", "2",
                         "--length", "32", "--eval-batch", "2", "--new-tokens", "2", "--json", str(tmp_path / "m.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    stdout = capsys.readouterr().out
    assert "bf16/fp32" in stdout and "eager/sdpa" in stdout
    report = json.loads((tmp_path / "m.json").read_text())
    # Qwen2 64 x 2, 4 heads (2 KV heads of 16), ffn 128, vocab 2048 tied: per layer q,o 64x64, k,v 64x32, 3 MLP
    # 64x128 = 36,864 matmul weights; 2 layers + the 2048x64 head = 204,800. Forward FLOPs per token at context c:
    # 2 * 204,800 + 2 * layers * c * hidden; training = 3x forward; batch 2 x 32 tokens at mean context 16.
    fwd = lambda ctx: 2 * 204_800 + 2 * 2 * ctx * 64  # noqa: E731
    train, prefill, decode = 3 * fwd(16) * 2 * 32, fwd(16) * 2 * 32, fwd(32) * 2
    gflops = {"sft_step": train / 1e-3, "rl_update": train / 2e-3, "eval_prefill": prefill / 1e-3,
              "eval_decode": decode / ((3e-3 - 1e-3) / 2)}
    assert set(report["rows"]) == set(gflops)
    for loop, flops_per_s in gflops.items():
        row = report["rows"][loop]
        assert row["fp32_gflops"] == row["bf16_gflops"] == round(flops_per_s / 1e9, 1), loop
        assert row["fp32_mfu"] == round(flops_per_s / 1e9 / 100.0, 3) and row["bf16_mfu"] == round(flops_per_s / 1e9 / 50.0, 3)
        assert row["bf16_over_fp32"] == 1.0
    assert report["peak_gflops"] == {"float32": 100.0, "bfloat16": 50.0}
    assert report["attention"] == {k: {"sft_step_s": 0.001, "prefill_s": 0.001} for k in ("sdpa", "eager")}
    model = mod.build_model(mod.argparse.Namespace(vocab=2048, hidden=64, ffn=128, layers=2))
    assert mod.matmul_params(model) == 204_800 and mod.fwd_flops_per_token(model, 16) == fwd(16)


def test_bench_stages_compares_before_and_today(tmp_path, shared_data):
    res = tmp_path / "stages.json"
    stdout = _run("bench_stages.py", "--games", "1", "--train-games", "1", "--sft-steps", "1", "--episodes", "2",
                  "--threads", "1", "--hidden", "32", "--layers", "2", "--ffn", "64", "--json", str(res), tmp_path=tmp_path)
    assert "today/before" in stdout
    rows = json.loads(res.read_text())
    assert set(rows) == {"games", "sft", "rollout"}
    assert all(r["before"] > 0 and r["today"] > 0 for r in rows.values())
    toks = rows["rollout"]["prefilled_tokens_per_step"]
    assert toks["today"] < toks["before"]  # later turns re-read only the changed tail of the prompt


def test_bench_webshop_prints_latency_ratio_and_projection(tmp_path, shared_data):
    stdout = _run("bench_webshop.py", "--data-dir", str(shared_data), "--episodes", "20", "--queries", "10",
                  "--scales", "1000,2000", tmp_path=tmp_path)
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert figures["env"]["expert_success"] >= 0.9 and figures["env"]["steps_per_s"] > 0
    assert [r["backend"] for r in figures["search"]] == ["rank_bm25 (baseline)", "memory", "mmap"]
    assert figures["scale"][-1]["products"] == 1_181_436 and figures["scale"][-1]["projected"]
    assert "ratio vs baseline" in stdout


def test_bench_strategies_webshop_prints_the_category_matrix_and_the_oracle(tmp_path, shared_data):
    stdout = _run("bench_strategies_webshop.py", "--n", "12", "--json", str(tmp_path / "m.json"),
                  f"data_dir={shared_data}", f"artifacts_dir={tmp_path}", tmp_path=tmp_path)
    assert "| all | 12 |" in stdout and "per-goal oracle over the teachers" in stdout
    summary = json.loads((tmp_path / "m.json").read_text())["summary"]
    scores = {s: v["score"] for s, v in summary["by_category"]["all"].items()}
    assert set(scores) == {"rank_order", "title_order", "base_rank", "clause_rank", "base_title", "clause_title", "rule_options"}
    assert summary["by_category"]["all"]["rank_order"]["success"] >= 0.5  # the registered teacher still works
    assert summary["oracle_score"] >= max(v for s, v in scores.items() if s != "rule_options")


def test_bench_behaviour_counts_route_following_and_reversals_against_chance():
    import importlib.util

    from talentrl_core.trajectories import Step, Trajectory

    spec = importlib.util.spec_from_file_location("bench_behaviour", ROOT / "bench" / "bench_behaviour.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def traj(goal, acts_and_exits, success):
        steps = [Step("", "", a, "", 0.0, True, admissible=[f"go {d}" for d in ex]) for a, ex in acts_and_exits]
        return Trajectory("r", "textworld", "eval", goal, "tw", "{}", goal=goal, steps=steps, success=success)

    follows = traj("First, go west. Then, go north.", [("go west", "wn"), ("go north", "en"), ("take coin", "e")], True)
    pingpong = traj("First, go south. Then, go east.", [("go north", "ns"), ("go south", "ns"), ("go north", "ns")], False)
    out = mod.behaviour([follows, pingpong])
    assert out["success"] == 0.5 and out["first_move_on_route"] == 0.5 and out["first_move_chance"] == 0.5
    assert out["first_move_vs_chance"] == 1.0
    # three moves after a move, each with two exits: north after west (not back), south after north and north after
    # south (both straight back): 2 of 3 reversals where chance is 1/2
    assert out["reversal"] == round(2 / 3, 3) and out["reversal_chance"] == 0.5 and out["reversal_vs_chance"] == 1.33


def test_bench_routing_scores_the_menu_and_reads_work_checkpoints(tmp_path, shared_data):
    """bench_routing's pieces on a tiny model: a distribution over the menu, and a weights-only folder (an RL work
    checkpoint) loads with the SFT folder's config and tokenizer into the same model."""
    import shutil

    sys.path.insert(0, str(ROOT / "bench"))
    import bench_routing

    from talentrl_core.config import ModelConfig
    from talentrl_core.models import build_tiny
    from talentrl_core.prompts import TalentView, routing_messages

    cfg = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=600, max_position_embeddings=512, device="cpu")
    sft = build_tiny(cfg, tmp_path / "sft", shared_data)
    (tmp_path / "work").mkdir()
    shutil.copy(sft / "model.safetensors", tmp_path / "work" / "model.safetensors")
    menu = [TalentView(f"t{i}", f"talent {i}", "when", "how", label=f"T{i}") for i in (1, 2, 3)]
    msgs = routing_messages("textworld", "find the coin", menu)
    full = bench_routing.menu_distribution(*bench_routing.load(sft, sft), msgs, menu)
    borrowed = bench_routing.menu_distribution(*bench_routing.load(tmp_path / "work", sft), msgs, menu)
    assert len(full) == 3 and abs(sum(full) - 1) < 1e-9 and min(full) > 0
    assert full == borrowed


def test_bench_device_runs_every_row_on_cpu(tmp_path, shared_data):
    """bench_device is the GPU check (one run on a lent machine): its rows must still run here, on the CPU, at a
    reshaped smallest size, so that an API change fails in CI and not in a GPU lease."""
    model = tmp_path / "tiny"
    _run("bench_device.py", "--build-only", str(model), "--data-dir", str(shared_data), tmp_path=tmp_path)
    res = tmp_path / "device.json"
    stdout = _run("bench_device.py", "--model", str(model), "--devices", "cpu", "--shape", "64x1x128", "--batch", "2",
                  "--steps", "1", "--sft-steps", "1", "--sft-batch", "4", "--threads", "1", "--json", str(res),
                  tmp_path=tmp_path)
    rows = json.loads(res.read_text())["rows"]
    assert set(rows) == {"generate", "rl_update", "sft"} and "64 x 1" in json.loads(res.read_text())["model"]
    assert all(rows[r]["cpu"]["ok"] for r in rows), stdout
    assert rows["generate"]["cpu"]["check"] == "choices ok" and "weights changed" in rows["rl_update"]["cpu"]["check"]


def test_bench_alloc_prints_each_variant_against_the_baseline(tmp_path):
    res = tmp_path / "alloc.json"
    stdout = _run("bench_alloc.py", "--steps", "1", "--warmup", "0", "--batch", "4", "--length", "64", "--json", str(res),
                  tmp_path=tmp_path)
    rows = json.loads(res.read_text())["rows"]
    assert [r["run"] for r in rows][0] == "eager attention, glibc defaults" and rows[0]["speedup"] == 1.0
    assert len(rows) == 4 and all(r["s_per_step"] > 0 and r["runs"][0]["faults_per_step"] >= 0 for r in rows)
    assert "the baseline's speed" in stdout


def test_bench_malloc_drift_runs_each_allocator_setting_in_its_own_process(tmp_path):
    res = tmp_path / "drift.json"
    stdout = _run("bench_malloc_drift.py", "--steps", "2", "--batch", "4", "--length", "64", "--min-length", "16",
                  "--json", str(res), tmp_path=tmp_path)
    rows = json.loads(res.read_text())["rows"]
    assert rows[0]["tunables"] == "" and rows[0]["late_speedup"] == 1.0
    for r in rows[1:]:  # each setting reached its worker
        assert r["tunables"] == r["env"].get("GLIBC_TUNABLES", "") and r["preload"] == r["env"].get("LD_PRELOAD", "")
    assert all(r["early_s"] > 0 and r["late_s"] > 0 and r["drift"] > 0 for r in rows)
    assert "glibc default's late speed" in stdout
