"""DAgger (talentrl_core/dagger.py) on real TextWorld games: the teacher's labels computed from a stored trajectory
are the live teacher's at every state the student reached; the mixture plays the teacher at rate beta; a round
trains from the previous round's model on the labelled states, and a second call keeps every finished round."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from transformers import AutoModelForCausalLM

from talentrl_core.config import EnvConfig, LibraryConfig, ModelConfig, SFTConfig, TalentRLConfig
from talentrl_core.dagger import Mixture, dagger_root, labelled_samples, teacher_labels, teacher_name, train_rounds
from talentrl_core.envs.strategies import get_strategy
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.knowledge import LibraryKnowledge
from talentrl_core.library import distill_library
from talentrl_core.library.store import Library
from talentrl_core.models import build_tiny
from talentrl_core.policies import ExpertPolicy, RandomPolicy
from talentrl_core.prompts import parse_for_env
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
from talentrl_core.sft import build_sft_data, sft_job

SMALL = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    intermediate_size=64, vocab_size=600, max_position_embeddings=1024, device="cpu", threads=1)
ENV = EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 8], max_steps=10)
TEACHER = "explore"


@pytest.fixture(scope="module")
def world(session_cache, tmp_path_factory):
    fam = TextWorldFamily(ENV, session_cache)
    tasks = fam.tasks("train")
    fam.prepare(tasks, workers=2, progress=False)
    trajs = run_episodes(fam.make, [EpisodeSpec(t) for t in tasks], ExpertPolicy(TEACHER),
                         RolloutSettings(run_id="dagger-test", split="train"), progress=False)
    lcfg = LibraryConfig(uri=str(tmp_path_factory.mktemp("lib") / "db"), min_support=0.2, delta=0.0)
    distill_library(trajs, lcfg, "textworld")
    return fam, tasks, trajs, LibraryKnowledge(Library.open(lcfg.uri, cfg=lcfg), lcfg)


class LiveTeacher:
    """A random student that writes down, before each of its steps, what the live teacher would play there."""

    name = "live"

    def __init__(self, seed: int):
        self.student, self.said = RandomPolicy(seed), []

    def complete(self, items):
        self.said += [it.env.strategy_action(TEACHER) for it in items if it.kind == "exec"]
        return self.student.complete(items)


def test_labels_from_the_stored_trajectory_are_the_live_teachers(world):
    fam, tasks, _, knowledge = world
    teacher = get_strategy("textworld", TEACHER)
    disagree = 0
    for i, task in enumerate(tasks):
        live = LiveTeacher(seed=i)
        t = run_episodes(fam.make, [EpisodeSpec(task, seed=i)], live, RolloutSettings(max_steps=10), knowledge,
                         progress=False)[0]
        labels = teacher_labels(t, teacher)
        assert labels == live.said and len(labels) == len(t.env_steps()) > 3
        disagree += sum(a != s.action for a, s in zip(labels, t.env_steps()))
    assert disagree  # the random student strays, so the labels say something the student did not do


def test_the_mixture_plays_the_teacher_at_rate_beta(world):
    fam, tasks, _, knowledge = world
    teacher = get_strategy("textworld", TEACHER)
    spec = [EpisodeSpec(tasks[0], seed=3)]
    settings = RolloutSettings(max_steps=10)
    all_teacher = run_episodes(fam.make, spec, Mixture(RandomPolicy(0), TEACHER, 1.0, seed=0), settings, knowledge,
                               progress=False)[0]
    assert [s.action for s in all_teacher.env_steps()] == teacher_labels(all_teacher, teacher) and all_teacher.success
    none = run_episodes(fam.make, spec, Mixture(RandomPolicy(0), TEACHER, 0.0, seed=0), settings, knowledge, progress=False)[0]
    plain = run_episodes(fam.make, spec, RandomPolicy(0), settings, knowledge, progress=False)[0]
    assert [s.action for s in none.env_steps()] == [s.action for s in plain.env_steps()]


def test_labelled_samples_show_the_students_state_and_the_teachers_command(world):
    fam, tasks, _, knowledge = world
    cfg = TalentRLConfig(env=ENV, sft=SFTConfig(dagger_weight=3))
    talent = knowledge.menu("textworld")[0].talent_id
    t = run_episodes(fam.make, [EpisodeSpec(tasks[1], routing="fixed", talent_id=talent, seed=5)], RandomPolicy(5),
                     RolloutSettings(max_steps=10, history=ENV.history, obs_chars=ENV.obs_chars), knowledge,
                     progress=False)[0]
    labels = teacher_labels(t, get_strategy("textworld", TEACHER))
    rows = labelled_samples([t], knowledge, get_strategy("textworld", TEACHER), cfg)
    kept = [(s, a) for s, a in zip(t.env_steps(), labels) if a]
    assert len(rows) == len(kept) > 0
    for row, (step, label) in zip(rows, kept):
        assert row["messages"][:-1] == json.loads(step.prompt)  # the prompt the student saw there
        assert parse_for_env("textworld", row["messages"][-1]["content"]) == label
        assert row["weight"] == 3 and row["dagger"] and row["talent_id"] == talent


def test_dagger_settings_leave_behaviour_cloning_its_job(world, tmp_path, shared_data):
    _, _, trajs, knowledge = world
    base = str(build_tiny(SMALL, tmp_path / "base", shared_data))
    data = build_sft_data(trajs, knowledge, SFTConfig(flat_share=0.0, min_skill_share=0.0))
    plain = sft_job(base, data, SFTConfig(), SMALL)
    assert sft_job(base, data, SFTConfig(dagger_rounds=2, dagger_weight=4, dagger_beta=0.2), SMALL) == plain
    data.samples.append({**data.samples[-1], "dagger": True, "weight": 4})
    assert sft_job(base, data, SFTConfig(), SMALL)["data"]["dagger_weights"] == [4]


@pytest.mark.parametrize("prompt_loss_weight", [0.0, 1.0])  # 1.0: the ALFWorld rerun's setting (results/alfworld)
def test_a_round_trains_from_the_previous_model_and_a_rerun_keeps_every_round(world, tmp_path, shared_data,
                                                                             prompt_loss_weight):
    fam, _, trajs, knowledge = world
    sft = SFTConfig(max_steps=4, batch_size=4, micro_batch_size=4, lr=3e-3, warmup_steps=0, save_steps=2,
                    flat_share=0.0, min_skill_share=0.0, dagger_rounds=1, dagger_games=2, dagger_steps=3,
                    dagger_teacher=TEACHER, max_cut_share=1.0, dagger_routing_warmup=2,
                    prompt_loss_weight=prompt_loss_weight)
    cfg = TalentRLConfig(env=ENV, model=SMALL, sft=sft)
    base = str(build_tiny(SMALL, tmp_path / "base", shared_data))
    data = build_sft_data(trajs, knowledge, sft)
    out = tmp_path / "sft"
    info = train_rounds(cfg, fam, knowledge, data, base, out, {"env": "textworld"})
    root = dagger_root(out)
    (report,) = info["dagger"]
    assert report["games"] == 2 and report["samples"] > 0
    assert (root / "round-1" / "env=textworld" / "dagger-textworld-round1.parquet").exists()
    meta = json.loads((out / "talentrl_meta.json").read_text())
    assert meta["dagger_round"] == 1 and meta["env"] == "textworld"
    assert meta["steps"] == 3 + meta["routing_warmup"]["steps"]  # the round's steps after its warm-up
    assert meta["data_report"]["dagger"] == [report]
    assert meta["routing_warmup"]["steps"] >= 1  # the round's routing warm-up ran (round 0 had none)
    assert json.loads((root / "round-0" / "talentrl_meta.json").read_text())["routing_warmup"]["steps"] == 0
    states = [json.loads(f.read_text()) for f in out.parent.glob(f"{out.name}.work/checkpoint-*/trainer_state.json")]
    assert states and any("prompt_loss" in h for s in states for h in s["log_history"]) == (prompt_loss_weight > 0)
    bc = AutoModelForCausalLM.from_pretrained(str(root / "round-0")).state_dict()
    after = AutoModelForCausalLM.from_pretrained(str(out)).state_dict()
    assert any(not torch.equal(bc[k], after[k]) for k in bc)
    again = train_rounds(cfg, fam, knowledge, data, base, out, {"env": "textworld"})
    assert again["kept"] and again["dagger"] == [report]


def test_a_stop_signal_pauses_the_students_games_between_parts_and_a_rerun_plays_only_the_rest(
        world, tmp_path, shared_data, monkeypatch):
    from talentrl_core import dagger, rollout
    from talentrl_core.checkpoints import Paused

    fam, _, trajs, knowledge = world
    sft = SFTConfig(max_steps=2, batch_size=4, micro_batch_size=4, warmup_steps=0, flat_share=0.0, min_skill_share=0.0,
                    dagger_rounds=1, dagger_games=2, dagger_steps=2, dagger_teacher=TEACHER, max_cut_share=1.0)
    cfg = TalentRLConfig(env=ENV, model=SMALL, sft=sft)
    base = str(build_tiny(SMALL, tmp_path / "base", shared_data))
    data = build_sft_data(trajs, knowledge, sft)
    monkeypatch.setattr(dagger, "PART_GAMES", 1)
    real, played = rollout.run_episodes, []

    def stopped_in_the_first_part(make_env, specs, *a, **kw):
        if not played:
            os.kill(os.getpid(), signal.SIGTERM)  # a stop asked while the first part plays: it finishes, then pauses
        played.append([s.task.task_id for s in specs])
        return real(make_env, specs, *a, **kw)

    monkeypatch.setattr(rollout, "run_episodes", stopped_in_the_first_part)
    out = tmp_path / "sft"
    with pytest.raises(Paused, match="SIGTERM, 1 of 2 parts kept"):
        train_rounds(cfg, fam, knowledge, data, base, out, {"env": "textworld"})
    assert len(played) == 1 and not out.exists()
    info = train_rounds(cfg, fam, knowledge, data, base, out, {"env": "textworld"})
    assert len(played) == 2 and played[0] != played[1]  # the rerun played the second game only
    assert info["dagger"][0]["games"] == 2 and (out / "talentrl_meta.json").exists()


def test_a_teacher_is_named_or_the_one_collection_imitated():

    with pytest.raises(ValueError, match="sft.dagger_teacher"):
        teacher_name(TalentRLConfig(env=ENV, sft=SFTConfig(dagger_rounds=1)))
    with pytest.raises(ValueError, match="sft.dagger_teacher: no strategy 'nosuch'.*explore"):
        teacher_name(TalentRLConfig(env=ENV, sft=SFTConfig(dagger_rounds=1, dagger_teacher="nosuch")))
    one = TalentRLConfig(env=ENV, sft=SFTConfig(dagger_rounds=1))
    one.collect.strategies = ["follow"]
    assert teacher_name(one) == "follow"
