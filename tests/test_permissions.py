"""Stage outputs get the mode a plain ``open()``/``mkdir`` gives (``0666``/``0777`` less the umask), not the private
``0600``/``0700`` of ``mkstemp``/``mkdtemp`` their staging copies start with (issue 42: a colleague or a serving
process could not read a report or a model)."""

import os
import stat
import tempfile
from pathlib import Path

import pytest

from talentrl_core import io
from talentrl_core.io import atomic_dir, atomic_path, process_umask, write_json, write_text


@pytest.fixture
def umask():
    """Set the process umask for one test; restored after it."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                       (0o002, 0o664, 0o775)])
def test_atomic_outputs_get_the_mode_open_and_mkdir_give(tmp_path, umask, mask, file_mode, dir_mode):
    umask(mask)
    fd, probe = tempfile.mkstemp(dir=tmp_path)  # what the staging copy starts with: private whatever the umask
    os.close(fd)
    assert mode(Path(probe)) == 0o600

    write_text(tmp_path / "report.md", "# report\n")
    write_json(tmp_path / "metrics.json", {"a": 1})
    with atomic_dir(tmp_path / "model") as d:
        (d / "config.json").write_text("{}")
        write_text(d / "talentrl_meta.json", "{}")  # an atomic write inside an atomic folder
        (d / "sub").mkdir()
    assert mode(tmp_path / "report.md") == mode(tmp_path / "metrics.json") == file_mode
    assert mode(tmp_path / "model") == dir_mode
    assert mode(tmp_path / "model" / "talentrl_meta.json") == mode(tmp_path / "model" / "config.json") == file_mode
    assert mode(tmp_path / "model" / "sub") == dir_mode
    plain = tmp_path / "plain"
    plain.write_text("x")
    plain_dir = tmp_path / "plain_dir"
    plain_dir.mkdir()
    assert mode(plain) == file_mode and mode(plain_dir) == dir_mode  # the same as a plain open()/mkdir


def test_private_files_a_library_writes_into_an_atomic_folder_are_opened_up(tmp_path, umask):
    """safetensors 0.8 writes ``model.safetensors`` 0600 whatever the umask; the model folder swapped in is readable."""
    umask(0o022)
    with atomic_dir(tmp_path / "model") as d:
        (d / "model.safetensors").write_bytes(b"w")
        (d / "model.safetensors").chmod(0o600)
        (d / "nested").mkdir(mode=0o700)
        (d / "nested" / "x").write_text("x")
        (d / "nested" / "x").chmod(0o600)
        (d / "run.sh").write_text("#!/bin/sh\n")
        (d / "run.sh").chmod(0o700)
    assert mode(tmp_path / "model" / "model.safetensors") == mode(tmp_path / "model" / "nested" / "x") == 0o644
    assert mode(tmp_path / "model" / "nested") == mode(tmp_path / "model") == 0o755
    assert mode(tmp_path / "model" / "run.sh") == 0o755


def test_a_saved_model_folder_is_group_readable(tmp_path, umask):
    """The real writer: ``save_pretrained`` (safetensors) into ``atomic_dir``, as the SFT/RL final models are written."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    umask(0o022)
    with atomic_dir(tmp_path / "sft") as d:
        save_file({"w": torch.zeros(2)}, str(d / "model.safetensors"))
    assert mode(tmp_path / "sft" / "model.safetensors") == 0o644 and mode(tmp_path / "sft") == 0o755


def test_rewriting_replaces_with_the_same_mode(tmp_path, umask):
    umask(0o022)
    write_text(tmp_path / "r.md", "1")
    with atomic_dir(tmp_path / "m") as d:
        (d / "a").write_text("1")
    write_text(tmp_path / "r.md", "2")
    with atomic_dir(tmp_path / "m") as d:
        (d / "a").write_text("2")
    assert (tmp_path / "r.md").read_text() == "2" and mode(tmp_path / "r.md") == 0o644
    assert (tmp_path / "m" / "a").read_text() == "2" and mode(tmp_path / "m") == 0o755
    assert not list(tmp_path.glob(".*"))  # no staging copy left


def test_an_executable_written_through_atomic_path_stays_executable(tmp_path, umask):
    umask(0o022)
    with atomic_path(tmp_path / "run.sh") as tmp:
        tmp.write_text("#!/bin/sh\n")
        tmp.chmod(0o700)
    assert mode(tmp_path / "run.sh") == 0o755


def test_umask_is_read_without_changing_it(umask, monkeypatch):
    umask(0o027)
    assert process_umask() == 0o027
    real_open = open

    def no_proc(path, *a, **k):  # not Linux: no /proc/self/status
        if str(path) == "/proc/self/status":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", no_proc)
    assert process_umask() == 0o027
    monkeypatch.undo()
    assert process_umask() == 0o027  # the fallback put it back
    assert io._UMASK_LOCK.acquire(blocking=False)  # and released its lock
    io._UMASK_LOCK.release()
