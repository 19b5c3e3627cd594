"""Talent-aware SFT: the sample context is what inference retrieves; a few steps change weights, loss falls."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from talentrl_core.config import EnvConfig, LibraryConfig, ModelConfig, SFTConfig
from talentrl_core.envs.textworld_env import TextWorldFamily
from talentrl_core.knowledge import LibraryKnowledge
from talentrl_core.library import distill_library
from talentrl_core.library.store import Library
from talentrl_core.models import build_tiny
from talentrl_core.rollout import EpisodeSpec, ExpertPolicy, RolloutSettings, run_episodes
from talentrl_core.sft import build_sft_data, train_sft

SMALL = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    intermediate_size=64, vocab_size=600, max_position_embeddings=1024, device="cpu")


@pytest.fixture(scope="module")
def world(session_cache, tmp_path_factory):
    fam = TextWorldFamily(EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 8]), session_cache)
    tasks = fam.tasks("train")
    fam.prepare(tasks, workers=2, progress=False)
    trajs = run_episodes(fam.make, [EpisodeSpec(t) for t in tasks], ExpertPolicy(), RolloutSettings(run_id="sft-test", split="train"), progress=False)
    for i, t in enumerate(trajs):
        t.traj_uid = f"u{i}"
    lcfg = LibraryConfig(uri=str(tmp_path_factory.mktemp("lib") / "db"), min_support=0.2, delta=0.0)
    distill_library(trajs, lcfg, "textworld")
    knowledge = LibraryKnowledge(Library.open(lcfg.uri, cfg=lcfg), lcfg)
    return fam, tasks, trajs, knowledge


def test_sft_context_equals_inference_retrieval(world):
    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(min_skill_share=0.5))
    assert data.report["n_routing"] == len(trajs) and data.report["skill_context_share"] >= 0.5
    t = trajs[0]
    label = knowledge.label_for(t)
    assert label is not None
    # inference: the same task under the same talent, played by the expert, records the prompt it saw
    replay = run_episodes(fam.make, [EpisodeSpec(tasks[0], routing="fixed", talent_id=label)], ExpertPolicy(), RolloutSettings(), knowledge, progress=False)[0]
    first_exec = [s for s in data.samples if s["kind"] == "exec" and s["task_id"] == t.task_id][0]
    assert json.loads(replay.steps[0].prompt) == first_exec["messages"][:-1]
    assert replay.retrieved_skill_ids == first_exec["skill_ids"] and first_exec["skill_ids"]
    route = [s for s in data.samples if s["kind"] == "route" and s["task_id"] == t.task_id][0]
    shown = {m.talent_id: m.label for m in knowledge.menu("textworld")}
    assert route["messages"][-1]["content"] == f"<talent>{shown[label]}</talent>" and shown[label].startswith("T")


def test_sft_few_steps_change_weights_and_lower_loss(world, tmp_path, shared_data):
    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(min_skill_share=0.5))
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=12, lr=3e-3, warmup_steps=2, batch_size=8, save_steps=4, keep_checkpoints=0)

    class Recorder:
        logged: list = []

        def log(self, metrics, step=None):
            self.logged.append((step, metrics))

    rec = Recorder()
    info = train_sft(data, str(base), tmp_path / "sft", cfg, SMALL, tracker=rec)
    # every logged step reaches the tracker (loss, learning rate, grad norm) at its optimizer step
    steps = [s for s, m in rec.logged if "sft/loss" in m]
    assert len(steps) >= 4 and steps == sorted(steps) and steps[-1] <= 12
    assert all({"sft/learning_rate", "sft/grad_norm"} <= set(m) for s, m in rec.logged if "sft/loss" in m)
    before = AutoModelForCausalLM.from_pretrained(str(base)).state_dict()
    after = AutoModelForCausalLM.from_pretrained(str(tmp_path / "sft")).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert info["last_logged_loss"] < info["first_logged_loss"]
    meta = json.loads((tmp_path / "sft" / "talentrl_meta.json").read_text())
    assert meta["steps"] == 12
    # resumable: the work folder holds checkpoints (keep_checkpoints=0: every one); a rerun resumes from the last one
    assert sorted(int(p.name.split("-")[1]) for p in (tmp_path / "sft.work").glob("checkpoint-*")) == [4, 8, 12]
    info2 = train_sft(data, str(base), tmp_path / "sft", cfg, SMALL)
    assert info2["resumed"] is True
    # a checkpoint cut short by a kill (no trainer state) and a staging folder of an unfinished write: resume
    # falls back to the newest complete checkpoint and tidies both
    work = tmp_path / "sft.work"
    (work / "checkpoint-12" / "trainer_state.json").unlink()
    (work / ".staging-checkpoint-18").mkdir()
    info2b = train_sft(data, str(base), tmp_path / "sft", cfg, SMALL)
    assert info2b["resumed_from"] == str(work / "checkpoint-8") and info2b["steps"] == 12
    assert not (work / ".staging-checkpoint-18").exists()
    assert (work / "checkpoint-12" / "trainer_state.json").exists()  # rewritten whole by the resumed run
    # a different job (here: another learning rate) never resumes the old job's checkpoints, and never deletes
    # them: the old folders are moved aside, the message names the setting that differs
    import dataclasses

    info3 = train_sft(data, str(base), tmp_path / "sft", dataclasses.replace(cfg, lr=1e-3, keep_checkpoints=1), SMALL)
    assert info3["resumed"] is False
    moved = sorted(tmp_path.glob("sft.work.prev-*"))
    assert len(moved) == 1 and (moved[0] / "checkpoint-12").exists()
    assert [p.name for p in work.glob("checkpoint-*")] == ["checkpoint-12"]  # keep_checkpoints=1: the newest only
    kept = sorted(tmp_path.glob("sft.prev-*"))
    assert len(kept) == 1 and (kept[0] / "model.safetensors").exists()
    assert json.loads((kept[0] / "talentrl_job.json").read_text())["sft"]["lr"] == cfg.lr


def test_long_sample_loses_its_prompt_start_never_its_label(tmp_path, shared_data):
    from talentrl_core.models import load_model
    from talentrl_core.sft import tokenize_sample

    _, tok = load_model(build_tiny(SMALL, tmp_path / "base", shared_data))
    msgs = [{"role": "user", "content": "Obs: a long room description. " * 80},
            {"role": "assistant", "content": "<action>go east</action>"}]
    full = tokenize_sample(tok, msgs, 10_000)
    cut = tokenize_sample(tok, msgs, 64)
    assert len(full["input_ids"]) > 64 and len(cut["input_ids"]) == 64
    assert cut["input_ids"] == full["input_ids"][-64:]  # the start goes, as at generation time
    label = [i for i, m in zip(cut["input_ids"], cut["assistant_masks"]) if m]
    assert tok.decode(label) == "<action>go east</action><|im_end|>"


def test_routing_warmup_steps_train_routing_samples_first(world, tmp_path, shared_data, monkeypatch):
    """``sft.routing_warmup_steps``: the first steps' batches hold routing samples only (each drawn once per epoch of
    them), the later ones the mix; a checkpoint trained that way differs from one trained on the mix throughout."""
    import talentrl_core.sft as sft_mod

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(min_skill_share=0.5))
    kinds = [s["kind"] for s in data.samples]
    orders = []
    real = sft_mod.length_sorted_order

    def recorded(*a, **k):  # the real order, kept for the assertions
        orders.append(real(*a, **k))
        return orders[-1]

    monkeypatch.setattr(sft_mod, "length_sorted_order", recorded)
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=6, lr=3e-3, warmup_steps=0, batch_size=8, save_steps=6, routing_warmup_steps=3)
    train_sft(data, str(base), tmp_path / "warm", cfg, SMALL)
    n_route = kinds.count("route")
    first, rest = orders[0][: 3 * 8], orders[0][3 * 8:]
    assert {kinds[i] for i in first} == {"route"} and "exec" in {kinds[i] for i in rest} and len(rest) == 3 * 8
    assert max(first.count(i) for i in set(first)) <= -(-len(first) // n_route)  # epochs: no sample twice before all once
    import dataclasses

    train_sft(data, str(base), tmp_path / "mix", dataclasses.replace(cfg, routing_warmup_steps=0), SMALL)
    assert {kinds[i] for i in orders[1][: 3 * 8]} == {"route", "exec"}
    warm = AutoModelForCausalLM.from_pretrained(str(tmp_path / "warm")).state_dict()
    mix = AutoModelForCausalLM.from_pretrained(str(tmp_path / "mix")).state_dict()
    assert any(not torch.equal(warm[k], mix[k]) for k in warm)
    with pytest.raises(ValueError, match="routing_warmup_steps=6 needs"):
        SFTConfig(max_steps=6, routing_warmup_steps=6)
