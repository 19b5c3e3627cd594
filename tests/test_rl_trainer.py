"""RL trainer on a tiny model and real TextWorld coin_collector (level 5) games.

(a) one update changes the weights; routing samples carry the routing advantage of their arm, execution
    samples the execution advantage of their trajectory; recomputed log-probs equal the rollout's;
(b) matched arms: rollout j of every arm has the same seed and initial observation (and with the same
    talent the same actions);
(c) kill -9 after checkpoint-2, resume → final weights equal to an uninterrupted run;
(d) two processes (torchrun, gloo, CPU) end with identical weights;
(e) the flat baseline: one arm, no routing samples, talent None.
"""

from __future__ import annotations

import dataclasses
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from talentrl_core.config import EnvConfig, ModelConfig, RLConfig, TalentRLConfig, TrackerConfig
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.models import build_tiny
from talentrl_core.rl.advantages import execution_advantages, routing_advantages
from talentrl_core.rl.samples import collate, token_logprobs
from talentrl_core.rl.static_knowledge import StaticKnowledge
from talentrl_core.rl.cli import config_from_dict
from talentrl_core.rl.trainer import RLTrainer, check_config, train_rl
from talentrl_core.rollout import run_episodes

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
             vocab_size=600, max_position_embeddings=512, device="cpu", max_new_tokens=16,
             compute_dtype="float32")  # exact log-prob checks; bf16 autocast is covered in test_models.py
BANK = json.loads((ROOT / "tests" / "fixtures" / "textworld_bank.json").read_text())  # also bench_rl's


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model on shared CPUs: one intra-op thread is ~10x faster than two competing with other jobs."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def env_cfg(session_cache):
    return EnvConfig(challenges=["tw-coin_collector"], challenge_settings="level=5", train_seeds=[1, 4], max_steps=10,
                     history=1, obs_chars=150, cache_dir=str(session_cache))


@pytest.fixture(scope="module")
def family(env_cfg, session_cache):
    fam = TextWorldFamily(env_cfg, session_cache)
    fam.prepare(fam.tasks("train"), workers=2, progress=False)
    return fam


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shared_data):
    return str(build_tiny(ModelConfig(**SMALL), tmp_path_factory.mktemp("rl") / "tiny", shared_data))


@pytest.fixture(scope="module")
def bank_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("bank") / "bank.json"
    p.write_text(json.dumps(BANK))
    return p


def make_cfg(env_cfg, tmp, **rl) -> TalentRLConfig:
    # seed 2: both groups of the first step have reward variance (seed 0 draws all-zero groups, which are filtered)
    base = dict(steps=1, tasks_per_step=2, group_size=8, n_arms=2, lr=1e-3, checkpoint_every=1, seed=2)
    base.update(rl)
    return TalentRLConfig(experiment="test", artifacts_dir=str(tmp), env=env_cfg, model=ModelConfig(**SMALL),
                          rl=RLConfig(**base), tracker=TrackerConfig(mode="disabled"))


@pytest.fixture(scope="module")
def one_step(env_cfg, family, tiny, tmp_path_factory):
    """One update of the contrastive trainer, run stage by stage so the test can look at each."""
    tmp = tmp_path_factory.mktemp("one")
    tr = RLTrainer(make_cfg(env_cfg, tmp), family, StaticKnowledge.from_dict(BANK), tiny, tmp / "out", progress=False)
    before = {n: p.detach().clone() for n, p in tr.unwrapped().named_parameters()}
    tasks = tr.step_tasks(0)
    groups = tr.route(0, tasks)
    tr.rollout(0, groups)
    samples, stats = tr.build_samples(0, groups)
    with torch.no_grad():  # the policy before the update: recomputed log-probs must equal the recorded ones
        tr.unwrapped().eval()
        diffs = []
        for i in range(0, len(samples), 16):
            chunk = samples[i:i + 16]
            b = collate(chunk, tr.tok, tr.vocab, "cpu", tr.tries)
            diffs.append(((token_logprobs(tr.model, b, tr.cfg.model.temperature) - b.old_logprobs) * b.mask).abs().max())
    metrics = tr.update(samples)
    after = {n: p.detach().clone() for n, p in tr.unwrapped().named_parameters()}
    return dict(trainer=tr, groups=groups, samples=samples, stats=stats, metrics=metrics, before=before, after=after,
                max_logprob_diff=float(max(diffs)))


def test_one_update_changes_weights_and_assigns_advantages_by_sample_kind(one_step):
    groups, samples = one_step["groups"], one_step["samples"]
    assert any(not torch.equal(one_step["before"][n], one_step["after"][n]) for n in one_step["before"])
    assert one_step["metrics"]["rl/skipped"] == 0.0 and one_step["metrics"]["rl/grad_norm"] > 0
    # rollout log-probs (constrained mask, temperature, left truncation) are reproduced by training
    assert one_step["max_logprob_diff"] < 1e-4
    kept = 0
    for gr in groups:
        R = np.array([t.final_reward for t in gr.trajs])
        arms = np.array(gr.arm_of)
        mine = [s for s in samples if s.group == gr.index]
        if R.max() == R.min():  # zero-variance group: filtered (rl.filter_zero_var)
            assert not mine
            continue
        kept += 1
        a_route = routing_advantages([R[arms == k] for k in range(2)])
        a_exec = execution_advantages(R, arms)
        route = [s for s in mine if s.kind == "route"]
        exe = [s for s in mine if s.kind == "exec"]
        assert sorted(s.arm for s in route) == [0, 1]  # one routing sample per talent arm
        for s in route:
            assert s.advantage == pytest.approx(a_route[s.arm], abs=1e-5)
            assert s.completion_ids[-1] == one_step["trainer"].tok.eos_token_id
            assert one_step["trainer"].tok.decode(s.completion_ids[:-1]) == f"<talent>{gr.talents[s.arm]}</talent>"
        for s in exe:
            assert s.advantage == pytest.approx(a_exec[s.traj], abs=1e-5)
            assert arms[s.traj] == s.arm
        assert len(exe) == sum(len(t.steps) for t in gr.trajs)
        assert any(abs(s.advantage) > 0 for s in exe)
    assert kept >= 1
    # loss masks: only completion tokens, and exactly the sampled ones
    tr = one_step["trainer"]
    b = collate(samples[:4], tr.tok, tr.vocab, "cpu", tr.tries)
    for i, s in enumerate(samples[:4]):
        assert int(b.mask[i].sum()) == len(s.completion_ids)
        assert b.targets[i, b.mask[i] > 0].tolist() == s.completion_ids
    assert b.allowed is not None  # constrained decoding: the mask is rebuilt for training


def test_routing_distribution_and_arms(one_step):
    for gr in one_step["groups"]:
        assert len(gr.menu_probs) == 3 and sum(gr.menu_probs) == pytest.approx(1.0)
        assert len(set(gr.talents)) == 2 and all(t in gr.menu_ids for t in gr.talents)
        # arm 2 is the most likely talent other than the sampled one
        others = [i for i, t in enumerate(gr.menu_ids) if t != gr.talents[0]]
        best = max(others, key=lambda i: (gr.menu_probs[i], -i))
        assert gr.talents[1] == gr.menu_ids[best]
        # sampled completions' old log-probs sum to log π(talent)
        for s in gr.route_samples:
            p = gr.menu_probs[gr.menu_ids.index(gr.talents[s.arm])]
            assert sum(s.old_logprobs) == pytest.approx(np.log(p), abs=1e-4)


def test_matched_arms_share_seed_and_initial_state(one_step, family):
    tr = one_step["trainer"]
    for gr in one_step["groups"]:
        n = tr.per_arm
        assert n == 4 and len(gr.trajs) == 8
        assert len({gr.seeds[j] for j in range(n)}) == n  # rollouts within an arm differ
        for j in range(n):
            a, b = gr.specs[j], gr.specs[n + j]
            assert (a.arm, b.arm) == (0, 1) and a.seed == b.seed and a.task == b.task
            ta, tb = gr.trajs[j], gr.trajs[n + j]
            assert ta.initial_observation == tb.initial_observation and ta.goal == tb.goal
            assert (ta.talent_id, tb.talent_id) == tuple(gr.talents)
            assert ta.group_uid == tb.group_uid
            # retrieval differs only by the talent
            assert ta.retrieved_skill_ids == tr.knowledge.context("textworld", ta.goal, ta.task_type, ta.talent_id).skill_ids
    # route/divergence counts the matched pairs whose actions differ between the arms
    n, diff = tr.per_arm, 0
    for gr in one_step["groups"]:
        acts = [[s.action for s in t.env_steps()] for t in gr.trajs]
        diff += sum(acts[j] != acts[n + j] for j in range(n))
    assert one_step["stats"]["divergence_sum"] == pytest.approx(diff / n)
    # same seed + same talent in both arms → the same episode, action for action
    gr = one_step["groups"][0]
    specs = [dataclasses.replace(s, talent_id=gr.talents[0]) for s in gr.specs]
    trajs = run_episodes(family.make, specs, tr.policy, tr.settings, tr.knowledge, batch_size=len(specs), progress=False)
    # (the weights have moved since the recorded rollout, so compare the two fresh arms with each other)
    for j in range(tr.per_arm):
        assert [s.action for s in trajs[j].steps] == [s.action for s in trajs[tr.per_arm + j].steps]


def test_evaluated_routing_records_the_probability_of_its_choice(one_step, family):
    """episodes.jsonl's route_p is the router's menu-constrained probability of the talent it chose: greedy routing
    picks the most likely talent, and route_p equals that talent's teacher-forced probability; a talent the policy
    did not choose has none."""
    import copy

    from talentrl_core.evaluation.runner import episode_result
    from talentrl_core.prompts import format_talent, routing_messages
    from talentrl_core.rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions
    from talentrl_core.rollout import EpisodeSpec

    tr = one_step["trainer"]
    greedy = copy.copy(tr.policy)
    greedy.temperature = 0.0
    tasks = [gr.task for gr in one_step["groups"]]
    specs = [EpisodeSpec(t, routing="policy") for t in tasks] + [EpisodeSpec(tasks[0], routing="fixed", talent_id="T1")]
    trajs = run_episodes(family.make, specs, greedy, dataclasses.replace(tr.settings, max_steps=1), tr.knowledge,
                         batch_size=len(specs), progress=False)
    menu = tr.knowledge.menu("textworld")
    allowed = [format_talent(m.shown) for m in menu]
    model = tr.unwrapped().eval()
    for t in trajs[:-1]:
        prompt = chat_prompt_ids(tr.tok, routing_messages("textworld", t.goal, menu), tr.keep)
        scores = score_completions(model, tr.tok, [Sample("route", prompt, completion_ids_of(tr.tok, a), [], allowed) for a in allowed],
                                   tr.vocab, 1.0)
        p = torch.softmax(torch.tensor([sum(x) for x in scores], dtype=torch.float64), 0)
        r = episode_result("talent_sft", "textworld", t, None, 0)
        assert t.talent_id == menu[int(p.argmax())].talent_id
        assert r.route_p == pytest.approx(float(p.max()), abs=1e-3) and 1 / len(menu) <= r.route_p <= 1
    assert episode_result("oracle_talent", "textworld", trajs[-1], None, 0).route_p is None


def test_tied_share_is_over_kept_groups_and_absent_when_none_kept(one_step):
    tr, groups, st = one_step["trainer"], one_step["groups"], one_step["stats"]
    upd = {"perf/update_tokens": 1}
    m = tr._metrics(groups, st, dict(upd), 1.0, 1.0, 2.0)
    assert m["route/divergence"] == pytest.approx(st["divergence_sum"] / st["groups"])
    # 1 of 4 kept groups tied (set explicitly, so the check never depends on which groups the fixture kept)
    m4 = tr._metrics(groups, dict(st, groups_kept=4, groups_tied=1), dict(upd), 1.0, 1.0, 2.0)
    assert m4["route/tied_share"] == pytest.approx(0.25)
    # every group filtered for zero reward variance: the share is undefined, so it is not logged as 0
    none_kept = dict(st, groups_kept=0, groups_tied=0, route_abs_sum=0.0)
    m0 = tr._metrics(groups, none_kept, dict(upd), 1.0, 1.0, 2.0)
    assert "route/tied_share" not in m0 and m0["route/contrast"] == 0.0


def test_flat_baseline_one_arm_no_routing(env_cfg, family, tiny, tmp_path):
    cfg = make_cfg(env_cfg, tmp_path, flat_baseline=True, n_arms=1, group_size=4, tasks_per_step=1)
    tr = RLTrainer(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "out", progress=False)
    m = tr.train_step(0)
    batch = tr.last_batch
    assert tr.n_arms == 1 and all(g.talents == [None] for g in batch.groups)
    assert all(t.talent_id is None and t.arm == 0 for g in batch.groups for t in g.trajs)
    assert all(s.kind == "exec" for s in batch.samples)
    assert not any(k.startswith("route/") for k in m) and "rollout/reward_arm1" in m
    flat_ids = tr.knowledge.context("textworld", "", "tw-coin_collector", None).skill_ids
    assert all(t.retrieved_skill_ids == flat_ids for g in batch.groups for t in g.trajs)


def test_aem_and_task_normalisation_reweight_execution_advantages(one_step):
    tr, groups = one_step["trainer"], one_step["groups"]
    plain = {(s.group, s.kind, s.arm, s.traj): s.advantage for s in tr.build_samples(0, groups)[0]}
    rl0 = tr.rl
    try:
        tr.rl = dataclasses.replace(rl0, aem=True, aem_eta0=0.5)
        aem = tr.build_samples(0, groups)[0]
        tr.rl = dataclasses.replace(rl0, exec_group="task")
        task = tr.build_samples(0, groups)[0]
    finally:
        tr.rl = rl0
    ex = [s for s in aem if s.kind == "exec"]
    assert all(np.sign(s.advantage) == np.sign(plain[(s.group, s.kind, s.arm, s.traj)]) for s in ex)
    assert any(abs(s.advantage - plain[(s.group, s.kind, s.arm, s.traj)]) > 1e-6 for s in ex)
    assert all(s.advantage == pytest.approx(plain[(s.group, s.kind, s.arm, s.traj)]) for s in aem if s.kind == "route")
    for gr in groups:
        R = np.array([t.final_reward for t in gr.trajs])
        if R.max() > R.min():
            a = execution_advantages(R, None)
            assert all(s.advantage == pytest.approx(a[s.traj], abs=1e-5) for s in task if s.kind == "exec" and s.group == gr.index)


def test_routing_only_phase_and_shuffled_credit(one_step):
    """rl.train_execution=false keeps the routing samples and their advantages and builds no execution sample;
    rl.shuffle_route_credit gives every kept task another task's routing contrast (the same multiset of contrasts)."""
    tr, groups = one_step["trainer"], one_step["groups"]
    plain = tr.build_samples(0, groups)[0]
    rl0 = tr.rl
    try:
        tr.rl = dataclasses.replace(rl0, train_execution=False)
        route_only = tr.build_samples(0, groups)[0]
        tr.rl = dataclasses.replace(rl0, shuffle_route_credit=True)
        shuffled = tr.build_samples(0, groups)[0]
    finally:
        tr.rl = rl0
    routes = [(s.group, s.arm, s.advantage) for s in plain if s.kind == "route"]
    assert routes and all(s.kind == "route" for s in route_only)
    assert [(s.group, s.arm, s.advantage) for s in route_only] == routes
    by_group = lambda ss: {g: tuple(a for gg, _, a in ss if gg == g) for g, _, _ in ss}  # noqa: E731
    moved = by_group([(s.group, s.arm, s.advantage) for s in shuffled if s.kind == "route"])
    assert sorted(moved.values()) == sorted(by_group(routes).values())
    assert [s.advantage for s in shuffled if s.kind == "exec"] == [s.advantage for s in plain if s.kind == "exec"]
    with pytest.raises(ValueError, match="alpha_route > 0"):
        RLConfig(train_execution=False, alpha_route=0.0)


def test_sampled_talent_arms_draw_each_talent_from_the_router(env_cfg, family, tiny, tmp_path):
    """rl.arms=sample (the sampled_talent_rl baseline): every arm a seeded draw with replacement, one rollout each,
    the routing sample of each carrying its rollout's group-normalised reward."""
    cfg = make_cfg(env_cfg, tmp_path, arms="sample", n_arms=8, group_size=8, exec_group="task")
    tr = RLTrainer(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "out", progress=False)
    groups = tr.route(0, tr.step_tasks(0))
    assert all(len(g.talents) == 8 and len(set(g.talents)) < 8 for g in groups)  # 3 talents: draws repeat
    tr.rollout(0, groups)
    samples, _ = tr.build_samples(0, groups)
    for gr in groups:
        R = np.array([t.final_reward for t in gr.trajs])
        if R.max() > R.min():
            a = execution_advantages(R, None)
            got = [s.advantage for s in samples if s.kind == "route" and s.group == gr.index]
            assert got == pytest.approx(list(a), abs=1e-5)
    with pytest.raises(ValueError, match="exec_group=task"):
        RLConfig(arms="sample", n_arms=8, group_size=8)


def test_recognise_then_route_trains_the_talent_behind_the_restated_cue(tiny, session_cache, tmp_path):
    """env.routing_cue (issue 38, A2): the router restates the ring's sign, then names its talent. RL scores every
    (cue, talent) completion, the arms intervene on the talent behind the drawn cue, and each routing sample trains
    the talent's tokens with the cue in its prompt; the recomputed log-probs equal the recorded ones under the
    talent-only mask; the rollout loop's routing decodes the same completions."""
    from talentrl_core.prompts import RoutingCue, format_talent
    from talentrl_core.rollout import EpisodeSpec

    ring = EnvConfig(challenges=["tw-ring_east", "tw-ring_north"], challenge_settings="route=hidden", train_seeds=[1, 2],
                     max_steps=2, history=1, obs_chars=150, routing_obs_chars=200, cache_dir=str(session_cache),
                     routing_cue=r"the coin lies (\w+)", routing_cue_values=["east", "north"])
    fam = TextWorldFamily(ring, session_cache)
    fam.prepare(fam.tasks("train"), workers=1, progress=False)
    tr = RLTrainer(make_cfg(ring, tmp_path, tasks_per_step=4), fam, StaticKnowledge.from_dict(BANK), tiny,
                   tmp_path / "out", progress=False)
    groups = tr.route(0, tr.step_tasks(0))
    talents = [format_talent(t.shown) for t in tr.knowledge.menu("textworld")]
    for gr in groups:
        assert len(gr.cue_tokens) == 2 * len(talents) and sum(gr.menu_probs) == pytest.approx(1.0)
        cues = {tr.tok.decode(s.prompt_ids[-gr.cue_tokens[0]:]) for s in gr.route_samples}
        assert len(cues) == 1 and cues <= {RoutingCue.format("east"), RoutingCue.format("north")}  # arms share it
        for s in gr.route_samples:
            assert s.allowed == talents and tr.tok.decode(s.completion_ids[:-1]) in talents
            assert len(s.old_logprobs) == len(s.completion_ids)
    tr.rollout(0, groups)
    samples, _ = tr.build_samples(0, groups)
    route = [s for s in samples if s.kind == "route"]
    assert route
    with torch.no_grad():
        b = collate(route, tr.tok, tr.vocab, "cpu", tr.tries)
        diff = ((token_logprobs(tr.unwrapped().eval(), b, tr.cfg.model.temperature) - b.old_logprobs) * b.mask).abs().max()
    assert float(diff) < 1e-4
    trajs = run_episodes(fam.make, [EpisodeSpec(t, routing="policy", seed=0) for t in fam.tasks("train")], tr.policy,
                         dataclasses.replace(tr.settings, max_steps=1), tr.knowledge, batch_size=4, progress=False)
    from talentrl_core.evaluation.runner import episode_result

    for t in trajs:
        said, talent = RoutingCue.split(t.steps[0].completion)
        assert t.steps[0].valid and said in (RoutingCue.format("east"), RoutingCue.format("north")) and talent in talents
        shown = RoutingCue.format("east" if "east" in t.task_type else "north")  # the sign tells the side
        assert episode_result("talent_sft", "textworld", t, None, 0, tr.settings.routing_cue).cue_read == (said == shown)
        assert episode_result("talent_sft", "textworld", t, None, 0).cue_read is None


def test_mini_batches_take_one_optimizer_step_each(one_step, env_cfg, family, tiny, tmp_path):
    """rl.mini_batches=3: the step's samples are dealt into 3 disjoint seeded parts, each one AdamW step, and the
    schedule counts optimizer steps (the last one still trains; lr reaches 0 only after it)."""
    samples = one_step["samples"]
    tr = RLTrainer(make_cfg(env_cfg, tmp_path, mini_batches=3), family, StaticKnowledge.from_dict(BANK), tiny,
                   tmp_path / "out", progress=False)
    parts = tr.mini_batches(samples, 0)
    assert len(parts) == 3 and sorted(id(s) for p in parts for s in p) == sorted(id(s) for s in samples)
    assert [list(map(id, p)) for p in parts] == [list(map(id, p)) for p in tr.mini_batches(samples, 0)]  # seeded
    assert [list(map(id, p)) for p in parts] != [list(map(id, p)) for p in tr.mini_batches(samples, 1)]
    lrs = []
    step = tr.opt.step

    def record(*a, **k):
        lrs.append(tr.opt.param_groups[0]["lr"])
        return step(*a, **k)

    tr.opt.step = record
    before = {n: p.detach().clone() for n, p in tr.unwrapped().named_parameters()}
    m = tr.update(samples, 0)
    assert len(lrs) == 3 and all(lr > 0 for lr in lrs) and lrs == sorted(lrs, reverse=True)
    assert m["rl/lr"] == 0.0 and m["rl/samples"] == len(samples) and m["rl/skipped"] == 0.0
    assert any(not torch.equal(before[n], p) for n, p in tr.unwrapped().named_parameters())
    assert m["rl/kl"] != 0.0  # the later mini-batches are off-policy: the ratio moved away from 1
    with pytest.raises(ValueError, match="rl.mini_batches=0"):
        make_cfg(env_cfg, tmp_path, mini_batches=0)


def test_skipping_zero_advantage_samples_leaves_the_update_unchanged(one_step, env_cfg, family, tiny, tmp_path):
    """rl.skip_zero_advantage: micro-batches whose advantages are all 0 are not run (no KL term), and the weights after
    the update are bitwise those of the full computation (the aggregate's denominator still counts them)."""
    samples = one_step["samples"]
    # the step's own samples plus a copy of each with A = 0: a copy changes the denominator but adds no gradient
    zeros = [dataclasses.replace(s, advantage=0.0) for s in samples]
    assert any(s.advantage != 0 for s in samples)
    after, metrics = {}, {}
    for skip in (False, True):
        tr = RLTrainer(make_cfg(env_cfg, tmp_path / str(skip), skip_zero_advantage=skip), family,
                       StaticKnowledge.from_dict(BANK), tiny, tmp_path / str(skip) / "out", progress=False)
        metrics[skip] = tr.update([dataclasses.replace(s) for s in samples + zeros], 0)
        after[skip] = {n: p.detach().clone() for n, p in tr.unwrapped().named_parameters()}
    assert metrics[True]["rl/zero_adv_skipped_share"] > 0 and metrics[False]["rl/zero_adv_skipped_share"] == 0.0
    assert metrics[True]["perf/update_tokens"] < metrics[False]["perf/update_tokens"]
    assert any(not torch.equal(after[True][n], one_step["before"][n]) for n in after[True])
    assert all(torch.equal(after[True][n], after[False][n]) for n in after[True])
    # every sample at A = 0: nothing runs but the zero pass, and the step is AdamW's step on a zero gradient
    tr = RLTrainer(make_cfg(env_cfg, tmp_path / "all0"), family, StaticKnowledge.from_dict(BANK), tiny,
                   tmp_path / "all0" / "out", progress=False)
    m = tr.update([dataclasses.replace(s) for s in zeros], 0)
    assert m["rl/zero_adv_skipped_share"] == 1.0 and m["rl/grad_norm"] == 0.0


def test_shared_prefix_gives_the_log_probs_and_update_of_full_rows(one_step, env_cfg, family, tiny, tmp_path):
    """rl.share_prefix: samples sorted by their tokens put a task's turns together; the micro-batch's common prompt
    prefix is read once and its keys/values shared by every row. Same log-probs, gradients and update (float32, up
    to rounding) on fewer tokens."""
    tr, samples = one_step["trainer"], one_step["samples"]
    chunk = sorted((s for s in samples if s.kind == "exec"), key=lambda s: s.prompt_ids + s.completion_ids)[:16]
    grads, lps, batches = {}, {}, {}
    model = tr.unwrapped()
    for share in (False, True):
        b = collate(chunk, tr.tok, tr.vocab, "cpu", tr.tries, share_prefix=share)
        model.zero_grad(set_to_none=True)
        lp = token_logprobs(model, b, tr.cfg.model.temperature)
        (lp * b.advantages[:, None]).sum().backward()
        grads[share] = {n: p.grad.clone() for n, p in model.named_parameters()}
        lps[share], batches[share] = lp.detach(), b
    model.zero_grad(set_to_none=True)
    assert batches[False].prefix_ids is None
    P = batches[True].prefix_ids.shape[1]
    assert P >= 16 and all(s.prompt_ids[:P] == chunk[0].prompt_ids[:P] for s in chunk)
    assert batches[True].n_tokens == batches[False].n_tokens - (len(chunk) - 1) * P
    assert torch.equal(batches[True].mask, batches[False].mask) and torch.equal(batches[True].targets, batches[False].targets)
    assert (lps[True] - lps[False]).abs().max() < 1e-5
    for n, g in grads[False].items():
        assert torch.allclose(grads[True][n], g, rtol=1e-4, atol=1e-6), n
    metrics = {}
    for share in (False, True):
        t2 = RLTrainer(make_cfg(env_cfg, tmp_path / str(share), share_prefix=share), family,
                       StaticKnowledge.from_dict(BANK), tiny, tmp_path / str(share) / "out", progress=False)
        metrics[share] = t2.update([dataclasses.replace(s) for s in samples], 0)
    assert metrics[True]["perf/update_tokens"] < metrics[False]["perf/update_tokens"]
    for k in ("rl/loss", "rl/grad_norm"):
        assert metrics[True][k] == pytest.approx(metrics[False][k], rel=1e-4, abs=1e-6), k


def test_lora_kl_no_talent_arm_and_epochs(env_cfg, family, tiny, tmp_path):
    """LoRA + β·KL to the adapter-free model + a no-talent arm + 2 PPO epochs + seq_mean_token_sum: one step
    trains, logs rl/kl_ref, and the saved model is merged (plain weights, loadable without peft)."""
    from transformers import AutoModelForCausalLM

    cfg = make_cfg(env_cfg, tmp_path, n_arms=3, no_talent_arm=True, group_size=6, tasks_per_step=2, beta_kl=0.1,
                   ppo_epochs=2, token_agg="seq_mean_token_sum", lr=1e-2)
    cfg.model.lora, cfg.model.lora_r = True, 4
    tr = RLTrainer(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "out", progress=False)
    lora = {n: p.detach().clone() for n, p in tr.unwrapped().named_parameters() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    m = tr.train_step(0)
    b = tr.last_batch
    assert all(g.talents[2] is None and g.route_samples[2] is None for g in b.groups)
    assert {s.arm for s in b.samples if s.kind == "route"} <= {0, 1}
    assert "rl/kl_ref" in m and m["rl/kl_ref"] >= 0 and m["rl/skipped"] == 0.0
    assert any(not torch.equal(p, dict(tr.unwrapped().named_parameters())[n]) for n, p in lora.items())
    tr.history.append({"step": 1, **m})
    tr.save_final({"stage": "rl"})
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    assert not any("lora" in n for n in merged.state_dict())


def test_library_evolution_through_gated_api_and_resume_on_its_version(env_cfg, family, tiny, tmp_path):
    """evolve_every=1 on a LanceDB library (hashing embedder): candidates from the step's training rollouts,
    matched with/without test, gated promote(); the version reached goes into checkpoints and is reopened."""
    from talentrl_core.config import LibraryConfig
    from talentrl_core.knowledge import LibraryKnowledge
    from talentrl_core.library import Library, distill_library, promote, propose_candidates
    from talentrl_core.library.embed import HashingEmbedder
    from talentrl_core.library.examples import textworld_trajectories
    from talentrl_core.prompts import SkillView
    from talentrl_core.rl.evolve import WithSkill, pin_version

    lcfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing")
    distill_library(textworld_trajectories(), lcfg, "textworld", embedder=HashingEmbedder())

    def knowledge():
        return LibraryKnowledge(Library.open(lcfg.uri, 1, cfg=lcfg, embedder=HashingEmbedder()), lcfg)

    cfg = make_cfg(env_cfg, tmp_path, steps=2, evolve_every=1, evolve_success_threshold=1.01, evolve_max_candidates=2,
                   evolve_tasks=1, tasks_per_step=2, group_size=4, checkpoint_every=1)
    cfg.library = lcfg
    tr = RLTrainer(cfg, family, knowledge(), tiny, tmp_path / "out", progress=False)
    m = tr.train_step(0)
    assert m["evolve/candidates"] >= 1
    lib = Library.open(lcfg.uri, -1, cfg=lcfg, embedder=HashingEmbedder())
    assert lib.latest_version == 1 + m["evolve/promoted"]  # one version per promotion, none when refused
    assert tr.knowledge.version == m["evolve/library_version"] == lib.latest_version
    if m["evolve/gain_mean"] <= 0:
        assert m["evolve/promoted"] == 0  # the gate: no gain, no promotion
    # the 'with' arm of the matched test: the candidate heads the retrieved skills, the rest is unchanged
    base = knowledge()
    talent = base.oracle_talent("textworld", "tw-coin_collector")
    plain = base.context("textworld", "Find the coin", "tw-coin_collector", talent)
    withc = WithSkill(base, SkillView("cand", "mistake", "t", "p")).context("textworld", "Find the coin", "tw-coin_collector", talent)
    assert withc.skill_ids == ["cand", *plain.skill_ids]
    # a version reached during the run (here promoted by hand through the same API) is what resume reopens
    trajs = [t for g in tr.last_batch.groups for t in g.trajs]
    cand = propose_candidates(trajs, lib, "textworld", success_threshold=1.01)[0]
    v = promote(lib, cand, 1.0, 0.0)
    tr.knowledge = pin_version(tr.knowledge, v)
    tr.history.append({"step": 1, **m})
    tr.save_checkpoint(1)
    state = json.loads((tmp_path / "out.work" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["library_version"] == v == tr.knowledge.version
    tr2 = RLTrainer(cfg, family, knowledge(), tiny, tmp_path / "out", progress=False)
    assert tr2.knowledge.version == 1
    assert tr2.maybe_resume() == 1 and tr2.knowledge.version == v
    assert cand.skill.skill_id in {s.skill_id for s in tr2.knowledge.lib.skills("textworld")}


def test_config_checks_and_json_round_trip(env_cfg, tmp_path):
    cfg = make_cfg(env_cfg, tmp_path, exec_group="task", token_agg="seq_mean_token_sum")
    back = config_from_dict(json.loads(json.dumps(dataclasses.asdict(cfg), default=lambda e: e.value)))
    assert back == cfg
    with pytest.raises(NotImplementedError, match="LanceDB-backed"):  # evolution needs the real library
        RLTrainer(make_cfg(env_cfg, tmp_path, evolve_every=2), None, StaticKnowledge.from_dict(BANK), "unused", tmp_path / "o")
    bad = make_cfg(env_cfg, tmp_path)
    bad.model.temperature = 0.0
    with pytest.raises(ValueError, match="temperature"):
        check_config(bad)


# ------------------------------------------------------------------------------------------------------------
# Subprocess runs through the CLI


def _cli_env() -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT), ACCELERATE_USE_CPU="1")
    return env


def _cli_args(cfg: TalentRLConfig, tmp: Path, tiny: str, bank: Path, out: Path) -> list[str]:
    cfg_file = tmp / "cfg.json"
    cfg_file.write_text(json.dumps(dataclasses.asdict(cfg), default=lambda e: e.value))
    return ["-m", "talentrl_core.rl.cli", "--config", str(cfg_file), "--init", tiny, "--knowledge", str(bank),
            "--out", str(out), "--no-progress"]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_kill_and_resume_equals_uninterrupted(env_cfg, family, tiny, bank_file, tmp_path):
    """Uninterrupted in this process; interrupted (SIGKILL once checkpoint-2 exists) and resumed through the CLI."""
    cfg = make_cfg(env_cfg, tmp_path, steps=4, tasks_per_step=1, group_size=4, checkpoint_every=1, keep_checkpoints=0)
    py = sys.executable
    ra = train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "A", progress=False)  # uninterrupted
    b_args = _cli_args(cfg, tmp_path, tiny, bank_file, tmp_path / "B")
    log = open(tmp_path / "B.log", "w")
    proc = subprocess.Popen([py, *b_args], env=_cli_env(), stdout=log, stderr=subprocess.STDOUT)
    ckpt = tmp_path / "B.work" / "checkpoint-2"
    t0 = time.time()
    while not ckpt.exists() and proc.poll() is None and time.time() - t0 < 300:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    log.close()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "B.log").read_text()[-3000:]
    assert not (tmp_path / "B").exists()  # no final model from the killed run
    subprocess.run([py, *b_args, "--result-json", str(tmp_path / "B.json")], env=_cli_env(), check=True,
                   capture_output=True, timeout=300)
    rb = json.loads((tmp_path / "B.json").read_text())
    assert rb["resumed_from"].endswith("checkpoint-2") or rb["resumed_from"].endswith("checkpoint-3")
    assert ra["reward_curve"] == rb["reward_curve"] and len(ra["reward_curve"]) == 4
    wa, wb = _weights(tmp_path / "A"), _weights(tmp_path / "B")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # exact: every random draw is seeded from (seed, step)
    meta = json.loads((tmp_path / "B" / "talentrl_meta.json").read_text())
    assert meta["stage"] == "rl" and meta["library_version"] == 1 and len(meta["history"]) == 4
    # a newest checkpoint damaged on disk after it was complete (issue 41.2): named, set aside, the one before resumed
    newest = max((p for p in (tmp_path / "B.work").glob("checkpoint-*")), key=lambda p: int(p.name.split("-")[1]))
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        rd = train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "B", progress=False)
    step = int(newest.name.split("-")[1])
    assert rd["resumed_from"].endswith(f"checkpoint-{step - 1}"), said.getvalue()
    assert f"{weights}: 1000 bytes" in said.getvalue() and (tmp_path / "B.work" / f"damaged-{newest.name}").is_dir()
    assert all(torch.equal(wa[k], v) for k, v in _weights(tmp_path / "B").items())
    # another job in the same folders (rl.steps 4 -> 1) moves the earlier run aside, checkpoints and model alike
    other = make_cfg(env_cfg, tmp_path, steps=1, tasks_per_step=1, group_size=4, checkpoint_every=1, keep_checkpoints=0)
    rc = train_rl(other, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "A", progress=False)
    assert rc["resumed_from"] is None and len(rc["reward_curve"]) == 1
    work_prev, model_prev = list(tmp_path.glob("A.work.prev-*")), list(tmp_path.glob("A.prev-*"))
    assert len(work_prev) == 1 and any(work_prev[0].glob("checkpoint-*"))
    assert len(model_prev) == 1 and all(torch.equal(wa[k], v) for k, v in _weights(model_prev[0]).items())


def test_two_process_run_ends_with_identical_weights(env_cfg, family, tiny, bank_file, tmp_path):
    cfg = make_cfg(env_cfg, tmp_path, steps=2, tasks_per_step=2, group_size=4, checkpoint_every=1)
    args = _cli_args(cfg, tmp_path, tiny, bank_file, tmp_path / "D")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    r = subprocess.run([*torchrun, *args, "--result-json", str(tmp_path / "D-{rank}.json")], env=_cli_env(),
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"D-{i}.json").read_text()) for i in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2 and r0["steps"] == 2
    assert r0["weights_digest"] == r1["weights_digest"]
    assert r0["reward_curve"] == r1["reward_curve"]
    assert (tmp_path / "D" / "model.safetensors").exists()


def test_rl_accelerator_ignores_a_bf16_state_left_in_the_process():
    """A bf16 Trainer run earlier in the process (SFT) leaves accelerate's shared state on bf16; the RL trainer's
    accelerator must not inherit it (its forward would run under bf16 autocast whatever model.compute_dtype says)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from talentrl_core.rl.trainer import own_precision_accelerator

    AcceleratorState._reset_state(reset_partial_state=False)  # what a Trainer run does before setting bf16
    assert Accelerator(cpu=True, mixed_precision="bf16").native_amp
    acc = own_precision_accelerator(cpu=True)
    assert acc.mixed_precision == "no" and not acc.native_amp


def test_a_stop_signal_pauses_rl_after_the_update_in_progress(env_cfg, family, tiny, tmp_path):
    """SIGUSR1 (Slurm's notice before a time limit) or SIGTERM during an update: the update finishes, is
    checkpointed, and the run pauses naming the signal; the resume is the budget pause's (test below)."""
    from talentrl_core.checkpoints import Paused
    from talentrl_core.tracking import NullTracker

    class StopFromOutside(NullTracker):
        def log(self, metrics, step=None):
            os.kill(os.getpid(), signal.SIGUSR1)

    cfg = make_cfg(env_cfg, tmp_path, steps=3, tasks_per_step=1, group_size=4, checkpoint_every=0, keep_checkpoints=0)
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(Paused, match=r"rl paused at update 1 of 3 after SIGUSR1 \(checkpoint in "):
        train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "B", tracker=StopFromOutside(),
                 progress=False)
    assert signal.getsignal(signal.SIGUSR1) is before
    assert not (tmp_path / "B").exists() and (tmp_path / "B.work" / "checkpoint-1").is_dir()


def test_a_run_past_its_time_budget_pauses_checkpointed_and_resumes_to_the_same_weights(env_cfg, family, tiny, tmp_path):
    """``rl.max_minutes`` is a sitting's budget, as SFT's: past it the run checkpoints the update it finished and raises
    ``Paused`` with no final model; the same job (the budget is not part of it) resumes and ends on the weights of an
    undisturbed run."""
    import dataclasses

    from talentrl_core.checkpoints import Paused

    cfg = make_cfg(env_cfg, tmp_path, steps=2, tasks_per_step=1, group_size=4, checkpoint_every=0, keep_checkpoints=0)
    ra = train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "A", progress=False)
    budget = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, max_minutes=1e-6))
    with pytest.raises(Paused, match=r"rl paused at update 1 of 2 after rl.max_minutes=1e-06"):
        train_rl(budget, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "B", progress=False)
    assert not (tmp_path / "B").exists() and (tmp_path / "B.work" / "checkpoint-1").is_dir()
    rb = train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "B", progress=False)
    assert rb["resumed_from"].endswith("checkpoint-1") and ra["reward_curve"] == rb["reward_curve"]
    wa, wb = _weights(tmp_path / "A"), _weights(tmp_path / "B")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # the stage's rerun (skip_finished) keeps a finished model of the same job and returns what it recorded
    (tmp_path / "B.work").rename(tmp_path / "B.work.gone")  # nothing to resume from: a retraining would start at 0
    rc = train_rl(cfg, family, StaticKnowledge.from_dict(BANK), tiny, tmp_path / "B", progress=False, skip_finished=True)
    assert rc["resumed_from"] == rb["resumed_from"] and rc["reward_curve"] == rb["reward_curve"]
    assert not (tmp_path / "B.work").exists() and all(torch.equal(wa[k], v) for k, v in _weights(tmp_path / "B").items())
