"""The shared shape of the diagnostic CLIs (``pipeline.talent_matrix``, ``pipeline.curve``, ``pipeline.decisions``):
their own arguments, ``--out`` and Hydra overrides; a bad override refused with one named line; the rows written as
JSON lines and the metrics as ``metrics.json`` into ``--out``, the metrics printed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, Sequence


def run_diagnostic(prog: str, doc: str, add_args: Callable[[argparse.ArgumentParser], None], body: Callable,
                   argv: Sequence[str] | None, rows_name: str = "episodes.jsonl", after: Callable | None = None) -> int:
    """Parse, compose the config, ``rows, metrics = body(cfg, args)``, write both, then ``after(cfg, args, rows)``
    (what may go once the files are written); the exit status."""
    from pipeline.config import ConfigError, load_config, refuse
    from talentrl_core.io import write_json, write_text

    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    add_args(p)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("overrides", nargs="*")
    args = p.parse_intermixed_args(argv)  # overrides before, between or after the options
    try:
        cfg = load_config(args.overrides)
    except ConfigError as e:
        return refuse(e)
    rows, metrics = body(cfg, args)
    write_text(args.out / rows_name, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    write_json(args.out / "metrics.json", metrics)
    if after is not None:
        after(cfg, args, rows)
    print(json.dumps(metrics, indent=2))
    return 0
