"""Evaluation statistics, the metrics schema, and the written report (DESIGN.md §6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from talentrl_core.evaluation import (
    EpisodeResult,
    avg_at_k,
    bootstrap_ci,
    build_metrics,
    intervals_overlap,
    routing_confusion,
    validate_metrics,
    wilson_ci,
)
from talentrl_core.evaluation.report import render_markdown, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_wilson_known_values():
    lo, hi = wilson_ci(8, 10)
    assert lo == pytest.approx(0.490, abs=1e-3) and hi == pytest.approx(0.943, abs=1e-3)
    lo, hi = wilson_ci(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    assert wilson_ci(10, 10)[1] == 1.0 and wilson_ci(0, 10)[0] == 0.0
    assert wilson_ci(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_ci(11, 10)


def test_bootstrap_is_seeded_and_brackets_the_mean():
    vals = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1]
    a, b = bootstrap_ci(vals, n_boot=500, seed=3), bootstrap_ci(vals, n_boot=500, seed=3)
    assert a == b
    assert a[0] <= 0.7 <= a[1]
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_avg_at_k_and_overlap():
    assert avg_at_k([[1, 1], [0, 1], [0, 0]]) == pytest.approx(0.5)
    assert intervals_overlap([0.2, 0.5], [0.45, 0.9]) and not intervals_overlap([0.2, 0.4], [0.41, 0.9])


def _results():
    rs = []
    for system, rate in [("flat_skillbank", 0.4), ("talentrl", 0.8)]:
        for panel in ("textworld", "alfworld_valid_seen"):
            for i in range(10):
                ttype = "pick" if i % 2 else "heat"
                rs.append(EpisodeResult(system, panel, f"{panel}-{i}", ttype, i < rate * 10, float(i < rate * 10), 20 + i,
                                        chosen_talent=("T1" if i < 6 else "T2") if system == "talentrl" else None,
                                        oracle_talent="T1" if i < 5 else "T2"))
                for k in range(1, 4):  # sampled attempts for avg@k
                    rs.append(EpisodeResult(system, panel, f"{panel}-{i}", ttype, (i + k) % 2 == 0, 0.0, 25,
                                            sample_idx=k))
    return rs


def test_build_metrics_shape_and_values():
    m = build_metrics(_results(), seed=0, n_boot=300)
    validate_metrics(m)
    assert m["schema"] == 1
    assert set(m["systems"]) == {"flat_skillbank", "talentrl"}
    block = m["systems"]["talentrl"]["textworld"]
    assert block["success"] == pytest.approx(0.8) and block["n"] == 10
    assert block["ci95"] == pytest.approx(list(wilson_ci(8, 10)))
    assert isinstance(block["n"], int) and isinstance(block["success"], float)
    assert block["tokens_per_episode"] == pytest.approx(24.5)
    assert set(block["per_task_type"]) == {"pick", "heat"}
    assert block["per_task_type"]["heat"]["n"] == 5
    assert block["avg_at_k"]["k"] == 3 and block["avg_at_k"]["n_tasks"] == 10
    assert 0.0 <= block["avg_at_k"]["ci95"][0] <= block["avg_at_k"]["value"] <= block["avg_at_k"]["ci95"][1]
    assert block["routing_accuracy"] == pytest.approx(0.9) and block["routing_n"] == 10
    assert "routing_accuracy" not in m["systems"]["flat_skillbank"]["textworld"]
    # strict JSON round trip (no numpy scalars, no NaN)
    assert json.loads(json.dumps(m, allow_nan=False)) == m


def test_routing_accuracy_is_na_where_the_oracle_talent_is_one_for_every_task():
    """Issue 38: with one oracle talent on every task (WebShop's rank_order) there is no routing choice to get right:
    routing_accuracy is None in metrics.json and "n/a" in the report."""
    rs = [EpisodeResult("talent_sft", "webshop", f"g{i}", "shop", i % 2 == 0, 0.5, 10, chosen_talent="T1" if i % 3 else "T2",
                        oracle_talent="T1") for i in range(6)]
    m = build_metrics(rs, seed=0, n_boot=50)
    validate_metrics(m)
    block = m["systems"]["talent_sft"]["webshop"]
    assert block["routing_accuracy"] is None and block["routing_n"] == 6
    assert "| talent_sft | webshop | n/a | 6 |" in render_markdown(m)


def test_build_metrics_bootstrap_ci_and_errors():
    m = build_metrics(_results(), ci="bootstrap", n_boot=200, seed=1)
    assert m["systems"]["talentrl"]["textworld"]["ci_method"] == "bootstrap"
    validate_metrics(m)
    only_sampled = [EpisodeResult("talentrl", "tw", "t0", "a", True, 1.0, 3, sample_idx=1)]
    with pytest.raises(ValueError, match="no greedy"):
        build_metrics(only_sampled)
    dup = [EpisodeResult("talentrl", "tw", "t0", "a", True, 1.0, 3)] * 2
    with pytest.raises(ValueError, match="duplicate"):
        build_metrics(dup)


@pytest.mark.parametrize(
    "mutate, path",
    [
        (lambda m: m.pop("schema"), "schema"),
        (lambda m: m["systems"]["talentrl"]["textworld"].pop("ci95"), "systems.talentrl.textworld.ci95"),
        (lambda m: m["systems"]["talentrl"]["textworld"].__setitem__("n", 10.0), "systems.talentrl.textworld.n"),
        (lambda m: m["systems"]["talentrl"]["textworld"].__setitem__("success", 1.5),
         "systems.talentrl.textworld.success"),
        (lambda m: m["systems"]["talentrl"]["textworld"].__setitem__("ci95", [0.9, 0.1]),
         "systems.talentrl.textworld.ci95"),
        (lambda m: m["systems"]["talentrl"]["textworld"]["per_task_type"]["heat"].__setitem__("success", "high"),
         "systems.talentrl.textworld.per_task_type.heat.success"),
        (lambda m: m["systems"].__setitem__("talentrl", []), "systems.talentrl"),
        (lambda m: m["systems"]["talentrl"]["textworld"]["avg_at_k"].__setitem__("value", float("nan")),
         "systems.talentrl.textworld.avg_at_k.value"),
    ],
)
def test_validate_metrics_rejects_bad_shape_naming_the_path(mutate, path):
    m = copy.deepcopy(build_metrics(_results(), n_boot=100))
    mutate(m)
    with pytest.raises(ValueError) as e:
        validate_metrics(m)
    assert str(e.value).startswith(path + ":") or str(e.value).startswith(path + ".")


def test_write_report_writes_metrics_markdown_and_pngs(tmp_path):
    rs = _results()
    m = build_metrics(rs, n_boot=100)
    conf = routing_confusion(rs)
    assert conf["talentrl"]["T1"] == {"T1": 10}  # 2 panels x 5 oracle-T1 tasks, all chose T1
    written = write_report(m, tmp_path / "eval", confusion=conf)
    out = tmp_path / "eval"
    assert json.loads((out / "metrics.json").read_text()) == m
    md = (out / "report.md").read_text()
    assert "| system | alfworld_valid_seen | textworld |" in md
    assert "0.800 [0.490, 0.943] (n=10)" in md
    assert "### textworld" in md and "heat" in md and "avg@k" in md
    assert "Notes" in md
    for name in ("success_by_panel.png", "success_by_task_type.png", "routing_confusion_talentrl.png"):
        p = out / name
        assert p.exists() and p.read_bytes()[:8] == PNG_MAGIC and name in written
        assert f"]({name})" in md
    assert not list(out.glob(".*tmp"))  # atomic writes leave no temporaries


def test_write_report_refuses_invalid_metrics(tmp_path):
    with pytest.raises(ValueError, match="systems"):
        write_report({"schema": 1, "systems": {}}, tmp_path / "eval")
    assert not (tmp_path / "eval" / "metrics.json").exists()


def test_paired_comparison_counts_discordant_tasks_on_common_tasks():
    from talentrl_core.evaluation.metrics import paired_comparisons
    from talentrl_core.evaluation.stats import mcnemar_exact

    rs = []
    # talentrl solves tasks 0-5, talent_sft solves 4-6; task 9 only talentrl ran (not paired); a sampled
    # attempt never counts
    for i in range(10):
        rs.append(EpisodeResult("talentrl", "textworld", f"t{i}", "pick", i <= 5 or i == 9, 0.0, 1))
    for i in range(9):
        rs.append(EpisodeResult("talent_sft", "textworld", f"t{i}", "pick", 4 <= i <= 6, 0.0, 1))
    rs.append(EpisodeResult("talent_sft", "textworld", "t0", "pick", True, 0.0, 1, sample_idx=1))
    c = paired_comparisons(rs)["textworld"]["talentrl vs talent_sft"]
    assert (c["a_only"], c["b_only"], c["both"], c["neither"], c["n"]) == (4, 1, 2, 2, 9)
    assert c["p_mcnemar"] == pytest.approx(mcnemar_exact(4, 1)) == pytest.approx(0.375)
    m = build_metrics(rs, n_boot=50)
    assert m["paired"]["textworld"]["talentrl vs talent_sft"] == c
    assert "talent_sft vs zero_shot" not in m["paired"]["textworld"]  # zero_shot was not evaluated
    from talentrl_core.evaluation.report import render_markdown

    md = render_markdown(m)
    assert "| talentrl vs talent_sft | textworld | 4 | 1 | 2 | 9 | 0.3750 | 0 / 0 / 9 | 1 |" in md  # every reward 0.0
    # the intervals overlap at this n, so the notes add the sharper paired result
    assert "Paired on the same tasks: talentrl vs talent_sft 4:1 discordant, McNemar p = 0.3750." in md


def test_rl_training_history_goes_into_metrics_and_report(tmp_path):
    from talentrl_core.evaluation.report import render_markdown
    from talentrl_core.evaluation.metrics import training_summary
    from talentrl_core.evaluation.runner import rl_histories
    from talentrl_core.io import write_json
    from talentrl_core.paths import ArtifactPaths

    paths = ArtifactPaths(tmp_path)
    # TalentRL: the routing contrast was 0 in 3 of 4 updates, arms diverged in 10% of matched rollouts
    hist = [{"rollout/reward": r, "route/contrast": c, "route/divergence": 0.1, "route/entropy": e, "rl/kl": 0.0}
            for r, c, e in [(0.1, 0.0, 0.69), (0.2, 0.0, 0.68), (0.3, 0.4, 0.6), (0.4, 0.0, 0.5)]]
    write_json(paths.rl_checkpoint / "talentrl_meta.json", {"history": hist})
    write_json(paths.flat_grpo_checkpoint / "talentrl_meta.json", {"history": [{"rollout/reward": 0.5}]})
    histories = rl_histories(paths, ["talent_sft", "talentrl", "flat_grpo"])
    t = {s: training_summary(h) for s, h in histories.items()}
    assert set(t) == {"talentrl", "flat_grpo"}  # talent_sft is not an RL checkpoint
    assert t["talentrl"]["contrast_zero_share"] == pytest.approx(0.75)
    assert (t["talentrl"]["reward_first"], t["talentrl"]["reward_last"]) == (0.1, 0.4)
    assert t["talentrl"]["divergence_mean"] == pytest.approx(0.1)
    assert "contrast_zero_share" not in t["flat_grpo"]
    m = build_metrics(_results(), n_boot=50)
    m["training"] = t
    validate_metrics(m)
    md = render_markdown(m)
    assert "## RL training" in md
    assert "| talentrl | 4 | 0.100 | 0.400 | 0.750 | 0.100 | 0.690 → 0.500 |" in md
    bad = copy.deepcopy(m)
    bad["training"]["talentrl"]["reward_last"] = "high"
    with pytest.raises(ValueError, match="training.talentrl"):
        validate_metrics(bad)
    # a corrupt history file is named
    (paths.rl_checkpoint / "talentrl_meta.json").write_text("{not json")
    # the DVC files: a small headline and the RL curves (one row per update)
    files = write_report(m, tmp_path / "eval", histories=histories)
    head = json.loads(Path(files["headline.json"]).read_text())
    assert head["training"]["talentrl"]["reward_last"] == 0.4 and set(head["success"]) == set(m["systems"])
    assert len(json.dumps(head)) < 2000
    rows = Path(files["rl_curves.csv"]).read_text().splitlines()
    assert rows[0].startswith("update,talentrl_reward,talentrl_success,talentrl_routing_entropy,flat_grpo_reward")
    assert len(rows) == 1 + 4 and rows[4].split(",")[1] == "0.4"
    assert "rl_curves.png" in files
    with pytest.raises(ValueError, match="talentrl_meta.json"):
        rl_histories(paths, ["talentrl"])


def test_evaluation_cost_section_reports_prompt_and_prefilled_tokens_per_step():
    from talentrl_core.evaluation.report import render_markdown
    from talentrl_core.evaluation.runner import run_perf

    class T:
        steps = [0] * 5

    c = run_perf([T(), T()], 12.34, {"prompt_tokens": 100, "prefilled_tokens": 100, "forwards": 3},
                 {"prompt_tokens": 4600, "prefilled_tokens": 1900, "forwards": 23})
    assert c == {"seconds": 12.3, "policy_steps": 10, "prompt_tokens": 4500, "prefilled_tokens": 1800, "forwards": 20,
                 "prompts_cut": 0}
    m = build_metrics(_results(), n_boot=50)
    assert "Evaluation cost" not in render_markdown(m)  # no perf recorded: no section
    m["perf"] = {"talentrl": {"textworld": c}}
    validate_metrics(m)
    assert "| talentrl | textworld | 12 | 10 | 450 | 180 |" in render_markdown(m)


def test_environment_errors_and_invalid_actions_are_counted_and_gate_fails():
    from assets.checks import error_gate
    from talentrl_core.evaluation.metrics import EpisodeResult, build_metrics
    from talentrl_core.evaluation.report import render_markdown

    rs = [EpisodeResult("talent_sft", "textworld", f"t{i}", "a", False, 0.0, 3, error=i < 3, n_steps=4, n_invalid=1)
          for i in range(10)]
    rs += [EpisodeResult("flat_skillbank", "textworld", f"t{i}", "a", i % 2 == 0, 1.0, 3, n_steps=5) for i in range(10)]
    m = build_metrics(rs)
    b = m["systems"]["talent_sft"]["textworld"]
    assert b["errors"] == 3 and b["invalid_rate"] == 0.25 and b["success"] == 0.0
    assert m["systems"]["flat_skillbank"]["textworld"]["errors"] == 0
    assert "3 errors, 25.0% invalid" in render_markdown(m)
    passed, meta = error_gate(m, 0.05)
    assert not passed and meta["failures"] == ["talent_sft on textworld: 3 of 10 episodes ended in an environment error"]
    assert error_gate(m, 0.5)[0]


def test_runner_refuses_a_panel_without_one_trajectory_per_task():
    from types import SimpleNamespace

    from talentrl_core.evaluation.runner import check_one_per_task

    tasks = [SimpleNamespace(task_id=f"t{i}") for i in range(3)]
    check_one_per_task([SimpleNamespace(task_id=f"t{i}") for i in (2, 0, 1)], tasks, "s", "p")
    with pytest.raises(RuntimeError, match="2 trajectories for 3 tasks"):
        check_one_per_task([SimpleNamespace(task_id="t0"), SimpleNamespace(task_id="t1")], tasks, "s", "p")


def test_zero_shot_is_the_unmodified_backbone_for_hf_models(tmp_path):
    from pipeline.config import load_config
    from talentrl_core.evaluation.runner import system_checkpoint
    from talentrl_core.paths import ArtifactPaths

    tiny = load_config([f"artifacts_dir={tmp_path}"])
    paths = ArtifactPaths.of(tiny)
    assert system_checkpoint(tiny, paths, "base") == (str(paths.base_model), False)
    (tmp_path / "backbone").mkdir()
    (tmp_path / "backbone" / "config.json").write_text("{}")
    hf = load_config([f"artifacts_dir={tmp_path}", "model=hf", f"model.name_or_path={tmp_path / 'backbone'}"])
    assert system_checkpoint(hf, paths, "base") == (str(tmp_path / "backbone"), True)
    hub = load_config([f"artifacts_dir={tmp_path}", "model=hf", "model.name_or_path=Qwen/Qwen2.5-7B-Instruct"])
    assert system_checkpoint(hub, paths, "base") == ("Qwen/Qwen2.5-7B-Instruct", True)  # from the local HF cache
    assert system_checkpoint(hub, paths, "sft") == (str(paths.sft_checkpoint), False)


def test_each_system_reads_the_library_version_its_checkpoint_trained_on(tmp_path):
    import json

    from pipeline.config import load_config
    from talentrl_core.evaluation.runner import checkpoint_path
    from talentrl_core.systems import SYSTEMS
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.stages import pinned_library

    cfg = load_config([f"artifacts_dir={tmp_path}"])
    paths = ArtifactPaths.of(cfg)
    for ckpt, version in ((paths.sft_checkpoint, 1), (paths.rl_checkpoint, 4), (paths.flat_grpo_checkpoint, 1)):
        ckpt.mkdir(parents=True)
        (ckpt / "talentrl_meta.json").write_text(json.dumps({"library_version": version}))
    # evolution during TalentRL wrote versions 2..4: only talentrl reads them; every baseline stays on the SFT's
    got = {s: pinned_library(cfg, checkpoint_path(paths, spec.checkpoint)).version for s, spec in SYSTEMS.items() if s != "zero_shot"}
    assert got == {"flat_skillbank": 1, "random_talent": 1, "oracle_talent": 1, "talent_sft": 1, "flat_grpo": 1, "talentrl": 4}
    assert pinned_library(cfg, tmp_path / "no-checkpoint").version == -1
    explicit = load_config([f"artifacts_dir={tmp_path}", "library.version=2"])
    assert pinned_library(explicit, paths.rl_checkpoint).version == 2


def test_webshop_panel_reports_score_with_interval():
    rewards = [1.0, 0.5, 0.0, 0.75]
    rs = [EpisodeResult("talent_sft", "webshop", f"w{i}", "fashion", r == 1.0, r, 10) for i, r in enumerate(rewards)]
    rs += [EpisodeResult("talent_sft", "tw", f"t{i}", "a", True, 1.0, 10) for i in range(2)]
    m = build_metrics(rs, n_boot=200)
    block = m["systems"]["talent_sft"]["webshop"]
    assert block["score"] == pytest.approx(56.25) and block["success"] == pytest.approx(0.25)
    lo, hi = block["score_ci95"]
    assert 0.0 <= lo <= 56.25 <= hi <= 100.0
    assert "score" not in m["systems"]["talent_sft"]["tw"]
    md = render_markdown(m)
    assert "## Score (mean reward x 100)" in md and "| talent_sft | 56.2 [" in md


def test_report_opens_with_its_headline_and_verdicts_before_the_tables():
    """The first sections a reader sees: the main comparisons' success with the paired test, then every criterion
    met or not; the detail tables follow, and the talent section does not repeat the verdicts."""
    rs = []
    for system, solved in [("talentrl", 18), ("flat_grpo", 9), ("talent_sft", 12), ("oracle_talent", 20),
                           ("random_talent", 10)]:
        rs += [EpisodeResult(system, "textworld", f"t{i}", "pick", i < solved, float(i < solved), 30) for i in range(20)]
    m = build_metrics(rs)
    m["training"] = {"talentrl": {"updates": 8, "divergence_mean": 0.9, "contrast_zero_share": 0.0}}
    md = render_markdown(m)
    lines = md.splitlines()
    headings = [line for line in lines if line.startswith("## ")]
    assert lines[0] == "# TalentRL evaluation"
    assert headings[:3] == ["## Headline", "## Verdicts", "## Greedy success by system and panel"]
    head = md[:md.index("## Greedy success")]
    assert "- `textworld`: talentrl 0.900 [0.699, 0.972] vs flat_grpo 0.450 [0.258, 0.658] (n = 20; paired 9:0, p = 0.0039)." in head
    assert "- `textworld`: talentrl 0.900 [0.699, 0.972] vs talent_sft 0.600" in head  # the two main comparisons
    assert "- oracle vs random talent: +0.500 success, 10:0 discordant, p = 0.0020 — met" in head
    assert "- TalentRL arm divergence" in head and "talentrl vs flat_grpo: 9:0 discordant, p = 0.0039 — met" in head
    assert md.count("— met (criterion") + md.count("— not met (criterion") == head.count("(criterion")  # once, at the top
    # without the method's systems the headline falls back to the talent comparisons, then to the best system
    sft_only = build_metrics([r for r in rs if r.system in ("talent_sft", "oracle_talent", "random_talent")])
    assert "- `textworld`: oracle_talent 1.000" in render_markdown(sft_only).split("## Verdicts")[0]
    one = build_metrics([r for r in rs if r.system == "talent_sft"])
    assert render_markdown(one).splitlines()[6] == "- `textworld`: best greedy success talent_sft 0.600 [0.387, 0.781] (n = 20)."


def test_learning_curve_reads_every_saved_sft_checkpoint_by_step(tmp_path):
    from talentrl_core.evaluation.curve import curve_checkpoints
    from talentrl_core.paths import ArtifactPaths

    from pipeline.config import load_config

    paths = ArtifactPaths.of(load_config([f"artifacts_dir={tmp_path}"]))
    with pytest.raises(ValueError, match=r"no SFT checkpoint under sft\.work in .*: run the sft stage"):
        curve_checkpoints(paths)
    work = paths.sft_checkpoint.with_name(paths.sft_checkpoint.name + ".work")
    for step in (300, 100, 20):
        (work / f"checkpoint-{step}").mkdir(parents=True)
        (work / f"checkpoint-{step}" / "config.json").write_text("{}")
    (work / "checkpoint-400").mkdir()  # being written: no config yet
    assert [s for s, _ in curve_checkpoints(paths)] == [20, 100, 300]


def test_a_dagger_curve_runs_on_across_rounds(tmp_path):
    """Behaviour cloning's checkpoints, then each DAgger round's at the steps before it plus its own: one curve."""
    from talentrl_core.dagger import dagger_root
    from talentrl_core.evaluation.curve import curve_checkpoints
    from talentrl_core.paths import ArtifactPaths

    from pipeline.config import load_config

    paths = ArtifactPaths.of(load_config([f"artifacts_dir={tmp_path}"]))
    root, final = dagger_root(paths.sft_checkpoint), paths.sft_checkpoint
    for run, steps in ((root / "round-0", (500, 1000)), (root / "round-1", (125, 250)), (final, (125, 260))):
        for step in steps:
            (run.with_name(run.name + ".work") / f"checkpoint-{step}").mkdir(parents=True)
            (run.with_name(run.name + ".work") / f"checkpoint-{step}" / "config.json").write_text("{}")
    got = curve_checkpoints(paths, dagger_rounds=2)
    assert [s for s, _ in got] == [500, 1000, 1125, 1250, 1375, 1510]
    assert got[2][1] == root / "round-1.work" / "checkpoint-125" and got[-1][1].parent.name == final.name + ".work"
    assert [s for s, _ in curve_checkpoints(paths)] == [125, 260]  # without rounds: the final SFT's own


def test_a_curve_point_stopped_midway_plays_only_its_unfinished_chunks_again(tmp_path, shared_data, monkeypatch):
    """A point is played in chunks, each kept as it finishes: stopped in its second chunk, the rerun reads the first
    back and plays the rest; the CLI removes the chunks once the curve is written (``pipeline.curve``)."""
    from talentrl_core.evaluation import curve as curve_mod
    from talentrl_core.evaluation.resume import ChunkCache
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.policies import RandomPolicy

    from pipeline.config import load_config

    cfg = load_config(["env=qa", f"artifacts_dir={tmp_path}", f"data_dir={shared_data}", "eval.n_per_panel=3"])
    work = ArtifactPaths.of(cfg).sft_checkpoint.with_name("sft.work") / "checkpoint-10"
    work.mkdir(parents=True)
    (work / "config.json").write_text("{}"), (work / "model.safetensors").write_bytes(b"a")
    monkeypatch.setattr(curve_mod, "CHUNK", 2)
    real, played, stop = curve_mod.run_episodes, [], [True]

    def stopped_in_the_second_chunk(make, specs, *a, **kw):
        played.append([s.task.task_id for s in specs])
        if stop[0] and len(played) == 2:
            raise KeyboardInterrupt
        return real(make, specs, *a, **kw)

    monkeypatch.setattr(curve_mod, "run_episodes", stopped_in_the_second_chunk)
    cache = ChunkCache(tmp_path / "curve")

    def run():
        return curve_mod.learning_curve(cfg, "qa_nq", lambda flat: None, lambda ckpt: RandomPolicy(0),
                                        systems=("zero_shot",), log=lambda m: None, cache=cache)

    with pytest.raises(KeyboardInterrupt):
        run()
    first = [json.loads(p.read_text())["rows"] for p in sorted(cache.root.rglob("*.json"))]
    assert len(first) == 1 and len(first[0]) == 2
    stop[0], played[:] = False, []
    rows, metrics = run()
    assert [len(p) for p in played] == [1] and rows[:2] == first[0] and metrics["curve"]["zero_shot"][0]["n"] == 3


def test_a_written_curve_removes_the_chunks_of_its_own_points_only(tmp_path):
    """Two curve calls on the same artifacts, for other steps, into other ``--out`` folders: the first to finish
    removes the kept chunks of the points it wrote, never the other's (which that call still needs to resume)."""
    from pipeline.config import load_config
    from pipeline.curve import drop_written_points, point_chunks

    cfg = load_config(["env=qa", f"artifacts_dir={tmp_path}"])
    cache = point_chunks(cfg)
    for step in (250, 1000):
        for start in (0, 64):
            cache.put("alfworld_valid_train", f"talent_sft-step{step}", 0, start, "k", [{"step": step}], {})
    row = {"panel": "alfworld_valid_train", "system": "talent_sft", "step": 1000, "task_id": "t"}
    drop_written_points(cfg, None, [row])
    kept = sorted(p.relative_to(cache.root).as_posix() for p in cache.root.rglob("*.json"))
    assert kept == ["alfworld_valid_train/talent_sft-step250/k0-000000.json",
                    "alfworld_valid_train/talent_sft-step250/k0-000064.json"]
    drop_written_points(cfg, None, [{**row, "step": 250}])
    assert not cache.root.exists()  # the last point's chunks gone, the folder with them


def test_a_learning_curve_resumes_and_replays_only_changed_checkpoints(tmp_path, shared_data):
    """A second call into the same rows keeps every point whose checkpoint is unchanged and plays the rest: a new
    checkpoint, and one whose weights changed under the same step (a rerun SFT), never the stale rows."""
    from talentrl_core.evaluation.curve import learning_curve
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.policies import RandomPolicy

    from pipeline.config import load_config

    cfg = load_config(["env=qa", f"artifacts_dir={tmp_path}", f"data_dir={shared_data}", "eval.n_per_panel=3"])
    paths = ArtifactPaths.of(cfg)
    work = paths.sft_checkpoint.with_name(paths.sft_checkpoint.name + ".work")

    def save(step, weights):
        (work / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
        (work / f"checkpoint-{step}" / "config.json").write_text("{}")
        (work / f"checkpoint-{step}" / "model.safetensors").write_bytes(weights)

    loaded = []

    def run(done=()):
        return learning_curve(cfg, "qa_nq", lambda flat: None, lambda ckpt: loaded.append(ckpt) or RandomPolicy(0),
                              systems=("zero_shot",), done=done, log=lambda m: None)

    save(10, b"a"), save(20, b"b")
    rows, metrics = run()
    assert len(loaded) == 2 and len(rows) == 6 and [p["step"] for p in metrics["curve"]["zero_shot"]] == [10, 20]
    save(20, b"B"), save(30, b"c")  # step 20 retrained, step 30 new
    loaded.clear()
    again, metrics2 = run(done=rows)
    assert sorted(Path(c).name for c in loaded) == ["checkpoint-20", "checkpoint-30"]
    assert [r for r in again if r["step"] == 10] == [r for r in rows if r["step"] == 10]
    assert metrics2["curve"]["zero_shot"][0] == metrics["curve"]["zero_shot"][0] and len(again) == 9
    loaded.clear()
    run(done=[r for r in again if r["task_id"] != again[0]["task_id"] or r["step"] != 10])  # a point cut short
    assert [Path(c).name for c in loaded] == ["checkpoint-10"]
    loaded.clear()
    only, metrics3 = learning_curve(cfg, "qa_nq", lambda flat: None, lambda ckpt: loaded.append(ckpt) or RandomPolicy(0),
                                    systems=("zero_shot",), log=lambda m: None, steps=[20, 40])  # 40 not saved yet
    assert [Path(c).name for c in loaded] == ["checkpoint-20"] and [p["step"] for p in metrics3["curve"]["zero_shot"]] == [20]
    loaded.clear()
    _, metrics4 = learning_curve(cfg, "qa_nq", lambda flat: None, lambda ckpt: loaded.append(ckpt) or RandomPolicy(0),
                                 systems=("zero_shot",), log=lambda m: None, steps=[30], done=only)
    assert [Path(c).name for c in loaded] == ["checkpoint-30"]  # the kept point 20 stays in the curve, 10 unplayed
    assert [p["step"] for p in metrics4["curve"]["zero_shot"]] == [20, 30]


def test_paired_comparisons_test_reward_by_sign_and_hold_the_trained_systems_to_every_floor():
    """WebShop's reward is partial: a purchase that matches some attributes earns part of it, so two systems can tie
    on success and differ in reward. The sign test counts the tasks where A's reward is higher / lower; talent_sft is
    also compared with each floor evaluated beside it (a rule, the teacher), never a floor with a floor."""
    from talentrl_core.evaluation.metrics import paired_comparisons
    from talentrl_core.evaluation.stats import mcnemar_exact

    rs = []
    for i in range(12):  # talent_sft: reward 0.5 everywhere, never a success; the rule: 0.8 on t0-t8, 0.2 on t9-t11
        rs.append(EpisodeResult("talent_sft", "webshop", f"t{i}", "fashion", False, 0.5, 1))
        rs.append(EpisodeResult("strategy:rule_options", "webshop", f"t{i}", "fashion", i < 3, 0.8 if i < 9 else 0.2, 1))
        rs.append(EpisodeResult("random_action", "webshop", f"t{i}", "fashion", False, 0.5 if i < 6 else 0.0, 1))
    got = paired_comparisons(rs)["webshop"]
    assert set(got) == {"talent_sft vs strategy:rule_options", "talent_sft vs random_action"}
    rule = got["talent_sft vs strategy:rule_options"]
    assert (rule["a_only"], rule["b_only"]) == (0, 3)
    assert rule["reward"] == {"higher": 3, "lower": 9, "tied": 0, "p_sign": pytest.approx(mcnemar_exact(3, 9))}
    assert got["talent_sft vs random_action"]["reward"] == {"higher": 6, "lower": 0, "tied": 6,
                                                              "p_sign": pytest.approx(mcnemar_exact(6, 0))}
    from talentrl_core.evaluation.report import render_markdown

    md = render_markdown(build_metrics(rs, n_boot=20))
    assert "| talent_sft vs strategy:rule_options | webshop | 0 | 3 | 0 | 12 | 0.2500 | 3 / 9 / 0 | 0.15 |" in md


def test_repeated_actions_are_a_rate_only_where_every_episode_records_them():
    """``repeat_rate``: actions repeating one earlier in the episode over policy steps (ALFWorld's walks back), from
    the rows' ``n_repeated``; rows written before it was recorded (None) give no rate rather than a false 0."""
    from talentrl_core.evaluation.metrics import EpisodeResult, build_metrics

    rs = [EpisodeResult("talent_sft", "alfworld_valid_seen", f"t{i}", "a", False, 0.0, 3, n_steps=10, n_repeated=i % 3)
          for i in range(6)]
    rs += [EpisodeResult("bc", "alfworld_valid_seen", f"t{i}", "a", False, 0.0, 3, n_steps=10,
                         n_repeated=None if i == 0 else 2) for i in range(6)]
    m = build_metrics(rs)
    assert m["systems"]["talent_sft"]["alfworld_valid_seen"]["repeat_rate"] == 6 / 60
    assert "repeat_rate" not in m["systems"]["bc"]["alfworld_valid_seen"]
