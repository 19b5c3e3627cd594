"""A long collection in parts (talentrl_core/collect_parts.py): a killed collection resumes without playing or
keeping anything twice, and writes the file an uninterrupted run writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from talentrl_core import collect_parts, rollout
from talentrl_core.trajectories import read_table


def _cfg(tmp: Path, shared_data: Path):
    from pipeline.config import load_config

    return load_config(["experiment=webshop", f"artifacts_dir={tmp}", f"data_dir={shared_data}", "collect.n_episodes=40",
                        "collect.strategies=[rank_order]", "collect.workers=1", "tracker.mode=disabled"])


def _rows(root: Path) -> list[dict]:
    return read_table(root / "trajectories").to_pylist()


def test_killed_collection_resumes_without_duplicates(tmp_path, shared_data, monkeypatch):
    from talentrl_core.stages import collect

    monkeypatch.setattr(collect_parts.run_in_parts, "__defaults__", (8,))
    collect(_cfg(tmp_path / "whole", shared_data))
    whole = _rows(tmp_path / "whole")
    assert len(whole) == 40

    real, played = rollout.run_episodes_parallel, []

    def killed_after_two_parts(make_env, specs, *a, **kw):
        if len(played) == 2:
            raise KeyboardInterrupt  # the collection is killed while it plays the third part
        played.append([s.task.task_id for s in specs])
        return real(make_env, specs, *a, **kw)

    monkeypatch.setattr(rollout, "run_episodes_parallel", killed_after_two_parts)
    cfg = _cfg(tmp_path / "resumed", shared_data)
    with pytest.raises(KeyboardInterrupt):
        collect(cfg)
    parts = sorted((tmp_path / "resumed" / "trajectories" / ".parts").rglob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-000000-000007.parquet", "part-000008-000015.parquet"]
    assert _rows(tmp_path / "resumed") == []  # readers never see the parts

    def counting(make_env, specs, *a, **kw):
        played.append([s.task.task_id for s in specs])
        return real(make_env, specs, *a, **kw)

    monkeypatch.setattr(rollout, "run_episodes_parallel", counting)
    collect(cfg)
    tasks = [t for chunk in played for t in chunk]
    assert len(tasks) == 40 and len(set(tasks)) == 40  # every episode played once over both runs
    assert _rows(tmp_path / "resumed") == whole
    assert not (tmp_path / "resumed" / "trajectories" / ".parts").exists()


def test_a_part_of_other_tasks_is_set_aside_not_read(tmp_path, shared_data, monkeypatch):
    from talentrl_core.stages import collect, family_for

    monkeypatch.setattr(collect_parts.run_in_parts, "__defaults__", (8,))
    cfg = _cfg(tmp_path, shared_data)
    folder = collect_parts.parts_dir(tmp_path / "trajectories", "collect-webshop-train-expert-rank_order")
    real = rollout.run_episodes_parallel

    def killed_after_two_parts(make_env, specs, *a, **kw):
        if (folder / "part-000008-000015.parquet").exists():
            raise KeyboardInterrupt
        return real(make_env, specs, *a, **kw)

    monkeypatch.setattr(rollout, "run_episodes_parallel", killed_after_two_parts)
    with pytest.raises(KeyboardInterrupt):
        collect(cfg)
    first = folder / "part-000000-000007.parquet"
    (folder / "part-000008-000015.parquet").unlink()
    first.rename(folder / "part-000008-000015.parquet")  # a part that holds the wrong episodes
    monkeypatch.setattr(rollout, "run_episodes_parallel", real)
    collect(cfg)
    rows = _rows(tmp_path)
    assert len(rows) == 40 and len({r["task_id"] for r in rows}) == 40
    assert [r["task_id"] for r in rows] == [t.task_id for t in family_for(cfg).tasks("train", 40, cfg.collect.seed)]
