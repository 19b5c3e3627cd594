"""Talents that carry information: strategy experts, strategy-based labels, retrieval without the gold type,
ordinal menu ids, and the "Does the talent matter?" metrics (DESIGN.md §3, issue 14)."""

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from talentrl_core.config import EnvConfig, LibraryConfig, SFTConfig
from talentrl_core.envs.strategies import get_strategy, strategies
from talentrl_core.envs.textworld.family import TextWorldFamily
from talentrl_core.envs.textworld.games import ROUTE_SUFFIX, generate_game, route_of, walkthrough_route
from talentrl_core.envs.textworld.settings import GameSpec
from talentrl_core.envs.textworld.strategies import HEADINGS, goal_route, hide_route
from talentrl_core.evaluation.metrics import EpisodeResult, build_metrics
from talentrl_core.evaluation.report import render_markdown
from talentrl_core.evaluation.talent_effect import talent_metrics
from talentrl_core.knowledge import LibraryKnowledge
from talentrl_core.library import distill_library
from talentrl_core.library.store import Library
from talentrl_core.policies import ExpertPolicy
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
from talentrl_core.sft import build_sft_data
from talentrl_core.trajectories import SCHEMA, read_trajectories, write_trajectories

STATED, HIDDEN = "tw-coin_collector", "tw-coin_collector-hidden"
NE, SW = "tw-coin_collector-hint-ne", "tw-coin_collector-hint-sw"


@pytest.fixture(scope="module")
def family(session_cache) -> TextWorldFamily:
    cfg = EnvConfig(challenges=["tw-coin_collector:level=105", "tw-coin_collector:level=5,route=hidden"],
                    train_seeds=[1, 6], max_steps=10)
    fam = TextWorldFamily(cfg, session_cache)
    fam.prepare(fam.tasks("train"), workers=2, progress=False)
    return fam


@pytest.fixture(scope="module")
def runs(family):
    """Every task once per strategy expert (as the collect stage does)."""
    out = []
    for s in ("follow", "explore"):
        part = run_episodes(family.make, [EpisodeSpec(t, seed=i) for i, t in enumerate(family.tasks("train"))],
                            ExpertPolicy(s), RolloutSettings(max_steps=10, run_id=f"c-{s}", split="train"), progress=False)
        for i, t in enumerate(part):
            t.traj_uid = f"{s}-{i}"
        out += part
    return out


@pytest.fixture(scope="module")
def knowledge(runs, tmp_path_factory):
    lcfg = LibraryConfig(uri=str(tmp_path_factory.mktemp("lib") / "db"), min_support=0.2, delta=0.0)
    meta = distill_library(runs, lcfg, "textworld")
    return LibraryKnowledge(Library.open(lcfg.uri, cfg=lcfg), lcfg), meta


def test_registry_names_choices():
    assert [s.name for s in strategies("textworld")] == ["follow", "explore", "northeast", "southwest", "northwest", "southeast",
                                                          "eastnorth", "eastfirst", "northfirst"]
    assert strategies("qa") == []
    with pytest.raises(KeyError, match="choose from"):
        get_strategy("textworld", "teleport")


def test_hidden_route_goal_has_no_directions(family):
    stated = [t for t in family.tasks("train") if t.task_type == STATED]
    hidden = [t for t in family.tasks("train") if t.task_type == HIDDEN]
    assert len(stated) == len(hidden) == 6
    env = family.make()
    env.reset(hidden[0])
    assert goal_route(env.goal()) == [] and "coin" in env.goal()
    assert hide_route(env.goal()) == env.goal()
    env.reset(stated[0])
    assert len(goal_route(env.goal())) >= 4
    env.close()
    # route=hidden plays the route=stated game of the same level and seed: no second compile
    assert family.game_file(hidden[0]).parent.name == "level=5"


@pytest.fixture(scope="module")
def headings(session_cache) -> TextWorldFamily:
    """The demo's families: 4-room chains whose route stays north-east / south-west, the goal naming the directions."""
    cfg = EnvConfig(challenges=["tw-coin_collector:level=4,route=hint,quadrant=ne",
                                "tw-coin_collector:level=4,route=hint,quadrant=sw"], train_seeds=[1, 24], max_steps=8)
    return TextWorldFamily(cfg, session_cache)


def test_quadrant_families_keep_the_seeds_whose_route_stays_in_them(headings):
    tasks = headings.tasks("train")
    types = {t.task_type for t in tasks}
    assert types == {NE, SW} and len(tasks) < 48  # seeds whose route turns both ways are in neither family
    for t in tasks:
        assert set(route_of(headings.cache_dir, GameSpec.from_key(t.key))) <= set(HEADINGS[t.task_type[-2:]])
    env = headings.make()
    for t in (next(t for t in tasks if t.task_type == NE), next(t for t in tasks if t.task_type == SW)):
        first = env.reset(t)
        route = walkthrough_route(headings.game_file(t))  # reset compiled it
        assert goal_route(env.goal()) == []  # the steps are not given ...
        said = env.goal().split("every step of it goes ")[1].split(".")[0]
        assert set(said.replace(" or ", " ").split()) == set(route)  # ... the directions they use are
        assert env.goal() in " ".join(first.split())  # the intro observation shows the same hint, not the route
    env.close()


def test_heading_experts_win_their_own_quadrant_and_only_it(headings):
    tasks = headings.tasks("train")
    rate = {}
    for name in ("northeast", "southwest"):
        trajs = run_episodes(headings.make, [EpisodeSpec(t, seed=i) for i, t in enumerate(tasks)], ExpertPolicy(name),
                             RolloutSettings(max_steps=8), progress=False)
        for t in trajs:
            rate.setdefault((t.task_type, name), []).append(t.success)
        again = run_episodes(headings.make, [EpisodeSpec(tasks[0], seed=7)], ExpertPolicy(name), RolloutSettings(max_steps=8),
                             progress=False)[0]
        assert [s.action for s in again.steps] == [s.action for s in trajs[0].steps]
    rate = {k: sum(v) / len(v) for k, v in rate.items()}
    assert rate[(NE, "northeast")] == rate[(SW, "southwest")] == 1.0
    assert rate[(NE, "southwest")] == rate[(SW, "northeast")] == 0.0


def test_each_strategy_wins_its_own_family_and_is_deterministic(family, runs):
    by = {}
    for t in runs:
        by.setdefault((t.task_type, t.strategy), []).append(t.success)
    rate = {k: sum(v) / len(v) for k, v in by.items()}
    assert rate[(STATED, "follow")] == 1.0 and rate[(HIDDEN, "explore")] == 1.0
    assert rate[(HIDDEN, "follow")] == 0.0  # nothing to follow
    assert rate[(STATED, "follow")] >= rate[(STATED, "explore")]
    follow = [t for t in runs if t.strategy == "follow" and t.task_type == STATED]
    explore = [t for t in runs if t.strategy == "explore" and t.task_type == STATED]
    # recognisably different: explore opens dead ends, follow never does
    assert sum(t.n_steps for t in explore) > sum(t.n_steps for t in follow)
    again = run_episodes(family.make, [EpisodeSpec(family.tasks("train")[0], seed=99)], ExpertPolicy("explore"),
                         RolloutSettings(max_steps=10), progress=False)[0]
    first = next(t for t in runs if t.strategy == "explore" and t.task_id == again.task_id)
    assert [s.action for s in again.steps] == [s.action for s in first.steps]


def test_strategy_column_round_trips_and_old_files_read(runs, tmp_path):
    write_trajectories(runs[:3], tmp_path, "r")
    back = read_trajectories(tmp_path)
    assert [t.strategy for t in back] == [t.strategy for t in runs[:3]] and back[0].strategy == "follow"
    old = pa.Table.from_pylist([t.to_row() for t in runs[:2]], schema=SCHEMA).drop(["strategy"])
    old = old.replace_schema_metadata({"talentrl.schema": "trajectories/1"})
    (tmp_path / "old" / "env=textworld").mkdir(parents=True)
    pq.write_table(old, tmp_path / "old" / "env=textworld" / "v1.parquet")
    assert [t.strategy for t in read_trajectories(tmp_path / "old")] == [None, None]


def test_labels_follow_strategies_and_the_measured_best(knowledge, runs):
    k, meta = knowledge
    talent_of = meta["strategy_talent"]
    assert set(talent_of) == {"follow", "explore"} and len(set(talent_of.values())) == 2
    assert meta["best_strategy"] == {STATED: "follow", HIDDEN: "explore"}
    assert meta["talent_strategy_agreement"]["purity"] == 1.0  # one talent per strategy
    unsupervised = meta["talent_clustering"]["clustering"]["strategy_agreement"]  # what action patterns alone find
    assert 0.0 <= unsupervised["nmi"] <= 1.0 and 0.5 <= unsupervised["purity"] <= 1.0
    for t in runs:
        if t.success:
            assert k.label_for(t) == talent_of[t.strategy]
    assert k.lib.oracle_talent("textworld", STATED) == talent_of["follow"]
    assert k.lib.oracle_talent("textworld", HIDDEN) == talent_of["explore"]
    menu = k.menu("textworld")
    assert [m.label for m in menu] == ["T1", "T2"] and {m.name for m in menu} == {"Follow", "Explore"}


def test_sft_samples_carry_the_strategy_talent_and_route_to_the_best(knowledge, runs):
    k, meta = knowledge
    data = build_sft_data(runs, k, SFTConfig(flat_share=0.0, min_skill_share=0.0, routing_labels="measured_best"))
    shown = {m.talent_id: m.label for m in k.menu("textworld")}
    by_uid = {t.task_id + t.strategy: t for t in runs if t.success}
    n_exec = 0
    for t in by_uid.values():
        ex = [s for s in data.samples if s["kind"] == "exec" and s["task_id"] == t.task_id and s["talent_id"] == meta["strategy_talent"][t.strategy]]
        assert ex, f"no execution sample of {t.strategy} on {t.task_id}"
        n_exec += len(ex)
    routes = [s for s in data.samples if s["kind"] == "route"]
    assert len(routes) == len({t.task_id for t in runs if t.success})  # one routing sample per task
    for s in routes:
        tt = next(t.task_type for t in runs if t.task_id == s["task_id"])
        best = meta["strategy_talent"][meta["best_strategy"][tt]]
        assert s["talent_id"] == best and s["messages"][-1]["content"] == f"<talent>{shown[best]}</talent>"


def test_demonstrator_labels_route_as_each_demonstration_did_weighted_by_the_habit(knowledge, runs):
    """sft.routing_labels=demonstrator (the default): one routing sample per (task, demonstrated talent), whatever
    measured best, each counted demonstrator_habit[strategy] times in an epoch (sft.training_order's repeats)."""
    k, meta = knowledge
    talent_of = meta["strategy_talent"]
    won = {(t.task_id, talent_of[t.strategy]) for t in runs if t.success}
    plain = build_sft_data(runs, k, SFTConfig(flat_share=0.0, min_skill_share=0.0))
    routes = [s for s in plain.samples if s["kind"] == "route"]
    assert {(s["task_id"], s["talent_id"]) for s in routes} == won and len(routes) == len(won)
    both = {task for task, _ in won if sum(1 for x, _ in won if x == task) == 2}
    assert both, "some task is won by both strategies in this fixture"
    assert all(s["weight"] == 1 for s in routes)
    habit = build_sft_data(runs, k, SFTConfig(flat_share=0.0, min_skill_share=0.0, demonstrator_habit={"explore": 3},
                                              routing_weight=2))
    weights = {s["talent_id"]: s["weight"] for s in habit.samples if s["kind"] == "route"}
    assert weights == {talent_of["explore"]: 3, talent_of["follow"]: 1}
    n_explore = sum(1 for s in habit.samples if s["kind"] == "route" and s["talent_id"] == talent_of["explore"])
    assert habit.report["routing_label_distribution"][talent_of["explore"]] == 3 * n_explore
    with pytest.raises(ValueError, match="needs sft.routing_labels=demonstrator"):
        SFTConfig(routing_labels="measured_best", demonstrator_habit={"explore": 2})
    with pytest.raises(ValueError, match="weights must be >= 1"):
        SFTConfig(demonstrator_habit={"explore": 0})
    SFTConfig(routing_labels="measured_best", demonstrator_habit={"explore": 1})  # weight 1: no habit, accepted


def test_default_retrieval_never_reads_the_gold_task_type(knowledge):
    k, _ = knowledge
    goal = "Find the coin. It is on the floor of the vault."
    tid = k.menu("textworld")[0].talent_id
    a = k.context("textworld", goal, STATED, tid)
    b = k.context("textworld", goal, "some-other-type", tid)
    assert a.skill_ids == b.skill_ids and a.skill_ids
    filtered = LibraryKnowledge(k.lib, dataclasses.replace(k.cfg, filter_task_type=True))
    assert filtered.context("textworld", goal, "some-other-type", tid).skill_ids != a.skill_ids or not any(
        s.kind == "specific" for s in k.lib.skills("textworld"))


def test_talent_metrics_accuracy_regret_and_section(knowledge):
    k, meta = knowledge
    shown = {m.talent_id: m.label for m in k.menu("textworld")}
    from talentrl_core.evaluation.talent_effect import matrix_from_labels

    matrix = matrix_from_labels(k.lib.labels("textworld"), shown)
    f, e = meta["strategy_talent"]["follow"], meta["strategy_talent"]["explore"]
    rs = [EpisodeResult("talent_sft", "textworld", f"s{i}", STATED, True, 1.0, 5, f, f, route_p=1.0) for i in range(3)]
    rs += [EpisodeResult("talent_sft", "textworld", f"h{i}", HIDDEN, False, 0.0, 5, f, e, route_p=0.6) for i in range(1)]
    rs += [EpisodeResult("oracle_talent", "textworld", f"s{i}", STATED, True, 1.0, 5, f, f) for i in range(3)]
    rs += [EpisodeResult("oracle_talent", "textworld", "h0", HIDDEN, True, 1.0, 5, e, e)]
    rs += [EpisodeResult("talentrl", "textworld", t, tt, True, 1.0, 5, c, c) for t, tt, c in
           [("s0", STATED, f), ("s1", STATED, f), ("s2", STATED, e), ("h0", HIDDEN, e)]]
    tm = talent_metrics(rs, {"textworld": matrix})
    # task by task: talentrl alone routes h0 to its best talent, talent_sft alone s2
    assert tm["routing_paired"]["textworld"]["talentrl vs talent_sft"] == {"a_only": 1, "b_only": 1, "both": 2,
                                                                          "neither": 0, "n": 4, "p_mcnemar": 1.0}
    r = tm["routing"]["talent_sft"]["textworld"]
    assert r["accuracy"] == 0.75
    # one hidden task routed to follow: regret = explore's hidden success (1.0) - follow's (0.0), over 4 episodes
    assert r["regret"] == pytest.approx(0.25)
    assert r["by_type"][HIDDEN]["chosen"] == {shown[f]: 1}
    assert tm["routing"]["oracle_talent"]["textworld"]["regret"] == 0.0
    # the router's confidence: mean p of its choice, and the share chosen with p < 0.75 (only the policy's choices)
    assert r["confidence"] == pytest.approx(0.9) and r["undecided"] == 0.25
    assert r["by_type"][HIDDEN]["undecided"] == 1.0 and r["by_type"][STATED]["confidence"] == 1.0
    assert "confidence" not in tm["routing"]["oracle_talent"]["textworld"]
    without_oracle = talent_metrics([r for r in rs if r.system != "oracle_talent"], {"textworld": matrix})
    assert without_oracle["ceiling"]["textworld"] == 1.0  # task types weighted equally when oracle_talent did not run
    metrics = build_metrics(rs)
    metrics["talents"] = tm
    md = render_markdown(metrics)
    assert "## Does the talent matter?" in md and "oracle vs random" not in md
    assert "| talent_sft | 0.750 | 0.250 | 0.900 / 25% |" in md


def test_seed_replicates_test_per_seed_and_per_task_across_seeds(tmp_path):
    import json

    from pipeline.seeds import pooled

    def write(seed, rows):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        (d / "episodes.jsonl").write_text("".join(json.dumps({"system": s, "panel": "textworld", "task_id": t, "success": ok,
                                                               "sample_idx": 0}) + "\n" for s, t, ok in rows))

    write(0, [("talentrl", "a", True), ("flat_grpo", "a", False), ("talentrl", "b", True), ("flat_grpo", "b", True),
              ("talent_sft", "a", False), ("talent_sft", "b", False)])
    write(1, [("talentrl", "a", True), ("flat_grpo", "a", False), ("talentrl", "b", False), ("flat_grpo", "b", True)])
    res = pooled(tmp_path)
    tf = res["pairs"]["talentrl vs flat_grpo"]
    # across seeds a task is one unit: task a ahead (2 vs 0), task b behind (1 vs 2)
    assert tf["task_sign_test"] == {"tasks": 2, "ahead": 1, "behind": 1, "p_sign": 1.0} and "pooled" not in tf
    assert tf["per_seed"]["seed1"]["a_only"] == 1 and not tf["a_ahead_in_every_seed"]
    # seed 0's talent_sft is the shared SFT baseline of every seed
    assert res["pairs"]["talentrl vs talent_sft"]["task_sign_test"]["ahead"] == 2


def test_sft_draw_replicates_retrain_sft_and_pool_the_sft_pairs(tmp_path):
    """--redraw sft: a replicate links trajectories, library and base model but trains its own SFT checkpoint, and
    the tests add talent_sft vs flat_skillbank and oracle vs random talent, each draw against its own."""
    import json

    from pipeline.seeds import SFT_PAIRS, prepare_replicate, pooled

    src = tmp_path / "artifacts"
    for rel in ("trajectories", "library", "models/base", "models/sft"):
        (src / rel).mkdir(parents=True)
    rl_root, sft_root = prepare_replicate(src, 1), prepare_replicate(src, 1, "sft")
    assert rl_root != sft_root and sft_root.parent.name == "sft_seeds"
    assert (rl_root / "models" / "sft").is_symlink()
    assert (sft_root / "models" / "base").is_symlink() and not (sft_root / "models" / "sft").exists()
    with pytest.raises(ValueError, match="'rl', 'sft'"):
        prepare_replicate(src, 1, "evaluate")
    out = tmp_path / "out"
    for seed, sft_ok in ((0, [True, True]), (1, [False, False])):
        d = out / f"seed{seed}"
        d.mkdir(parents=True)
        rows = [("talent_sft", t, ok) for t, ok in zip("ab", sft_ok)] + [("flat_skillbank", t, False) for t in "ab"]
        d.joinpath("episodes.jsonl").write_text("".join(json.dumps({"system": sy, "panel": "tw", "task_id": t, "success": ok})
                                                        + "\n" for sy, t, ok in rows))
    res = pooled(out, SFT_PAIRS)
    sf = res["pairs"]["talent_sft vs flat_skillbank"]
    assert sf["task_sign_test"]["ahead"] == 2 and sf["per_seed"]["seed1"]["a_only"] == 0 and not sf["a_ahead_in_every_seed"]
    assert "talent_sft vs flat_skillbank" not in pooled(out)["pairs"]  # RL seeds share one SFT: not pooled there


def test_flat_share_renders_whole_trajectories_as_the_flat_baseline_sees_them(knowledge, runs):
    k, _ = knowledge
    flat_k = LibraryKnowledge(k.lib, k.cfg, flat=True)
    none = build_sft_data(runs, k, SFTConfig(flat_share=0.0, min_skill_share=0.0))
    half = build_sft_data(runs, k, SFTConfig(min_skill_share=0.0, flat_share=0.5))
    again = build_sft_data(runs, k, SFTConfig(min_skill_share=0.0, flat_share=0.5))
    assert none.report["flat_trajectories"] == 0
    n_succ = half.report["n_successful"]
    assert 0 < half.report["flat_trajectories"] < n_succ  # a share, chosen per trajectory
    assert [s["messages"] for s in half.samples] == [s["messages"] for s in again.samples]  # seeded, stable
    flat_exec = [s for s in half.samples if s["kind"] == "exec" and not s["talent_id"]]
    assert flat_exec and all("Strategy (" not in s["messages"][1]["content"] for s in flat_exec)
    flat_only = build_sft_data(runs, flat_k, SFTConfig(flat_share=0.0, min_skill_share=0.0))  # what a flat SkillBank SFT would see
    flat_prompts = {json.dumps(s["messages"]) for s in flat_only.samples if s["kind"] == "exec"}
    assert all(json.dumps(s["messages"]) in flat_prompts for s in flat_exec)
    assert len(half.samples) == len(none.samples)  # rendered differently, not added


def test_skip_forced_drops_only_the_steps_constrained_decoding_takes_unasked(knowledge, runs):
    from talentrl_core.sft import forced

    k, _ = knowledge
    cfg = SFTConfig(flat_share=0.0, min_skill_share=0.0)
    every = build_sft_data(runs, k, cfg)
    chosen = build_sft_data(runs, k, dataclasses.replace(cfg, skip_forced=True))
    n_forced = sum(1 for t in runs if t.success for s in t.steps
                   if s.valid and s.action and not s.is_routing and forced(t.env, s.admissible))
    assert n_forced > 0
    assert len(every.samples) - len(chosen.samples) == n_forced
    for s in chosen.samples:
        if s["kind"] == "exec":
            shown = s["messages"][1]["content"].split("Admissible: ")[1].split("\n")[0].split(", ")
            assert len(shown) > 1  # every kept label is a decision between commands
    # a kept sample is the same prompt as without skipping: the forced moves stay in its history
    full = {json.dumps(s["messages"]) for s in every.samples}
    assert all(json.dumps(s["messages"]) in full for s in chosen.samples)


def test_a_small_quadrant_sample_is_seeded_and_stays_in_its_quadrant(headings):
    every = headings.tasks("train")
    few = headings.tasks("train", n=3, seed=5)
    assert len(few) == 3 and set(t.key for t in few) <= set(t.key for t in every)
    assert few == headings.tasks("train", n=3, seed=5) and few != headings.tasks("train", n=3, seed=6)


def test_listing_a_quadrant_family_compiles_none_of_the_seeds_it_drops(headings):
    kept = {t.payload["seed"] for t in headings.tasks("train")}
    dropped = sorted(set(range(1, 25)) - kept)
    assert dropped
    games = [GameSpec("tw-coin_collector", "level=4,quadrant=ne,route=hint", seed).game_file(headings.cache_dir)
             for seed in dropped]
    uncompiled = [g for g in games if not g.exists()]  # a shared test cache may hold the one compiled below
    assert len(uncompiled) >= len(games) - 1 and all(g.with_suffix(ROUTE_SUFFIX).is_file() for g in uncompiled)
    spec = GameSpec("tw-coin_collector", "level=4,quadrant=ne,route=hint", dropped[0])
    assert route_of(headings.cache_dir, spec) == walkthrough_route(generate_game(headings.cache_dir, spec))


@pytest.fixture(scope="module")
def forks(session_cache) -> TextWorldFamily:
    """tw-fork (envs/textworld/maps.py): a corridor north to a fork, the side told only by the start room's sign."""
    cfg = EnvConfig(challenges=["tw-fork_east:route=hidden", "tw-fork_west:route=hidden"], train_seeds=[1, 4],
                    max_steps=5, history=1, routing_obs_chars=200)
    fam = TextWorldFamily(cfg, session_cache)
    fam.prepare(fam.tasks("train"), workers=1, progress=False)
    return fam


def test_a_fork_tells_its_side_only_in_the_first_room(forks):
    from talentrl_core.envs.textworld.maps import fork_commands, sign

    env = forks.make()
    tasks = forks.tasks("train")
    assert {t.task_type for t in tasks} == {"tw-fork_east-hidden", "tw-fork_west-hidden"} and len(tasks) == 8
    names = set()
    for t in tasks:
        side = "east" if "east" in t.task_type else "west"
        first = env.reset(t)
        assert env.walkthrough() == fork_commands(2, side)
        assert sign(side) in first and not {"east", "west"} & set(env.goal().lower().replace(".", " ").split())
        names.add(first.split("-= ")[1].split(" =-")[0])
        for _ in range(2):
            obs = env.step("go north").observation
        assert "sign" not in obs.lower() and {"go east", "go west"} <= set(env.admissible_actions())
    assert len(names) > 2  # room names are drawn per seed
    env.close()


def test_headings_take_their_own_side_of_the_fork_and_lose_the_other(forks):
    from talentrl_core.envs.strategies import play

    env = forks.make()
    for t in forks.tasks("train"):
        east = "east" in t.task_type
        ne, nw = play(env, t, "northeast", max_steps=5), play(env, t, "northwest", max_steps=5)
        assert (ne.won, nw.won) == (east, not east)
        assert len((ne if east else nw).actions) == 4
        assert play(env, t, "northeast", max_steps=5).actions == ne.actions  # deterministic
    # a memoryless heading on the wrong side walks between the fork and the dead end until the step cap
    wrong = play(env, forks.tasks("train")[0], "northwest", max_steps=12)
    assert not wrong.won and not wrong.gave_up and len(wrong.actions) == 12
    env.close()


def test_the_router_sees_the_first_observation_when_asked(forks, knowledge, runs):
    """env.routing_obs_chars puts the first observation (without the repeated goal) into the routing prompt, the same
    text in the rollout's routing call and in SFT's routing sample; 0 keeps the goal-only prompt."""
    from talentrl_core.envs.textworld.maps import sign
    from talentrl_core.prompts import routing_view
    from talentrl_core.rl.static_knowledge import StaticKnowledge
    from talentrl_core.policies import RandomPolicy

    bank = {"talents": {"textworld": [
        {"talent_id": "T1", "name": "northeast", "when_to_apply": "east", "strategy": "take east", "skill_ids": []},
        {"talent_id": "T2", "name": "northwest", "when_to_apply": "west", "strategy": "take west", "skill_ids": []}]}}

    class Recording(RandomPolicy):
        seen: list = []

        def complete(self, items):
            self.seen += [it.messages for it in items if it.kind == "route"]
            return super().complete(items)

    tasks = forks.tasks("train")[:1] + forks.tasks("train")[-1:]
    settings = RolloutSettings.of(forks.cfg, run_id="r")
    policy = Recording(0)
    trajs = run_episodes(forks.make, [EpisodeSpec(t, routing="policy") for t in tasks], policy, settings,
                         StaticKnowledge.from_dict(bank), progress=False)
    for t, msgs in zip(trajs, policy.seen):
        user = msgs[-1]["content"]
        seen = routing_view(t.goal, t.initial_observation, 200)
        assert f"Obs: {seen}\n" in user and sign("east" if "east" in t.task_type else "west") in seen
        assert t.goal not in seen and len(seen) <= 200
    policy.seen.clear()
    run_episodes(forks.make, [EpisodeSpec(tasks[0], routing="policy")], policy, dataclasses.replace(settings, routing_obs_chars=0),
                 StaticKnowledge.from_dict(bank), progress=False)
    assert "Obs:" not in policy.seen[0][-1]["content"]
    # SFT's routing samples: the same view of each trajectory's first observation
    k, _ = knowledge
    cfg = SFTConfig(flat_share=0.0, min_skill_share=0.0)
    plain, seeing = build_sft_data(runs, k, cfg), build_sft_data(runs, k, cfg, routing_obs_chars=120)
    first = {t.task_id: t for t in runs}
    for a, b in zip([s for s in plain.samples if s["kind"] == "route"], [s for s in seeing.samples if s["kind"] == "route"]):
        t = first[b["task_id"]]
        view = routing_view(t.goal, t.initial_observation, 120)
        assert view and "Obs:" not in a["messages"][-2]["content"]
        assert b["messages"][-2]["content"] == a["messages"][-2]["content"].replace("\nChoose a strategy:", f"\nObs: {view}\nChoose a strategy:")


def test_verdicts_name_each_talent_criterion_met_or_not():
    from talentrl_core.evaluation.talent_effect import verdicts

    def block(success, lo, hi):
        return {"textworld": {"success": success, "ci95": [lo, hi]}}

    def routing(acc, regret):
        return {"textworld": {"accuracy": acc, "regret": regret}}

    metrics = {
        "systems": {"talentrl": block(0.975, 0.943, 0.989), "talent_sft": block(0.915, 0.868, 0.946),
                    "flat_grpo": block(0.5, 0.43, 0.57)},
        "paired": {"textworld": {"talentrl vs flat_grpo": {"a_only": 96, "b_only": 0, "p_mcnemar": 1e-20},
                                 "talent_sft vs flat_skillbank": {"a_only": 3, "b_only": 5, "p_mcnemar": 0.73}}},
        "talents": {"routing": {"talentrl": routing(0.975, 0.025), "talent_sft": routing(0.915, 0.085)},
                    "routing_paired": {"textworld": {"talentrl vs talent_sft": {"a_only": 12, "b_only": 0, "n": 200,
                                                                                "p_mcnemar": 0.0005}}}},
        "training": {"talentrl": {"divergence_mean": 0.3}},
    }
    lines = verdicts(metrics, "textworld")

    def line(prefix):
        (found,) = [x for x in lines if x.startswith(prefix)]
        return found

    assert line("- routing accuracy talentrl 0.975 vs talent_sft 0.915, regret 0.025 vs 0.085; tasks routed to the best "
                "talent by one only 12:0, p = 0.0005 — met (criterion: ")
    # intervals touching (0.943 < 0.946): the non-overlap criterion is missed, and said so
    assert line("- talentrl 0.975 [0.943, 0.989] vs talent_sft 0.915 [0.868, 0.946] — not met (criterion: talentrl's 95%")
    assert line("- talentrl vs flat_grpo: 96:0 discordant, p = 0.0000 — met")
    assert line("- talent_sft vs flat_skillbank: 3:5 discordant, p = 0.7300 — not met")
    assert line("- TalentRL arm divergence").endswith("0.30 — not met (criterion: ≥ 0.5).")
    # criteria whose systems or histories are missing give no line
    assert len(lines) == 5
    # a router RL left blank is not "better" because a few tasks flipped: higher on aggregate, but not paired
    metrics["talents"]["routing"] = {"talentrl": routing(0.500, 0.500), "talent_sft": routing(0.485, 0.515)}
    metrics["talents"]["routing_paired"]["textworld"]["talentrl vs talent_sft"] = {"a_only": 63, "b_only": 60, "n": 200,
                                                                                  "p_mcnemar": 0.857}
    lines = verdicts(metrics, "textworld")
    assert line("- routing accuracy talentrl 0.500 vs talent_sft 0.485").endswith(
        "63:60, p = 0.8570 — not met (criterion: talentrl's accuracy higher and its regret lower, paired p < 0.05).")
