"""Test harness: offline by construction.

* HF/transformers/wandb offline, HOME and caches inside a temporary folder (Inform7 writes to ~/Inform).
* Any attempt to open a non-loopback connection fails the test (a socket guard).
* ``shared_data`` points at the benchmark data (TALENTRL_DATA_DIR, default ../shared/data; read only); tests that
  need it skip when it is absent, and fail under ``CI=true`` (the message names ``make data``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TALENTRL_DATA_DIR", ROOT.parent / "shared" / "data")).resolve()

_session_home = tempfile.mkdtemp(prefix="talentrl-test-home-")
for k, v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "DAGSTER_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HOME": _session_home,
    "XDG_CACHE_HOME": os.path.join(_session_home, ".cache"),
    "HF_HOME": os.path.join(_session_home, ".cache", "huggingface"),
    "WANDB_DIR": os.path.join(_session_home, "wandb"),
    "TALENTRL_DATA_DIR": str(DATA),
}.items():
    os.environ[k] = v

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname other than localhost would need DNS: refuse


class NetworkAccessError(RuntimeError):
    pass


def _guarded_connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
        raise NetworkAccessError(f"test tried to connect to non-loopback {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
        raise NetworkAccessError(f"test tried to connect to non-loopback {address!r}")
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect
socket.socket.connect_ex = _guarded_connect_ex


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The benchmark data folder. Missing: a skip naming `make data`, and a failure when CI runs (``CI=true``), so a
    CI machine without data can never pass by skipping every data test."""
    if not (DATA / "qa").is_dir():
        msg = f"benchmark data not found at {DATA}: run `make data` (or set TALENTRL_DATA_DIR to a mirror)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(msg)
        pytest.skip(msg)
    return DATA


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """A cache folder shared by the whole test session (unpacked ALFWorld games, generated TextWorld games)."""
    p = Path(os.environ.get("TALENTRL_TEST_CACHE", tmp_path_factory.mktemp("cache")))
    p.mkdir(parents=True, exist_ok=True)
    return p
