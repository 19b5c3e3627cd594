"""Nothing lost: earlier runs are moved aside (never silently deleted), half-written folders are repaired or
removed, an all-error collection writes nothing, a full disk says so, concurrent library commits get consecutive
versions. (SFT and RL resume: tests/test_sft.py, tests/test_rl_trainer.py.)"""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from talentrl_core.config import LibraryConfig
from talentrl_core.io import disk_full_named, remove_orphans
from talentrl_core.stages import CollectFailed, write_collected
from talentrl_core.trajectories import Step, Trajectory, read_trajectories
from talentrl_core.workdir import JOB_FILE, claim


def _job(lr=1.0, steps=2):
    return {"sft": {"lr": lr, "steps": steps}, "data": {"sha1": "ab"}}


def test_same_job_keeps_its_folder_for_resume(tmp_path):
    work = tmp_path / "sft.work"
    claim(work, _job(), 1, "sft")
    (work / "checkpoint-2").mkdir()
    assert claim(work, _job(), 1, "sft") is None
    assert (work / "checkpoint-2").exists()


def test_other_job_is_moved_aside_naming_what_differs(tmp_path):
    work, said = tmp_path / "sft.work", []
    claim(work, _job(), 2, "sft")
    (work / "checkpoint-2").mkdir()
    moved = claim(work, _job(steps=3), 2, "sft", log=said.append)
    assert moved is not None and (moved / "checkpoint-2").exists() and moved.name.startswith("sft.work.prev-")
    assert len(said) == 1 and "sft.steps: 2 → 3" in said[0] and str(moved) in said[0]
    assert json.loads((work / JOB_FILE).read_text())["sft"]["steps"] == 3 and not (work / "checkpoint-2").exists()


def test_moved_aside_copies_are_bounded_and_zero_deletes_saying_so(tmp_path):
    work, said = tmp_path / "rl.work", []
    for steps in range(1, 5):
        claim(work, _job(steps=steps), 2, "rl", log=said.append)
        (work / "checkpoint-1").mkdir()
    assert len(list(tmp_path.glob("rl.work.prev-*"))) == 2 and len(said) == 4  # 3 moves, 1 deletion
    (deleted,) = [m for m in said if "deleted its oldest moved-aside copy" in m]
    assert "rl.work.prev-" in deleted and "keep_previous_runs=2" in deleted
    claim(work, _job(steps=9), 0, "rl", log=said.append)
    assert "deleted (keep_previous_runs=0)" in said[-1] and len(list(tmp_path.glob("rl.work.prev-*"))) == 2


def test_unrecorded_folder_is_moved_not_deleted(tmp_path):
    work, said = tmp_path / "sft.work", []
    (work / "checkpoint-5").mkdir(parents=True)  # left by an older version (no job file)
    moved = claim(work, _job(), 1, "sft", log=said.append)
    assert (moved / "checkpoint-5").exists() and "settings not recorded" in said[0]


def test_empty_folder_of_another_job_is_just_reused(tmp_path):
    work = tmp_path / "sft.work"
    claim(work, _job(), 1, "sft", holds_work=lambda w: any(w.glob("checkpoint-*")))
    assert claim(work, _job(lr=2.0), 1, "sft", holds_work=lambda w: any(w.glob("checkpoint-*"))) is None
    assert not list(tmp_path.glob("*.prev-*"))


def test_kill_between_the_two_renames_of_an_atomic_dir_is_repaired(tmp_path):
    out = tmp_path / "rl"
    old = tmp_path / ".rl.old"
    old.mkdir()
    (old / "model.safetensors").write_text("the only copy")
    (tmp_path / ".rl.x1y2.tmp").mkdir()  # the staging copy of the write that was killed
    remove_orphans(out)
    assert (out / "model.safetensors").read_text() == "the only copy"
    assert not old.exists() and not (tmp_path / ".rl.x1y2.tmp").exists()


def test_full_disk_is_named_as_a_full_disk(tmp_path):
    with pytest.raises(OSError, match=r"disk full while writing the checkpoint .*checkpoint-3 \(\d+ MiB free"):
        with disk_full_named(tmp_path / "sft.work" / "checkpoint-3", "writing the checkpoint"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file")
    with pytest.raises(ValueError, match="unrelated"):  # other errors pass through untouched
        with disk_full_named(tmp_path):
            raise ValueError("unrelated")


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs: a real ENOSPC (needs mount rights; skipped without them, the constructed-error test stays)."""
    import subprocess

    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_during_a_safetensors_write_is_named(full_disk):
    """Issue 41.3: safetensors raises its own SafetensorError (not OSError) on a full disk."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=64, vocab_size=512))
    target = full_disk / "sft"
    with pytest.raises(OSError, match=rf"disk full while writing the model {target} \(0 MiB free on its filesystem\)"):
        with disk_full_named(target, "writing the model"), torch.no_grad():
            model.save_pretrained(target)


def test_safetensors_disk_full_error_is_recognised():
    from safetensors import SafetensorError

    from talentrl_core.io import is_disk_full

    assert is_disk_full(SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert not is_disk_full(SafetensorError("Error while deserializing header: MetadataIncompleteBuffer"))


def test_collect_removes_staging_files_of_killed_writes(tmp_path, capsys):
    """Issue 41.6: the `.tmp` staging copies a killed collect leaves are removed at the next start; a shared game
    cache keeps young ones (another run may be writing them)."""
    import time

    from talentrl_core.stages import CACHE_STAGING_GRACE_S, tidy_staging

    traj = tmp_path / "trajectories" / "env=textworld"
    traj.mkdir(parents=True)
    (traj / ".collect-x.parquet.ab12.tmp").write_text("half")
    (traj / "collect-x.parquet").write_text("whole")
    games = tmp_path / "cache" / "textworld" / "tw-coin_collector" / "level=5"
    (games / ".7.zz.tmp").mkdir(parents=True)
    (games / ".8.yy.tmp").mkdir()
    old = time.time() - CACHE_STAGING_GRACE_S - 5
    os.utime(games / ".7.zz.tmp", (old, old))
    tidy_staging(tmp_path / "trajectories", tmp_path / "cache")
    assert sorted(p.name for p in traj.iterdir()) == ["collect-x.parquet"]
    assert sorted(p.name for p in games.iterdir()) == [".8.yy.tmp"]
    err = capsys.readouterr().err
    assert "removed 1 staging file(s) of interrupted writes under" in err and err.count("collect: removed") == 2


def test_unsealed_checkpoints_are_checked_by_structure(tmp_path):
    """Checkpoints written before sealing: a truncated safetensors file, a torch zip that fails its CRC and
    unparsable JSON are each named; an intact folder passes; a sealed one catches a changed byte."""
    import torch
    from safetensors.torch import save_file

    from talentrl_core.checkpoints import fault, seal

    ck = tmp_path / "checkpoint-2"
    ck.mkdir()
    save_file({"w": torch.ones(64)}, ck / "model.safetensors")
    torch.save({"state": torch.arange(4096.0)}, ck / "optimizer.pt")
    (ck / "trainer_state.json").write_text("{}")
    assert fault(ck) is None
    data = (ck / "optimizer.pt").read_bytes()
    (ck / "optimizer.pt").write_bytes(data[:2000] + bytes([data[2000] ^ 1]) + data[2001:])
    assert fault(ck).startswith(f"{ck / 'optimizer.pt'}: ")
    (ck / "optimizer.pt").write_bytes(data)
    (ck / "model.safetensors").write_bytes((ck / "model.safetensors").read_bytes()[:100])
    assert "model.safetensors: SafetensorError" in fault(ck)
    save_file({"w": torch.ones(64)}, ck / "model.safetensors")
    seal(ck)
    (ck / "trainer_state.json").write_text("{ }")
    assert fault(ck) == f"{ck / 'trainer_state.json'}: 3 bytes, 2 when written (truncated or overwritten)"


def _traj(i: int, error: str | None = None) -> Trajectory:
    t = Trajectory(run_id="r", env="textworld", split="train", task_id=f"t{i}", task_type="tw", task_json="{}",
                   policy="expert", error=error)
    t.steps.append(Step(prompt="", completion="", action="go east", observation="", reward=1.0, valid=True))
    return t


def test_collection_whose_episodes_all_failed_writes_nothing(tmp_path):
    root = tmp_path / "trajectories"
    write_collected([_traj(0), _traj(1)], root, "collect-textworld-train-expert")
    before = {p: p.read_bytes() for p in root.rglob("*.parquet")}
    with pytest.raises(CollectFailed, match=r"all 2 episodes failed \(first error: step: TimeoutError"):
        write_collected([_traj(0, "step: TimeoutError"), _traj(1, "step: TimeoutError")], root,
                        "collect-textworld-train-expert")
    assert {p: p.read_bytes() for p in root.rglob("*.parquet")} == before
    assert len(read_trajectories(root, env="textworld")) == 2
    write_collected([_traj(0, "reset: boom"), _traj(1)], root, "collect-textworld-train-expert")  # some failed: kept


def _commit(uri: str, n: int, out) -> None:
    from talentrl_core.library import Library, SkillRecord, TalentRecord
    from talentrl_core.library.embed import HashingEmbedder

    cfg = LibraryConfig(uri=uri, embedder="hashing")
    lib = Library.open(uri, cfg=cfg, embedder=HashingEmbedder())
    versions = []
    for k in range(n):
        sid = f"s-{os.getpid()}-{k}"
        s = SkillRecord(sid, "alfworld", "general", ["heat"], f"Title {sid}", "heat it", "when heating")
        t = TalentRecord(f"t-{os.getpid()}", "alfworld", "Name", "Locate.", "tasks", [sid], [1.0])
        versions.append(lib.commit("alfworld", [s], [t], []))
    out.put(versions)


def test_two_concurrent_committers_get_consecutive_versions(tmp_path):
    uri = str(tmp_path / "lib" / "db")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_commit, args=(uri, 3, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(v for vs in got for v in vs) == [1, 2, 3, 4, 5, 6]
    from talentrl_core.library import Library
    from talentrl_core.library.embed import HashingEmbedder

    lib = Library.open(uri, cfg=LibraryConfig(uri=uri, embedder="hashing"), embedder=HashingEmbedder())
    assert [r["library_version"] for r in lib.versions()] == [1, 2, 3, 4, 5, 6]


def test_missing_and_corrupt_models_are_named(tmp_path, shared_data):
    from talentrl_core.config import ModelConfig
    from talentrl_core.models import build_tiny, load_model

    with pytest.raises(FileNotFoundError, match=r"artifacts/models/sft: does not exist \(`python -m pipeline.run sft"):
        load_model(tmp_path / "artifacts" / "models" / "sft")
    small = ModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                        intermediate_size=64, vocab_size=600, max_position_embeddings=256)
    path = build_tiny(small, tmp_path / "sft", shared_data)
    (path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=r"sft/model.safetensors: the model in .* cannot be loaded"):
        load_model(path)
    with pytest.raises(FileNotFoundError, match=r"data_dir=.*nowhere holds no benchmark data"):
        build_tiny(small, tmp_path / "other", tmp_path / "nowhere")


def _library_with_one_version(uri: str):
    from talentrl_core.library import Library, SkillRecord, TalentRecord
    from talentrl_core.library.embed import HashingEmbedder

    cfg = LibraryConfig(uri=uri, embedder="hashing")
    s = SkillRecord("s1", "alfworld", "general", ["heat"], "Title", "heat it", "when heating")
    Library.for_writing(uri, cfg=cfg, embedder=HashingEmbedder()).commit(
        "alfworld", [s], [TalentRecord("t1", "alfworld", "Name", "Locate.", "tasks", ["s1"], [1.0])], [])
    return cfg


@pytest.mark.parametrize("damage", ["garbage_data", "no_versions", "manifest_data", "table_is_a_file"])
def test_damaged_library_folders_name_the_table(tmp_path, damage):
    import shutil

    from talentrl_core.library import Library
    from talentrl_core.library.embed import HashingEmbedder
    from talentrl_core.library.store import LibraryReadError

    uri = str(tmp_path / "db")
    cfg = _library_with_one_version(uri)
    table = "versions" if damage == "manifest_data" else "skills"
    folder = tmp_path / "db" / f"{table}.lance"
    if damage in ("garbage_data", "manifest_data"):
        for f in (folder / "data").glob("*.lance"):
            f.write_bytes(b"not a lance file" * 10)
    elif damage == "no_versions":
        shutil.rmtree(folder / "_versions")
    else:
        shutil.rmtree(folder)
        folder.write_text("oops")
    with pytest.raises(LibraryReadError, match=rf"{table}\.lance: library table '{table}' of .* cannot be read"):
        Library.open(uri, cfg=cfg, embedder=HashingEmbedder())


def test_first_commit_killed_while_creating_a_table_is_recovered(tmp_path):
    """A kill during the first commit leaves `skills.lance` with data files, no committed version, and the commit's
    marker: the next commit clears what was never visible instead of failing with "Table 'skills' was not found"."""
    import shutil

    from talentrl_core.library import Library
    from talentrl_core.library.embed import HashingEmbedder
    from talentrl_core.library.integrity import FIRST_COMMIT

    _library_with_one_version(str(tmp_path / "done"))
    half = tmp_path / "db" / "skills.lance"
    shutil.copytree(tmp_path / "done" / "skills.lance" / "data", half / "data")
    (half / "_transactions").mkdir()
    (tmp_path / "db" / FIRST_COMMIT).write_text("123\n")
    cfg = LibraryConfig(uri=str(tmp_path / "db"), embedder="hashing")
    assert Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder()).version == 0
    assert _library_with_one_version(cfg.uri) and Library.open(cfg.uri, cfg=cfg, embedder=HashingEmbedder()).version == 1
    assert not (tmp_path / "db" / FIRST_COMMIT).exists() and not list(tmp_path.glob("db.damaged-*"))


def _tree(root):
    """Every file's bytes but the commit lock's (which stays with the folder's path)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".commit.lock")}


@pytest.mark.parametrize("damage", ["history_removed", "history_folder_removed", "table_unreadable"])
def test_damaged_library_is_refused_then_moved_aside_never_reset(tmp_path, damage, caplog):
    """Issue 41.1: a library whose version history is gone is named by every reader, and the next distill moves it
    aside byte for byte before it starts a new history (it used to recreate it at version 1, losing the rest)."""
    import shutil

    from talentrl_core.library import Library, LibraryReadError
    from talentrl_core.library.embed import HashingEmbedder

    uri = tmp_path / "db"
    cfg = _library_with_one_version(str(uri))
    _library_with_one_version(str(uri))  # a second version: what a reset would lose
    if damage == "history_removed":
        shutil.rmtree(uri / "versions.lance" / "_versions")
    elif damage == "history_folder_removed":
        shutil.rmtree(uri / "versions.lance")
    else:
        for f in (uri / "talents.lance" / "data").glob("*.lance"):
            f.write_bytes(f.read_bytes()[:40])
    before = _tree(uri)
    msg = "version history is gone" if damage != "table_unreadable" else "library table 'talents' of .* cannot be read"
    with pytest.raises(LibraryReadError, match=msg) as err:
        Library.open(str(uri), cfg=cfg, embedder=HashingEmbedder())
    assert "re-run the distill stage, which moves it aside" in str(err.value)
    assert _tree(uri) == before  # a reader changed nothing
    with caplog.at_level("WARNING"):
        _library_with_one_version(str(uri))
    (moved,) = tmp_path.glob("db.damaged-*")
    assert _tree(moved) == before and f"moved its contents to {moved}" in caplog.text
    assert [r["library_version"] for r in Library.open(str(uri), cfg=cfg, embedder=HashingEmbedder()).versions()] == [1]


def _hold_lock(uri, ready, release):
    from talentrl_core.library.integrity import commit_lock

    with commit_lock(uri):
        ready.set()
        release.wait(60)


def test_held_library_lock_names_its_holder_and_what_to_do(tmp_path, caplog):
    from talentrl_core.library.integrity import LibraryLockedError, commit_lock

    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        with caplog.at_level("WARNING"), pytest.raises(LibraryLockedError,
                                                       match=rf"still held after 0 s by pid {holder.pid} on .*let that run finish"):
            with commit_lock(str(tmp_path), timeout_s=0.2):
                pass
        assert f"waiting up to 0 s for its commit lock {tmp_path}/.commit.lock, held by pid {holder.pid}" in caplog.text
    finally:
        release.set()
        holder.join(60)
    with commit_lock(str(tmp_path), timeout_s=5):  # released with its process
        pass


def test_sft_and_rl_without_a_library_name_the_stage_that_builds_it(tmp_path):
    from types import SimpleNamespace

    from pipeline.config import load_config
    from talentrl_core.stages import require_library

    cfg = load_config([f"artifacts_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match=r"no skill library at .*lancedb \(version 0\): run the distill stage"):
        require_library(SimpleNamespace(version=0), cfg)
    assert require_library(SimpleNamespace(version=3), cfg).version == 3
