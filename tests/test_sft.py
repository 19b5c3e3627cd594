"""Talent-aware SFT: the sample context is what inference retrieves; a few steps change weights, loss falls."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from talentrl_core.config import EnvConfig, LibraryConfig, ModelConfig, SFTConfig
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.knowledge import LibraryKnowledge
from talentrl_core.library import distill_library
from talentrl_core.library.store import Library
from talentrl_core.models import build_tiny
from talentrl_core.policies import ExpertPolicy
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
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
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    assert data.report["n_routing"] == len(trajs) and data.report["skill_context_share"] >= 0.5
    t = trajs[0]
    label = knowledge.label_for(t)
    assert label is not None
    # inference: the same task under the same talent, played by the expert, records the prompt it saw
    replay = run_episodes(fam.make, [EpisodeSpec(tasks[0], routing="fixed", talent_id=label)], ExpertPolicy(), RolloutSettings(), knowledge, progress=False)[0]
    execs = [s for s in data.samples if s["kind"] == "exec" and s["task_id"] == t.task_id]
    first_exec = execs[0]
    # at every step, not only the first: the same history window, actions so far and skills (prompts.exec_context)
    assert len(execs) == len(replay.env_steps()) > 1
    assert [json.loads(s.prompt) for s in replay.env_steps()] == [e["messages"][:-1] for e in execs]
    assert replay.retrieved_skill_ids == first_exec["skill_ids"] and first_exec["skill_ids"]
    route = [s for s in data.samples if s["kind"] == "route" and s["task_id"] == t.task_id][0]
    shown = {m.talent_id: m.label for m in knowledge.menu("textworld")}
    assert route["messages"][-1]["content"] == f"<talent>{shown[label]}</talent>" and shown[label].startswith("T")


def test_sft_few_steps_change_weights_and_lower_loss(world, tmp_path, shared_data):
    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
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
    assert full["length"] == cut["length"] == len(full["input_ids"])


def test_cue_only_routing_samples_label_the_restated_cue_and_not_the_choice(tmp_path, shared_data):
    """sft.routing_target=cue_only (issue 38, A2): the routing sample's loss covers ``<cue>east</cue>`` only; the
    talent tag after it (and the end of the turn) is unlabelled. A task whose routing view lacks the cue is named."""
    from talentrl_core.models import load_model
    from talentrl_core.prompts import RoutingCue
    from talentrl_core.sft import tokenize_sample
    from talentrl_core.sft_data import restated_cue
    from talentrl_core.trajectories import Trajectory

    _, tok = load_model(build_tiny(SMALL, tmp_path / "base", shared_data))
    msgs = [{"role": "user", "content": "Task: find the coin.\nObs: A sign on the wall reads: the coin lies east."},
            {"role": "assistant", "content": "<cue>east</cue><talent>T2</talent>"}]
    both, cue = tokenize_sample(tok, msgs, 1024), tokenize_sample(tok, msgs, 1024, "<cue>east</cue>")
    assert both["input_ids"] == cue["input_ids"]
    label = lambda x: tok.decode([i for i, m in zip(x["input_ids"], x["assistant_masks"]) if m])  # noqa: E731
    assert label(both) == "<cue>east</cue><talent>T2</talent><|im_end|>" and label(cue) == "<cue>east</cue>"
    with pytest.raises(ValueError, match="does not start with"):
        tokenize_sample(tok, msgs, 1024, "<cue>north</cue>")
    ring = RoutingCue(r"the coin lies (\w+)", ("east", "north"))
    t = Trajectory("r", "textworld", "train", "t1", "x", "{}", goal="Find the coin.",
                   initial_observation="Find the coin.\n\n-= Hall =-\nA sign on the wall reads: the coin lies north.")
    assert restated_cue(ring, t, 200) == "<cue>north</cue>" and restated_cue(None, t, 200) == ""
    with pytest.raises(ValueError, match="task t1: env.routing_cue"):
        restated_cue(ring, t, 20)  # the sign is past what the router sees


def test_too_many_cut_samples_are_refused_by_name():
    """A cut sample loses its task line: beyond ``sft.max_cut_share`` SFT refuses, naming the settings to raise."""
    from talentrl_core.sft_data import check_cut

    rows = [{"input_ids": [1] * 64, "length": n} for n in (10, 64, 65, 900)]
    assert check_cut([dict(r) for r in rows], 900, 0.0) == {"n_cut": 0, "cut_share": 0.0, "longest": 900}
    kept = [dict(r) for r in rows]
    assert check_cut(kept, 64, 0.5) == {"n_cut": 2, "cut_share": 0.5, "longest": 900}
    assert all("length" not in r for r in kept)  # the dataset gets only what the trainer reads
    with pytest.raises(ValueError, match=r"2 of 4 SFT samples \(50.0%\) are longer than 64 tokens.*sft.max_length and "
                                         r"model.max_position_embeddings.*sft.max_cut_share=0.25"):
        check_cut([dict(r) for r in rows], 64, 0.25)


def test_routing_warmup_steps_train_routing_samples_first(world, tmp_path, shared_data, monkeypatch):
    """``sft.routing_warmup_steps``: the first steps' batches hold routing samples only (each drawn once per epoch of
    them), then ``max_steps`` steps of the mix; a checkpoint trained that way differs from one trained on the mix
    only; the routing warm-up needs routing samples."""
    import talentrl_core.sft as sft_mod

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    kinds = [s["kind"] for s in data.samples]
    orders = []
    real = sft_mod.length_sorted_order

    def recorded(*a, **k):  # the real order, kept for the assertions
        orders.append(real(*a, **k))
        return orders[-1]

    monkeypatch.setattr(sft_mod, "length_sorted_order", recorded)
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=6, lr=3e-3, warmup_steps=0, batch_size=8, save_steps=6, routing_warmup_steps=3)
    info = train_sft(data, str(base), tmp_path / "warm", cfg, SMALL)
    assert info["steps"] == 3 + 6 and info["routing_warmup"] == {"steps": 3, "ended_by_check": False, "checks": {}}
    n_route = kinds.count("route")
    first, rest = orders[0][: 3 * 8], orders[0][3 * 8:]
    assert {kinds[i] for i in first} == {"route"} and "exec" in {kinds[i] for i in rest} and len(rest) == 6 * 8
    assert max(first.count(i) for i in set(first)) <= -(-len(first) // n_route)  # epochs: no sample twice before all once
    import dataclasses

    train_sft(data, str(base), tmp_path / "mix", dataclasses.replace(cfg, routing_warmup_steps=0), SMALL)
    assert {kinds[i] for i in orders[1][: 3 * 8]} == {"route", "exec"}
    warm = AutoModelForCausalLM.from_pretrained(str(tmp_path / "warm")).state_dict()
    mix = AutoModelForCausalLM.from_pretrained(str(tmp_path / "mix")).state_dict()
    assert any(not torch.equal(warm[k], mix[k]) for k in warm)
    with pytest.raises(ValueError, match="routing_warmup_steps=6 needs sft.include_routing=true"):
        SFTConfig(max_steps=6, routing_warmup_steps=6, include_routing=False)


def test_routing_warmup_until_ends_the_warmup_on_a_passing_check(world, tmp_path, shared_data, monkeypatch):
    """``sft.routing_warmup_until``: the warm-up runs routing samples until a check passes (here scripted: the second
    check), one more step, then ``max_steps`` steps of the mix from its start, the learning rate held through the
    warm-up and decayed to zero over the mix; the end is in the trainer's log and the model's meta."""
    import talentrl_core.routing_warmup as rw

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    kinds = [s["kind"] for s in data.samples]
    scripted = iter([0.25, 1.0])
    monkeypatch.setattr(rw, "label_accuracy", lambda model, rows: {"min": next(scripted), "by_label": {}})
    drawn = []
    real_iter = rw.WarmupSampler.__iter__

    def recorded(self):
        for i in real_iter(self):
            drawn.append(i)
            yield i

    monkeypatch.setattr(rw.WarmupSampler, "__iter__", recorded)
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=9, lr=3e-3, warmup_steps=0, batch_size=4, micro_batch_size=2, save_steps=9,
                    routing_warmup_steps=6, routing_warmup_until=0.9, routing_warmup_check_every=2)
    info = train_sft(data, str(base), tmp_path / "gated", cfg, SMALL)
    assert info["routing_warmup"] == {"steps": 5, "ended_by_check": True, "checks": {2: 0.25, 4: 1.0}}
    assert info["steps"] == 5 + 9
    state = json.loads((tmp_path / "gated.work" / "checkpoint-14" / "trainer_state.json").read_text())
    lrs = [h["learning_rate"] for h in state["log_history"] if "learning_rate" in h]  # one per step
    assert lrs == pytest.approx([3e-3] * 5 + [3e-3 * (9 - j) / 9 for j in range(9)])  # the peak, then linear to 0
    from talentrl_core.sft import length_sorted_order, tokenize_sample
    from talentrl_core.models import load_model

    _, tok = load_model(str(base))
    lengths = [len(tokenize_sample(tok, s["messages"], 1024)["input_ids"]) for s in data.samples]
    order = length_sorted_order(lengths, 4, 6 + 9, cfg.seed, [1 if k == "exec" else cfg.routing_weight for k in kinds],
                                first=6, first_rows=[i for i, k in enumerate(kinds) if k == "route"])
    assert drawn == list(range(5 * 4)) + list(range(6 * 4, 15 * 4))  # 5 warm-up steps, then the mix's 9
    rows = [order[p] for p in drawn]  # the dataset holds the samples in that order
    assert {kinds[i] for i in rows[: 5 * 4]} == {"route"} and "exec" in {kinds[i] for i in rows[5 * 4:]}
    with pytest.raises(ValueError, match="routing_warmup_until=0.9 needs sft.routing_warmup_steps > 0"):
        SFTConfig(max_steps=6, routing_warmup_until=0.9)


def test_routing_warmup_check_scores_labels_teacher_forced(tmp_path, shared_data):
    """A row whose label is the model's own top token at every label position scores 1; one wrong token scores 0 for
    that label; ``min`` is the worst label's share."""
    from talentrl_core.models import load_model
    from talentrl_core.routing_warmup import label_accuracy

    model, tok = load_model(build_tiny(SMALL, tmp_path / "base", shared_data))
    prompt = tok("Task: find the coin. Talents: T1 T2. Choose:")["input_ids"]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(3):  # the model's own greedy continuation
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    own = {"input_ids": ids, "assistant_masks": [0] * len(prompt) + [1] * 3}
    wrong = {"input_ids": ids[:-1] + [(ids[-1] + 1) % SMALL.vocab_size], "assistant_masks": own["assistant_masks"]}
    got = label_accuracy(model, [own, own, wrong])
    assert sorted(got["by_label"].values()) == [0.0, 1.0] and got["min"] == 0.0
    assert label_accuracy(model, [own])["min"] == 1.0


def test_routing_warmup_end_is_read_back_from_a_checkpoint(tmp_path):
    """A resumed run reads the warm-up's end from the checkpoint's trainer state (before it ended: the cap); a
    trainer state that cannot be read is named."""
    from talentrl_core.routing_warmup import WarmupGate

    ck = tmp_path / "checkpoint-8"
    ck.mkdir()
    (ck / "trainer_state.json").write_text(json.dumps({"log_history": [
        {"step": 4, "routing_warmup_accuracy": 0.5}, {"step": 6, "routing_warmup_accuracy": 0.97, "routing_warmup_end": 7}]}))
    gate = WarmupGate(cap=20, mix=30, per_step=4, until=0.9, every=2, rows=[])
    gate.restore(ck)
    assert (gate.end, gate.passed) == (7, True) and gate.position(27) == 27 and gate.position(28) == 28 + 13 * 4
    (ck / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 4, "routing_warmup_accuracy": 0.5}]}))
    fresh = WarmupGate(cap=20, mix=30, per_step=4, until=0.9, every=2, rows=[])
    fresh.restore(ck)
    assert (fresh.end, fresh.passed) == (20, False)
    (ck / "trainer_state.json").write_text("{not json")
    with pytest.raises(ValueError, match="checkpoint-8/trainer_state.json: cannot read"):
        fresh.restore(ck)


def test_moved_artifacts_resume_and_a_damaged_newest_checkpoint_falls_back(world, tmp_path, shared_data, capsys):
    """Issue 41: the job names the base model by content, so a moved artifacts folder resumes; a checkpoint damaged
    on disk after it was complete is named, set aside (not deleted), and the one before it resumed, ending on the
    same weights as the undisturbed run."""
    from safetensors.torch import load_file

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    a, b = tmp_path / "a", tmp_path / "b"
    build_tiny(SMALL, a / "base", shared_data)
    cfg = SFTConfig(max_steps=4, lr=3e-3, warmup_steps=1, batch_size=8, save_steps=2, keep_checkpoints=0)
    train_sft(data, str(a / "base"), a / "sft", cfg, SMALL)
    ref = load_file(a / "sft" / "model.safetensors")
    a.rename(b)
    info = train_sft(data, str(b / "base"), b / "sft", cfg, SMALL)
    assert info["resumed_from"].endswith("checkpoint-4") and not list(b.glob("*.prev-*"))
    opt = b / "sft.work" / "checkpoint-4" / "optimizer.pt"
    size = opt.stat().st_size
    opt.write_bytes(opt.read_bytes()[: size // 2])
    capsys.readouterr()
    info = train_sft(data, str(b / "base"), b / "sft", cfg, SMALL)
    err = capsys.readouterr().err
    assert info["resumed_from"].endswith("checkpoint-2"), err
    assert f"{opt}: {size // 2} bytes, {size} when written" in err and "set aside as" in err
    assert (b / "sft.work" / "damaged-checkpoint-4" / "optimizer.pt").stat().st_size == size // 2
    after = load_file(b / "sft" / "model.safetensors")
    assert all(torch.equal(ref[k], after[k]) for k in ref)


def test_a_run_past_its_time_budget_pauses_checkpointed_and_resumes_to_the_same_weights(world, tmp_path, shared_data):
    """``sft.max_minutes`` is a sitting's budget: past it the run checkpoints the step it reached and raises
    ``Paused`` without writing a final model; the same job (the budget is not part of it, nor of a job recorded by
    an earlier version) resumes from that checkpoint, at this sitting's checkpoint interval, and ends on the weights of
    an undisturbed run."""
    import dataclasses

    from safetensors.torch import load_file

    from talentrl_core.checkpoints import Paused

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=4, lr=3e-3, warmup_steps=1, batch_size=8, save_steps=4, keep_checkpoints=0)
    train_sft(data, str(base), tmp_path / "ref", cfg, SMALL)
    with pytest.raises(Paused, match=r"step 1 of 4 after sft.max_minutes=1e-06"):
        train_sft(data, str(base), tmp_path / "sft", dataclasses.replace(cfg, max_minutes=1e-6), SMALL)
    assert not (tmp_path / "sft").exists()
    assert [p.name for p in (tmp_path / "sft.work").glob("checkpoint-*")] == ["checkpoint-1"]
    # a job recorded by a version that counted the budget in the job (workdir.RETIRED), and before the prompt loss
    # existed (workdir.ADDED: its default is what that version did), still resumes
    recorded = tmp_path / "sft.work" / "talentrl_job.json"
    job = json.loads(recorded.read_text())
    old = {k: v for k, v in job["sft"].items() if k != "prompt_loss_weight"}
    recorded.write_text(json.dumps({**job, "sft": {**old, "max_minutes": 0.0}}))
    info = train_sft(data, str(base), tmp_path / "sft", dataclasses.replace(cfg, save_steps=2), SMALL)
    assert info["resumed_from"].endswith("checkpoint-1") and info["steps"] == 4
    # this sitting's checkpoint interval holds, not the one the resumed checkpoint was saved under
    assert sorted(p.name for p in (tmp_path / "sft.work").glob("checkpoint-*")) == [f"checkpoint-{n}" for n in (1, 2, 4)]
    ref, after = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "sft" / "model.safetensors")
    assert all(torch.equal(ref[k], after[k]) for k in ref)


def test_a_stop_signal_checkpoints_the_step_in_progress_and_resumes_to_the_same_weights(world, tmp_path, shared_data):
    """SIGTERM during training (``kill``, a scheduler's stop, a machine shutting down) pauses the run as a spent
    budget does: the step in progress is checkpointed, ``Paused`` names the signal, no final model is written, the
    handler that was there is back; the same command resumes to the weights of an undisturbed run."""
    import os
    import signal

    from safetensors.torch import load_file

    from talentrl_core.checkpoints import Paused

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=4, lr=3e-3, warmup_steps=1, batch_size=8, save_steps=4, keep_checkpoints=0)
    train_sft(data, str(base), tmp_path / "ref", cfg, SMALL)

    class StopFromOutside:  # the signal arrives while step 1 is being logged
        def log(self, metrics, step):
            if step == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Paused, match=r"sft paused at step 2 of 4 after SIGTERM \(checkpoint in "):
        train_sft(data, str(base), tmp_path / "sft", cfg, SMALL, tracker=StopFromOutside())
    assert signal.getsignal(signal.SIGTERM) is before and not (tmp_path / "sft").exists()
    assert [p.name for p in (tmp_path / "sft.work").glob("checkpoint-*")] == ["checkpoint-2"]
    info = train_sft(data, str(base), tmp_path / "sft", cfg, SMALL)
    assert info["resumed_from"].endswith("checkpoint-2") and info["steps"] == 4
    ref, after = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "sft" / "model.safetensors")
    assert all(torch.equal(ref[k], after[k]) for k in ref)


def _prompt_nll(model_dir, data, tok_dir) -> float:
    """Mean NLL of the prompt tokens of ``data``'s samples under the model in ``model_dir``."""
    from transformers import AutoTokenizer

    from talentrl_core.sft_data import tokenize_sample

    model, tok = AutoModelForCausalLM.from_pretrained(str(model_dir)), AutoTokenizer.from_pretrained(str(tok_dir))
    total = n = 0.0
    with torch.no_grad():
        for s in data.samples[:16]:
            row = tokenize_sample(tok, s["messages"], 1024)
            ids = torch.tensor([row["input_ids"]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            nll = -logp.gather(1, ids[0, 1:, None])[:, 0]
            prompt = torch.tensor(row["assistant_masks"][1:]) == 0
            total, n = total + float(nll[prompt].sum()), n + int(prompt.sum())
    return total / n


def test_prompt_loss_weight_trains_the_prompt_tokens_too(world, tmp_path, shared_data):
    """``sft.prompt_loss_weight`` adds a language-modelling loss on the prompt tokens: the same steps from the same
    base model leave the prompts more predictable than the answer-only loss does, and the prompt loss is logged."""
    import dataclasses

    fam, tasks, trajs, knowledge = world
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.5))
    base = build_tiny(SMALL, tmp_path / "base", shared_data)
    cfg = SFTConfig(max_steps=10, lr=1e-2, warmup_steps=1, batch_size=8, save_steps=10, keep_checkpoints=0)
    train_sft(data, str(base), tmp_path / "answer", cfg, SMALL)
    with_prompt = dataclasses.replace(cfg, prompt_loss_weight=1.0)
    train_sft(data, str(base), tmp_path / "prompt", with_prompt, SMALL)
    plain, trained = _prompt_nll(tmp_path / "answer", data, base), _prompt_nll(tmp_path / "prompt", data, base)
    assert trained < plain - 0.25, (trained, plain)  # measured: 5.40 against 5.88 nats
    state = json.loads((tmp_path / "prompt.work" / "checkpoint-10" / "trainer_state.json").read_text())
    logged = [h["prompt_loss"] for h in state["log_history"] if "prompt_loss" in h]
    assert logged and logged[-1] < logged[0]
    with pytest.raises(ValueError, match="prompt_loss_weight"):
        SFTConfig(prompt_loss_weight=-1.0)
