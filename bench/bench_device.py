"""The project's hot paths on CPU and on CUDA in one run: each figure per device and the cuda/cpu speed-up.

Rows (each on every device of ``--devices``; cuda only where ``torch.cuda.is_available()``):

* ``generate``  ``--batch`` constrained requests (TextWorld-style prompts of a few hundred tokens built from plain
                text with ``prompts.exec_context``, 16 admissible commands each) through ``TransformersGenerator``
                at temperature 1 with per-row seeds, as a rollout does: one warm-up call, then two timed turns
                (the second continues each episode, so its prompt prefix comes from the KV cache). Figure:
                generated tokens/s; check: every completion is one of its request's allowed ones.
* ``rl_update`` ``--batch`` synthetic ``Sample``s (1 routing + 3 execution per task, old log-probs scored on the
                CPU with ``score_completions``, seeded advantages) through the trainer's own update path
                (``rl.update.own_precision_accelerator`` + ``build_update`` + ``PolicyUpdate.update``): one
                warm-up update, then ``--steps`` timed ones. Figure: update tokens/s (tokens the forward reads);
                check: the weights' digest changed.
* ``sft``       ``train_sft`` (TRL's SFTTrainer) for ``--sft-steps`` steps of ``--sft-batch`` synthetic chat samples
                ([system, user, assistant], routing and execution) with ``model.device`` set to the row's device.
                Figure: steps/s (the first step's warm-up included); prints the final logged loss. Skipped, saying
                why, where trl or datasets cannot be imported.

Devices go through the project's own handling (``ModelConfig.device``, ``load_model``, the RL accelerator), so a
device-placement bug shows as a failed row: each row runs in its own try/except (one line on stdout, the traceback
on stderr) and the others go on. A row also fails where the weights are not on its device or, on cuda, where the
peak GPU memory stays under the weights (training rows: 3x them). Accelerate's process-wide state is reset before
the rl_update and sft rows (a cpu row's state would otherwise keep the next cuda row on the CPU). The model is a saved
folder (``--model``, as ``build_tiny`` writes it) or, without it, the demo's tiny Qwen2 (256 x 8, ffn 768) built
from ``--data-dir``. Nothing is downloaded. A final line holds every figure as JSON (``--json PATH`` writes it).

    .venv/bin/python bench/bench_device.py                          # CPU only here (~minutes on 2 cores)
    .venv/bin/python bench/bench_device.py --build-only /tmp/devbench_model
    python3 bench/bench_device.py --model <dir> --threads 16        # on a GPU machine: cpu and cuda rows
    python3 bench/bench_device.py --model <dir> --threads 16 --shape 896x24x4864 --batch 8 --steps 1 --sft-batch 4
                                                                    # the same at Qwen2.5-0.5B's size (random weights)
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEMO = {"hidden_size": 256, "num_hidden_layers": 8, "intermediate_size": 768}  # conf/experiment/demo.yaml
ROWS = ("generate", "rl_update", "sft")
ROOMS = ["kitchen", "cellar", "attic", "garden", "hallway", "pantry", "study", "bedroom", "bathroom", "garage",
         "library", "workshop"]
THINGS = ["coin", "key", "lamp", "book", "apple", "knife", "map", "rope", "candle", "box", "bottle", "hat"]
FURNITURE = ["table", "shelf", "chest", "counter", "bed", "desk", "cupboard", "bench"]
DIRS = ["north", "south", "east", "west"]
OBS_CHARS = 300  # the demo's env.obs_chars


def scene(task: int, turn: int) -> tuple[str, str, list[str]]:
    """(goal, observation, 16 admissible commands) of a task's turn: plain text, deterministic."""
    rng = random.Random(task * 100 + turn)
    room, near = ROOMS[(task + turn) % len(ROOMS)], rng.sample(ROOMS, 4)
    things, furn = rng.sample(THINGS, 6), rng.sample(FURNITURE, 3)
    goal = (f"Find the {THINGS[task % len(THINGS)]} somewhere in the house and take it. The way there goes "
            f"{DIRS[task % 4]} first, then {DIRS[(task + 1) % 4]}.")
    exits = " ".join(f"A door leads {d} to the {r}." for d, r in zip(DIRS, near))
    items = " ".join(f"On the {f} you see a {a} and a {b}." for f, a, b in zip(furn, things[::2], things[1::2]))
    obs = f"-= {room.title()} =- You arrive in the {room}. It is quiet and smells of dust. {exits} {items}"
    adm = [f"go {d}" for d in DIRS] + [f"take {t}" for t in things] + [f"examine {f}" for f in furn] + \
          [f"open {f}" for f in furn]
    return goal, obs, adm


@functools.lru_cache(maxsize=1)
def knowledge():
    """(talent menu, skills) as the library would show them (names from bench_rl's bank)."""
    from talentrl_core.prompts import SkillView, TalentView

    menu = [TalentView("T1", "follow-directions", "the task lists moves in order", "Do the moves the task lists, one "
                       "per turn, then take the object."),
            TalentView("T2", "explore", "the way is unknown", "Try unexplored exits; never walk straight back."),
            TalentView("T3", "grab-first", "an object is in sight", "Take visible objects before moving.")]
    skills = [SkillView("s1", "general", "Follow directions", "Go where the task says, in order."),
              SkillView("s2", "specific", "Take the object", "When you see what the task names, take it."),
              SkillView("s3", "mistake", "Going back", "Walking back the way you came wastes a turn.")]
    return menu, skills


def exec_prompt(task: int, turn: int) -> tuple[list[dict], list[str]]:
    """An execution step's chat messages (history 1, every action so far) and its allowed completions."""
    from talentrl_core.policies import action_completions
    from talentrl_core.prompts import exec_context, execution_messages

    menu, skills = knowledge()
    goal = scene(task, 0)[0]
    past = [(scene(task, k)[1], f"go {DIRS[(task + k) % 4]}") for k in range(turn)]
    _, obs, adm = scene(task, turn)
    ctx = exec_context("textworld", goal, obs, menu[task % len(menu)], skills, past, 1, adm, OBS_CHARS)
    return execution_messages(ctx), action_completions("textworld", adm)


def sample_spec(i: int) -> tuple[str, int, list[dict], list[str]]:
    """(kind, task, messages, allowed) of synthetic sample ``i``: per task one routing sample, then three turns."""
    task, k = divmod(i, 4)
    if k:
        return ("exec", task, *exec_prompt(task, k - 1))
    from talentrl_core.prompts import routing_completions, routing_prompt

    menu, _ = knowledge()
    goal, obs, _ = scene(task, 0)
    return "route", task, routing_prompt("textworld", goal, obs, menu, 150), routing_completions([t.shown for t in menu])


def model_cfg(args, dev: str):
    from talentrl_core.config import ModelConfig

    return ModelConfig(device=dev, threads=args.threads, temperature=1.0, max_new_tokens=32)


def sync(dev: str) -> None:
    if dev.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def placed(model, dev: str) -> str:
    """The device type the model's weights are on; RuntimeError when it is not the row's."""
    where = {p.device.type for p in model.parameters()}
    if where != {dev.split(":")[0]}:
        raise RuntimeError(f"the model's weights are on {sorted(where)}, not on {dev}")
    return dev


def digest(model) -> str:
    from talentrl_core.models import weights_digest

    return weights_digest(model)[:12]


def fresh_accelerate() -> None:
    """Forget accelerate's process-wide state (one device per process is what it expects)."""
    try:
        from accelerate.state import AcceleratorState, GradientState
    except ImportError:
        return
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def row_generate(args, dev: str, model_dir: str) -> dict:
    from talentrl_core.generation import GenRequest, TransformersGenerator
    from talentrl_core.models import load_model
    from talentrl_core.precision import resolve_compute_dtype
    from talentrl_core.rl.samples import chat_prompt_ids

    mcfg = model_cfg(args, dev)
    model, tok = load_model(model_dir, mcfg)
    model.eval()
    placed(model, dev)
    dtype = resolve_compute_dtype(mcfg.compute_dtype, next(model.parameters()).device)
    gen = TransformersGenerator(model, tok, compute_dtype=dtype)
    prompts = [[exec_prompt(i, turn) for i in range(args.batch)] for turn in (0, 1)]
    ids = [[chat_prompt_ids(tok, msgs) for msgs, _ in turn] for turn in prompts]

    def requests(turn: int, keyed: bool) -> list:
        return [GenRequest(ids[turn][i], allowed, seed=1000 * turn + i, cache_key=i if keyed else None)
                for i, (_, allowed) in enumerate(prompts[turn])]

    gen.generate(requests(0, False), mcfg.max_new_tokens, 1.0)  # warm-up: kernels, allocator, tries
    sync(dev)
    before = dict(gen.stats)
    t0 = time.perf_counter()
    out = [gen.generate(requests(turn, True), mcfg.max_new_tokens, 1.0) for turn in (0, 1)]
    sync(dev)
    secs = time.perf_counter() - t0
    chosen = [r.text for turn in out for r in turn]
    allowed = [a for turn in prompts for _, a in turn]
    bad = sum(c not in a for c, a in zip(chosen, allowed))
    tokens = sum(len(r.token_ids) for turn in out for r in turn)
    return {"unit": "generated tokens/s", "value": tokens / secs, "seconds": round(secs, 3), "generated_tokens": tokens,
            "requests": 2 * args.batch, "prompt_tokens_mean": round(sum(map(len, ids[0] + ids[1])) / (2 * args.batch), 1),
            "prefilled_tokens": gen.stats["prefilled_tokens"] - before["prefilled_tokens"],
            "forwards": gen.stats["forwards"] - before["forwards"], "compute_dtype": str(dtype).replace("torch.", ""),
            "attn": model.config._attn_implementation, "check": "choices ok" if not bad else
            f"FAIL: {bad} of {len(chosen)} completions outside their allowed set", "ok": not bad, "_chosen": chosen}


@functools.lru_cache(maxsize=2)
def rl_samples(model_dir: str, n: int) -> tuple:
    """``n`` samples as the trainer builds them, their old log-probs scored once on the CPU in float32."""
    from talentrl_core.config import ModelConfig
    from talentrl_core.models import load_model
    from talentrl_core.rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions

    model, tok = load_model(model_dir, ModelConfig(device="cpu", compute_dtype="float32"))
    model.eval()
    rng = random.Random(0)
    samples = []
    for i in range(n):
        kind, task, msgs, allowed = sample_spec(i)
        adv = round(rng.gauss(0.0, 1.0), 3) if task % 4 != 3 else 0.0  # every 4th task: zero advantages (a tied group)
        samples.append(Sample(kind, chat_prompt_ids(tok, msgs), completion_ids_of(tok, rng.choice(allowed)), [],
                              allowed, group=task, arm=i % 2, traj=-1 if kind == "route" else i % 8, advantage=adv))
    vocab = model.get_output_embeddings().weight.shape[0]
    for s, lp in zip(samples, score_completions(model, tok, samples, vocab, 1.0)):
        s.old_logprobs = lp
    return tuple(samples)


def row_rl_update(args, dev: str, model_dir: str) -> dict:
    import torch

    from talentrl_core.config import RLConfig, TalentRLConfig
    from talentrl_core.rl.update import build_update, own_precision_accelerator

    samples = list(rl_samples(model_dir, args.batch))
    fresh_accelerate()
    torch.manual_seed(0)
    cfg = TalentRLConfig(experiment="bench-device", model=model_cfg(args, dev),
                         rl=RLConfig(steps=args.steps + 1, lr=1e-4, micro_batch_size=16))
    acc = own_precision_accelerator(cpu=dev == "cpu")  # as RLTrainer decides it from model.device
    upd = build_update(cfg, model_dir, acc)
    model = acc.unwrap_model(upd.model)
    placed(model, dev)
    before = digest(model)
    upd.update(samples, 0)  # warm-up
    sync(dev)
    tokens, secs, metrics = 0.0, 0.0, {}
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        metrics = upd.update(samples, step)
        sync(dev)
        secs += time.perf_counter() - t0
        tokens += metrics["perf/update_tokens"]
    after = digest(model)
    changed = before != after
    return {"unit": "update tokens/s", "value": tokens / secs, "seconds": round(secs, 3), "update_tokens": int(tokens),
            "samples": len(samples), "loss": round(metrics["rl/loss"], 5), "grad_norm": round(metrics["rl/grad_norm"], 4),
            "zero_adv_skipped_share": round(metrics["rl/zero_adv_skipped_share"], 3),
            "compute_dtype": str(upd.compute_dtype).replace("torch.", ""), "attn": model.config._attn_implementation,
            "ok": changed,
            "check": f"weights changed ({before} -> {after})" if changed else f"FAIL: weights unchanged ({before})"}


def synthetic_sft_data(n: int):
    from talentrl_core.sft_data import SFTData

    menu, skills = knowledge()
    samples = []
    for i in range(n):
        kind, task, msgs, allowed = sample_spec(i)
        label = allowed[(task + i) % len(allowed)]
        smp = {"messages": msgs + [{"role": "assistant", "content": label}], "kind": kind, "task_id": f"task-{task}",
               "talent_id": menu[task % len(menu)].talent_id, "skill_ids": [s.skill_id for s in skills]}
        if kind == "route":
            smp["weight"] = 1
        samples.append(smp)
    return SFTData(samples, {"samples": n, "synthetic": True})


def row_sft(args, dev: str, model_dir: str, work: Path) -> dict:
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        return {"skipped": f"trl/datasets cannot be imported ({type(e).__name__}: {e})"}
    from talentrl_core.config import SFTConfig
    from talentrl_core.sft import train_sft

    fresh_accelerate()
    micro = 4 if args.sft_batch % 4 == 0 else args.sft_batch
    cfg = SFTConfig(max_steps=args.sft_steps, batch_size=args.sft_batch, micro_batch_size=micro, lr=1e-3,
                    warmup_steps=0, save_steps=1_000_000, keep_checkpoints=0, resume=False)
    info = train_sft(synthetic_sft_data(max(2 * args.sft_batch, 32)), model_dir, work / f"sft-{dev}", cfg, model_cfg(args, dev),
                     keep_previous=0)
    loss = float(info["last_logged_loss"] if info["last_logged_loss"] is not None else "nan")
    return {"unit": "steps/s", "value": info["steps"] / info["seconds"], "seconds": round(info["seconds"], 3),
            "steps": info["steps"], "final_loss": round(loss, 5), "train_loss": round(info["train_loss"], 5),
            "ok": loss == loss, "check": f"final loss {loss:.4f}" + ("" if loss == loss else " (FAIL)")}


def weight_bytes(model_dir: str) -> int:
    return sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))


def run_row(name: str, dev: str, fn, need_bytes: float = 1.0) -> dict:
    """``fn()``'s figures; an exception becomes one line here (traceback on stderr) and an ``error`` entry. A cuda row
    whose peak GPU memory stays under ``need_bytes`` (the weights; training: weights, gradients and AdamW's two
    moments) fails: some of its work stayed on the CPU."""
    import torch

    cuda = dev.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        r = fn()
        if cuda and "skipped" not in r:
            peak = torch.cuda.max_memory_allocated()
            r["gpu_peak_mib"] = round(peak / 2**20, 1)
            if peak < need_bytes:
                raise RuntimeError(f"peak GPU memory {peak / 2**20:.1f} MiB < {need_bytes / 2**20:.1f} MiB expected: "
                                   "part of the row's work did not run on the GPU")
    except Exception as e:  # noqa: BLE001 - a failing row is reported and the next one runs
        msg = " ".join(str(e).split())[:400]
        print(f"FAILED {name} on {dev}: {type(e).__name__}: {msg}", flush=True)
        print(f"--- traceback of {name} on {dev} ---", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        r = {"error": f"{type(e).__name__}: {msg}"}
    finally:
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    if "skipped" in r:
        print(f"{name} on {dev}: skipped: {r['skipped']}", flush=True)
    elif "error" not in r:
        extra = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("unit", "value", "check", "ok") and k[0] != "_")
        print(f"{name} on {dev}: {r['value']:.4g} {r['unit']}; {r['check']}; {extra}", flush=True)
    return r


def table(rows: dict, devices: list[str]) -> None:
    print(f"\n{'row':<11}{'device':<8}{'unit':<21}{'value':>11}{'cuda/cpu':>10}  check")
    for name, per in rows.items():
        for dev in devices:
            r = per.get(dev, {})
            if "error" in r or "skipped" in r:
                what = f"FAILED: {r['error']}" if "error" in r else "skipped"
                print(f"{name:<11}{dev:<8}{'-':<21}{'-':>11}{'':>10}  {what}")
                continue
            ratio = f"{per['cuda_over_cpu']:.2f}x" if dev != "cpu" and "cuda_over_cpu" in per else ""
            check = r["check"] + (f"; {r['same_as_cpu']}" if "same_as_cpu" in r else "")
            print(f"{name:<11}{dev:<8}{r['unit']:<21}{r['value']:>11.4g}{ratio:>10}  {check}")


def compare(name: str, per: dict) -> None:
    """The cuda/cpu ratio where both ran; for generate, how many cuda choices equal the cpu ones (same seeds)."""
    cpu, cuda = per.get("cpu", {}), per.get("cuda", {})
    if "value" in cpu and "value" in cuda:
        per["cuda_over_cpu"] = round(cuda["value"] / cpu["value"], 3)
    if name == "generate" and "_chosen" in cpu and "_chosen" in cuda:
        same = sum(a == b for a, b in zip(cpu["_chosen"], cuda["_chosen"]))
        cuda["same_as_cpu"] = f"{same}/{len(cpu['_chosen'])} completions equal to cpu's"
    for r in per.values():
        if isinstance(r, dict):
            r.pop("_chosen", None)
            if isinstance(r.get("value"), float):
                r["value"] = round(r["value"], 3)


def build_model(out_dir: str | Path, data_dir: str) -> Path:
    """The demo's tiny Qwen2 (256 x 8) with a tokenizer trained on ``data_dir`` plus this bench's texts."""
    from talentrl_core.config import ModelConfig
    from talentrl_core.models import build_tiny

    if not Path(data_dir).is_dir():
        raise FileNotFoundError(f"{data_dir}: no benchmark data to train the tokenizer on; pass --model DIR (a folder "
                                "--build-only DIR wrote where the data is) or --data-dir")
    texts = [scene(t, k)[1] for t in range(48) for k in range(4)] + [scene(t, 0)[0] for t in range(48)]
    return build_tiny(ModelConfig(**DEMO, device="cpu"), out_dir, data_dir, extra_texts=texts)


def reshaped(model_dir: str, shape: str, out: Path) -> str:
    """``model_dir``'s tokenizer on a random-initialised Qwen2 of ``shape`` (``HIDDENxLAYERSxFFN``, heads of 64 and
    2 key-value heads, as Qwen2.5-0.5B's ``896x24x4864``): the same hot paths at a size GPU users train."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, ffn = (int(x) for x in shape.lower().split("x"))
    cfg = Qwen2Config.from_pretrained(model_dir)
    cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size = hidden, layers, ffn
    cfg.num_attention_heads, cfg.num_key_value_heads = max(1, hidden // 64), 2 if hidden % 128 == 0 else 1
    cfg.layer_types = ["full_attention"] * layers
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    for f in Path(model_dir).iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, out / f.name)
    return str(out)


def describe(model_dir: str) -> str:
    c = json.loads((Path(model_dir) / "config.json").read_text())
    return (f"{c.get('hidden_size')} x {c.get('num_hidden_layers')}, ffn {c.get('intermediate_size')}, vocab "
            f"{c.get('vocab_size')} ({model_dir})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="a saved model folder (tokenizer + weights, as build_tiny writes); required without data")
    p.add_argument("--build-only", metavar="DIR", help="build the demo's tiny model into DIR and exit")
    p.add_argument("--data-dir", default=os.environ.get("TALENTRL_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--batch", type=int, default=32, help="generate requests and RL samples")
    p.add_argument("--steps", type=int, default=4, help="timed RL updates (after one warm-up)")
    p.add_argument("--sft-steps", type=int, default=8)
    p.add_argument("--sft-batch", type=int, default=16, help="SFT batch (micro-batches of 4, as the demo)")
    p.add_argument("--devices", default="", help="comma-separated, e.g. cpu,cuda (default: cpu and cuda where available)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    p.add_argument("--threads", type=int, default=2, help="CPU threads")
    p.add_argument("--shape", help="HIDDENxLAYERSxFFN: the model's tokenizer on a random Qwen2 of this size, e.g. 896x24x4864")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.build_only:
        print(f"built {describe(str(build_model(args.build_only, args.data_dir)))}")
        return 0
    import torch

    torch.set_num_threads(args.threads)
    devices = [d.strip() for d in (args.devices or "cpu,cuda").split(",") if d.strip()]
    if any(d.startswith("cuda") for d in devices) and not torch.cuda.is_available():
        if args.devices:
            print(f"cuda: torch.cuda.is_available() is False (torch {torch.__version__}): cuda rows left out", flush=True)
        devices = [d for d in devices if not d.startswith("cuda")]
    names = [r.strip() for r in args.rows.split(",") if r.strip()]
    if set(names) - set(ROWS):
        p.error(f"--rows: unknown {sorted(set(names) - set(ROWS))}; choose from {', '.join(ROWS)}")
    work = Path(tempfile.mkdtemp(prefix="bench-device-"))
    try:
        return run(args, devices, names, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, devices: list[str], names: list[str], work: Path) -> int:
    import torch
    import transformers

    model_dir = args.model or str(build_model(work / "tiny", args.data_dir))
    if args.shape:
        model_dir = reshaped(model_dir, args.shape, work / "shaped")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    print(f"model {describe(model_dir)}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"{args.threads} CPU threads; gpu: {gpu}; devices {','.join(devices)}", flush=True)
    calls = {"generate": lambda dev: row_generate(args, dev, model_dir),
             "rl_update": lambda dev: row_rl_update(args, dev, model_dir),
             "sft": lambda dev: row_sft(args, dev, model_dir, work)}
    need = {"generate": 0.9, "rl_update": 3.0, "sft": 3.0}  # x the weights' bytes (float32 on disk and loaded)
    rows: dict[str, dict] = {}
    for name in names:
        rows[name] = {dev: run_row(name, dev, functools.partial(calls[name], dev), need[name] * weight_bytes(model_dir))
                      for dev in devices}
        compare(name, rows[name])
    table(rows, devices)
    report = {"model": describe(model_dir), "torch": torch.__version__, "transformers": transformers.__version__,
              "gpu": gpu, "threads": args.threads, "batch": args.batch, "steps": args.steps, "sft_steps": args.sft_steps,
              "sft_batch": args.sft_batch, "rows": rows}
    print(json.dumps(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    failed = [f"{n}/{d}" for n, per in rows.items() for d, r in per.items()
              if isinstance(r, dict) and ("error" in r or r.get("ok") is False)]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_device")(main)())
