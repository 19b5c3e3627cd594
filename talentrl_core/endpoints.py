"""HTTP endpoints the pipeline talks to (the OpenAI-compatible policy backend, the teacher, a retrieval server)."""

from __future__ import annotations

import warnings
from urllib.parse import urlparse

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def warn_plain_http_key(url: str, has_key: bool, what: str) -> bool:
    """Warn (once per call site) before an API key is sent in clear text: ``http://`` to a host other than this
    machine. Returns True when it warned.

    >>> warn_plain_http_key("https://api.example.com/v1", True, "teacher")
    False
    >>> warn_plain_http_key("http://127.0.0.1:8000/v1", True, "teacher")
    False
    """
    parsed = urlparse(url)
    if not has_key or parsed.scheme != "http" or (parsed.hostname or "") in _LOOPBACK:
        return False
    warnings.warn(f"{what}: the API key will be sent unencrypted to {url} (plain http to another host); "
                  f"use https:// or a loopback address", stacklevel=3)
    return True
