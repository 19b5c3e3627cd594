"""Reading an offline wandb run file in tests: what a run recorded, without the wandb service."""

from __future__ import annotations

import struct
from pathlib import Path


def wandb_records(run_file: Path) -> list:
    """The protobuf records of an offline ``run-*.wandb`` file (LevelDB-style log of 32 KiB blocks, 7-byte
    header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    b, pos, part, out = run_file.read_bytes(), 7, b"", []
    while pos + 7 <= len(b):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _, n, kind = struct.unpack("<IHB", b[pos:pos + 7])
        data, pos = b[pos + 7:pos + 7 + n], pos + 7 + n
        part = data if kind in (1, 2) else part + data
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(part)
            out.append(rec)
    return out
