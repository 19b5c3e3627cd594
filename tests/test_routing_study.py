"""The routing study's statistics (issue 38): per-seed McNemar, task-level sign test, routing accuracy n/a."""

from __future__ import annotations

from talentrl_core.evaluation.routing_verdicts import routing_accuracy, routing_verdicts, study_criteria, task_sign_test


def rows(system, successes, chosen=None, oracle=None, panel="textworld"):
    return [{"system": system, "panel": panel, "task_id": f"t{i}", "success": bool(s), "sample_idx": 0,
             "chosen_talent": (chosen[i] if chosen else None), "oracle_talent": (oracle[i] if oracle else None)}
            for i, s in enumerate(successes)]


N = 40
ORACLE = ["E" if i % 2 == 0 else "N" for i in range(N)]


def draw_rows():
    return (rows("oracle_talent", [1] * N, ORACLE, ORACLE) + rows("random_talent", [i % 4 == 0 for i in range(N)])
            + rows("talent_sft", [o == "E" for o in ORACLE], ["E"] * N, ORACLE))


def test_a_router_that_learned_the_sign_beats_the_habit_in_every_seed():
    learned = rows("talentrl", [1] * N, ORACLE, ORACLE)
    shuffled = rows("shuffled_contrast_rl", [o == "E" for o in ORACLE], ["E"] * N, ORACLE)
    v = routing_verdicts({s: draw_rows() + learned + shuffled for s in (0, 1, 2)}, ["talentrl", "shuffled_contrast_rl"])
    s = v["summary"]
    assert s["preconditions_met"] and v["preconditions"]["sft_router_follows_habit"]["routing_accuracy"] == 0.5
    assert s["talentrl_beats_talent_sft_every_seed"] and s["talentrl_never_below_talent_sft"]
    assert s["talentrl_routing_accuracy"] == [1.0, 1.0, 1.0] and s["talentrl_task_sign_p"] < 1e-5
    assert s["shuffled_within_0.05_of_sft_routing"]
    per = v["vs_talent_sft"]["talentrl"]["per_seed"][0]
    assert (per["a_only"], per["b_only"]) == (N // 2, 0)


def test_a_seed_below_sft_fails_the_criteria_and_ties_do_not_count():
    good = rows("talentrl", [1] * N, ORACLE, ORACLE)
    bad = rows("talentrl", [0] * N, ["N"] * N, ORACLE)
    v = routing_verdicts({0: draw_rows() + good, 1: draw_rows() + bad}, ["talentrl"])
    assert not v["summary"]["talentrl_beats_talent_sft_every_seed"] and not v["summary"]["talentrl_never_below_talent_sft"]
    # per task: seed 0 wins the north tasks, seed 1 loses the east ones -> 20 ahead, 20 behind
    base = {f"textworld/t{i}": r for i, r in enumerate(rows("talent_sft", [o == "E" for o in ORACLE]))}
    runs = [{f"textworld/t{i}": r for i, r in enumerate(rs)} for rs in (good, bad)]
    assert task_sign_test(runs, base) == {"tasks": N, "ahead": 20, "behind": 20, "p_sign": 1.0}


def test_routing_accuracy_is_na_where_every_task_has_one_best_talent():
    same = {f"t{i}": {"chosen_talent": "E", "oracle_talent": "E"} for i in range(5)}
    assert routing_accuracy(same) is None


def test_a_router_that_reads_the_cue_meets_a2s_precondition_and_routing_only_is_held_to_the_primary():
    """A2 (env.routing_cue): talent_sft's rows carry cue_read; the habit precondition gives way to reading the cue
    (>= 0.95 of the panel). routing_only (A1) is held to the same primary criteria as talentrl."""
    sft = rows("talent_sft", [o == "E" for o in ORACLE], ["E"] * N, ORACLE)
    for i, r in enumerate(sft):
        r["cue_read"] = i != 0  # 39 of 40
    draw = rows("oracle_talent", [1] * N, ORACLE, ORACLE) + rows("random_talent", [i % 4 == 0 for i in range(N)]) + sft
    v = routing_verdicts({0: draw + rows("routing_only", [1] * N, ORACLE, ORACLE)}, ["routing_only"])
    pre = v["preconditions"]
    assert "sft_router_follows_habit" not in pre and pre["sft_router_reads_cue"]["cue_read"] == 39 / 40
    assert pre["sft_router_reads_cue"]["met"] and v["summary"]["preconditions_met"]
    assert v["summary"]["routing_only_beats_talent_sft_every_seed"] and v["summary"]["routing_only_routing_accuracy"] == [1.0]
    sft[1]["cue_read"] = sft[2]["cue_read"] = False  # 37 of 40 < 0.95
    assert not routing_verdicts({0: draw}, [])["preconditions"]["sft_router_reads_cue"]["met"]


def test_each_mechanism_baseline_is_tested_against_the_primary_of_its_own_seed():
    """At --budget a1 the baselines run beside routing_only: each is paired with routing_only of the same RL seed."""
    learned = rows("routing_only", [1] * N, ORACLE, ORACLE)
    relabel = rows("relabel_sft", [i < N - 4 for i in range(N)], ORACLE, ORACLE)  # 4 tasks behind
    v = routing_verdicts({s: draw_rows() + learned + relabel for s in (0, 1)}, ["routing_only", "relabel_sft"])
    block = v["vs_primary"]["relabel_sft"]
    assert block["primary"] == "routing_only" and sorted(block["per_seed"]) == [0, 1]
    assert (block["per_seed"][0]["a_only"], block["per_seed"][0]["b_only"]) == (4, 0)
    assert v["summary"]["routing_only_vs_relabel_sft"] == ["4:0 p=0.12"] * 2
    assert "sampled_talent_rl" not in v["vs_primary"]


def test_the_a1_budget_puts_every_baseline_in_the_routing_only_phase_and_its_own_folder():
    import argparse

    import pytest

    from pipeline.routing_study import run_name, variant_overrides

    a0 = argparse.Namespace(budget="a0", a1_steps=75, a1_tasks=16)
    a1 = argparse.Namespace(budget="a1", a1_steps=75, a1_tasks=16)
    assert "rl.train_execution=false" not in variant_overrides("shuffled_contrast_rl", a0)
    shuffled = variant_overrides("shuffled_contrast_rl", a1)
    assert {"rl.shuffle_route_credit=true", "rl.train_execution=false", "rl.steps=75", "rl.tasks_per_step=16"} <= set(shuffled)
    assert variant_overrides("routing_only", a1) == variant_overrides("routing_only", a0)
    assert run_name(2, "relabel_sft", a1) == "s2-relabel_sft-a1" and run_name(2, "routing_only", a1) == "s2-routing_only"
    assert run_name(2, "relabel_sft", a0) == "s2-relabel_sft"
    with pytest.raises(ValueError, match="routing_only"):
        variant_overrides("talentrl", a1)


def test_the_executor_after_training_is_held_to_its_success_per_talent_before():
    """oracle_talent on a variant's trained checkpoint (``oracle_talent_after_<variant>``) against the draw's: met while
    every talent's success moves by at most 0.05."""
    same = rows("oracle_talent_after_routing_only", [1] * N, ORACLE, ORACLE)
    east_lost = rows("oracle_talent_after_routing_only", [o == "N" or i < 4 for i, o in enumerate(ORACLE)], ORACLE, ORACLE)
    learned = rows("routing_only", [1] * N, ORACLE, ORACLE)
    v = routing_verdicts({0: draw_rows() + learned + same, 1: draw_rows() + learned + east_lost}, ["routing_only"])
    assert v["executor_after"]["routing_only"][0] == {"before": {"E": 1.0, "N": 1.0}, "after": {"E": 1.0, "N": 1.0}, "met": True}
    assert v["executor_after"]["routing_only"][1]["after"] == {"E": 0.1, "N": 1.0}
    assert not v["summary"]["routing_only_executor_not_damaged"]
    assert "oracle_talent_after_routing_only" not in v["success"]


def test_relabel_measures_once_and_reads_the_kept_measurement(tmp_path):
    """relabel_sft's measurement (its rollouts: the costly part) is kept beside the run and read back, not re-measured."""
    from talentrl_core.io import write_json
    from talentrl_core.relabel import measured_data

    keep = tmp_path / "relabel_measured.json"
    sample = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "<talent>T1</talent>"}],
              "kind": "route", "task_id": "t0", "talent_id": "T-1", "skill_ids": [], "weight": 1}
    write_json(keep, {"samples": [sample], "report": {"labelled": 1}})
    data = measured_data(None, None, None, "no-checkpoint", n_tasks=10, rollouts=2, seed=0, keep=keep)  # no env: read
    assert data.samples == [sample] and data.report == {"labelled": 1}


def test_relabel_with_rl_batch_draws_as_many_samples_a_step_as_an_rl_update(tmp_path, monkeypatch):
    """relabel_replay_sft_rl_batch trains each step on tasks × group samples (RL's batch), the others on the SFT's."""
    from talentrl_core import sft
    from talentrl_core.config import TalentRLConfig
    from talentrl_core.io import write_json
    from talentrl_core.relabel import relabel_sft

    keep = tmp_path / "measured.json"
    write_json(keep, {"samples": [], "report": {"labelled": 0}})
    seen = []
    monkeypatch.setattr(sft, "train_sft", lambda data, init, out, cfg, model, meta: seen.append(cfg) or {})
    cfg = TalentRLConfig()
    family = type("F", (), {"name": "textworld"})
    for batch in (None, 128):
        relabel_sft(cfg, family, None, "init", tmp_path / "out", n_tasks=4, rollouts=2, steps=3, keep=keep,
                    batch_size=batch)
    assert [c.batch_size for c in seen] == [cfg.sft.batch_size, 128] and {c.max_steps for c in seen} == {3}
    assert {c.save_steps for c in seen} == {1}  # a quarter of 3 steps, at least 1: a stopped run resumes


def test_the_study_needs_three_draws_each_meeting_the_primary_and_keeps_a_failing_draw():
    learned = rows("routing_only", [1] * N, ORACLE, ORACLE)
    half = rows("routing_only", [i % 4 != 1 for i in range(N)], [o if i % 4 != 1 else "E" for i, o in enumerate(ORACLE)], ORACLE)
    good = routing_verdicts({s: draw_rows() + learned for s in (0, 1, 2)}, ["routing_only"])
    assert not study_criteria({0: good, 1: good})["routing_only"]["met"]  # two draws are not enough
    three = study_criteria({0: good, 1: good, 2: good})["routing_only"]
    assert three["met"] and three["runs_routing_at_bar"] == "9 of 9" and three["draws_meeting_primary"] == [0, 1, 2]
    weak = routing_verdicts({0: draw_rows() + learned, 1: draw_rows() + half, 2: draw_rows() + half}, ["routing_only"])
    c = study_criteria({0: good, 1: good, 2: weak})["routing_only"]
    assert c["runs_routing_at_bar"] == "7 of 9" and not c["met"]  # routing 0.75 on two runs: past the one allowed
    no_executor = routing_verdicts({s: [r for r in draw_rows() if r["system"] != "oracle_talent"] + [
        *rows("oracle_talent", [i % 4 == 0 for i in range(N)], ORACLE, ORACLE), *learned] for s in (0, 1, 2)}, ["routing_only"])
    c = study_criteria({0: good, 1: good, 2: no_executor})["routing_only"]
    assert c["draws_run"] == [0, 1, 2] and c["draws_meeting_primary"] == [0, 1] and not c["met"]
