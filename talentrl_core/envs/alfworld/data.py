"""ALFWorld's games: the archive (``json_2.1.1_all.tar.xz``), unpacked once into ``<cache_dir>/alfworld`` (atomically,
under a file lock) and checked against the published split sizes; game keys and the task listing index."""

from __future__ import annotations

import fcntl
import json
import os
import tarfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ...benchdata import data_path
from ...io import atomic_dir

FAMILY = "alfworld"

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

SPLIT_SIZES: dict[str, int] = {"train": 3553, "valid_seen": 140, "valid_unseen": 134, "valid_train": 200}
"Published number of games per split of json_2.1.1; the unpacked archive must match."

GAME_FILE = "game.tw-pddl"
INDEX_FILE = "talentrl_index.json"
"Written last into the unpacked folder: its presence means the unpack is complete."



# --------------------------------------------------------------------------------------------------


class AlfworldDataError(RuntimeError):
    """The ALFWorld archive is missing or does not hold the expected games."""


def resolve_archive(path: str) -> Path:
    """``EnvConfig.alfworld_archive`` as a path (``benchdata.data_path``: ``${data_dir}`` of a config built without
    Hydra is the data folder); any other unresolved interpolation is an ``AlfworldDataError``."""
    try:
        return data_path(path)
    except ValueError as e:
        raise AlfworldDataError(f"env.alfworld_archive={path!r} has an unresolved interpolation: compose the config "
                                "with Hydra or pass a real path") from e


def parse_game_key(key: str) -> dict[str, str]:
    """Task parameters from a game key ``<split>/<type>-<object>-<mrecep|None>-<parent|toggle>-<scene>/<trial>/game.tw-pddl``.

    >>> p = parse_game_key("valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T1/game.tw-pddl")
    >>> (p["task_type"], p["object_target"], p["parent_target"], p["toggle_target"], p["scene"])
    ('look_at_obj_in_light', 'AlarmClock', '', 'DeskLamp', '301')
    """
    parts = Path(key).parts
    if len(parts) < 3:
        raise ValueError(f"not an ALFWorld game key: {key!r}")
    folder = parts[-3]
    fields = folder.split("-")
    if len(fields) != 5 or fields[0] not in TASK_TYPES:
        raise ValueError(f"ALFWorld game folder {folder!r} is not <task_type>-<object>-<mrecep>-<parent|toggle>-<scene>")
    task_type, obj, mrecep, last, scene = fields
    light = task_type == "look_at_obj_in_light"
    return {
        "task_type": task_type,
        "object_target": obj,
        "mrecep_target": "" if mrecep == "None" else mrecep,
        "parent_target": "" if light else last,
        "toggle_target": last if light else "",
        "scene": scene,
    }


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _scan_games(root: Path) -> dict[str, list[str]]:
    """Sorted game keys (paths relative to ``root``) per split folder."""
    splits: dict[str, list[str]] = {}
    for split_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        keys = sorted(p.relative_to(root).as_posix() for p in split_dir.glob(f"*/*/{GAME_FILE}"))
        splits[split_dir.name] = keys
    return splits


def _check_counts(splits: dict[str, list[str]], archive: Path) -> None:
    found = {s: len(splits.get(s, [])) for s in SPLIT_SIZES}
    if found != SPLIT_SIZES:
        raise AlfworldDataError(
            f"{archive}: expected ALFWorld splits {SPLIT_SIZES} ({GAME_FILE} files), found {found}. "
            "Is this the json_2.1.1 archive, complete and uncorrupted?"
        )


def ensure_unpacked(archive: str | os.PathLike, cache_dir: str | os.PathLike) -> Path:
    """Unpack ``archive`` once into ``<cache_dir>/alfworld`` and return the games root (the folder that
    holds the split folders). Safe across processes: a file lock serialises the unpack, the folder is
    swapped in atomically, and a finished unpack (its index file present, same archive) is reused."""
    archive = Path(archive)
    target = Path(cache_dir) / FAMILY
    with _file_lock(Path(cache_dir) / f".{FAMILY}.lock"):
        index = _read_index(target)
        if index is not None and index.get("archive_name") == archive.name and (
            not archive.exists() or index.get("archive_size") == archive.stat().st_size
        ):
            return target / index["root"]
        if not archive.is_file():
            from ...benchdata import missing

            raise AlfworldDataError(f"ALFWorld archive: {missing(archive, archive.parent.parent)}")
        with atomic_dir(target) as tmp:
            try:
                with tarfile.open(archive) as tf:
                    tf.extractall(tmp, filter="data")
            except (tarfile.TarError, EOFError, OSError) as e:
                raise AlfworldDataError(f"{archive}: cannot unpack ({e})") from e
            tops = [p for p in tmp.iterdir() if p.is_dir()]
            root = tops[0] if len(tops) == 1 and not (tmp / "train").is_dir() else tmp
            splits = _scan_games(root)
            _check_counts(splits, archive)
            index = {
                "archive_name": archive.name,
                "archive_size": archive.stat().st_size,
                "root": root.relative_to(tmp).as_posix(),
                "splits": {s: splits[s] for s in SPLIT_SIZES},
            }
            (tmp / INDEX_FILE).write_text(json.dumps(index, indent=1, sort_keys=True))
        return target / index["root"]


def _read_index(target: Path) -> Optional[dict]:
    try:
        return json.loads((target / INDEX_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
