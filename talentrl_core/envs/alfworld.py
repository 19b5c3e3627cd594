"""ALFWorld (text) environment family on the real game files (DESIGN.md §2).

The games come from the ALFWorld archive (``json_2.1.1_all.tar.xz``: one ``game.tw-pddl`` per game,
no ``traj_data.json``). It is unpacked once into ``<cache_dir>/alfworld`` (atomically, under a file
lock, so concurrent processes reuse one copy) and the split sizes are checked against the published
3553 / 140 / 134 / 200.

Games are played through TextWorld's PDDL backend (``textworld.start``) with alfworld's wrappers
(``AlfredDemangler``, ``AlfredInfos``, ``AlfredExpert``), built fresh for every loaded game: one
wrapper instance shared between envs silently plays the wrong game (ECOSYSTEM.md). alfworld's own
``AlfredTWEnv`` is not used: without ``traj_data.json`` it finds no game and then spins forever.

Experts (``EnvConfig.expert``):

* ``handcoded`` — alfworld's handcoded expert, which acts on what it has observed (searches
  receptacles). Its task parameters come from the game folder name instead of ``traj_data.json``,
  and its policies are subclassed here with fixes (``_HandcodedFixMixin``, ``_SameReceptacleMixin``):
  tracking of the 0.4.x grammar ``move X to Y`` (alfworld 0.4.2 only tracks ``put``, so its
  inventory never empties and it loops on two-object tasks), the second object of a two-object task
  goes to the same receptacle as the first, receptacles sharing one location are ``examine``d
  instead of an inadmissible ``go to``, no closing of searched receptacles, open surfaces searched
  before drawers and cabinets, and no opening ``look``. Its random choices use a private generator
  seeded from the task key, so it is deterministic. It wins every valid_seen and valid_unseen game
  within 50 steps.
* ``walkthrough`` — the game's stored walkthrough; once the agent has changed the game state off the
  walkthrough, the PDDL planner replans from the current state.
* ``planner`` — the PDDL planner's plan (the one ``AlfredExpert(expert_type="planner")`` gives), made
  on first request and remade only when the agent leaves it (the wrapper replans at every step,
  ~0.1-1 s each).

Check the experts on a split (multiprocessing, at most 2 workers on this machine)::

    python -m talentrl_core.envs.alfworld --check valid_seen --workers 2 --expert handcoded
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import sys
import tarfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from ..config import EnvConfig, EnvName
from ..io import atomic_dir
from .base import Task, StepResult
from .strategies import EpisodeView, get_strategy

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

EXPERTS = ("handcoded", "walkthrough", "planner")
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_GOAL_PREFIX = "Your task is to: "


# --------------------------------------------------------------------------------------------------
# Archive and task listing
# --------------------------------------------------------------------------------------------------


class AlfworldDataError(RuntimeError):
    """The ALFWorld archive is missing or does not hold the expected games."""


def resolve_archive(path: str) -> Path:
    """``EnvConfig.alfworld_archive`` as a path. An unresolved ``${data_dir}`` (config built without
    Hydra) is filled from ``$TALENTRL_DATA_DIR`` when that is set, otherwise it is an error."""
    if "${data_dir}" in path and os.environ.get("TALENTRL_DATA_DIR"):
        path = path.replace("${data_dir}", os.environ["TALENTRL_DATA_DIR"])
    if "${" in path:
        raise AlfworldDataError(
            f"env.alfworld_archive={path!r} has an unresolved interpolation: compose the config with Hydra, "
            "pass a real path, or set TALENTRL_DATA_DIR"
        )
    return Path(path).expanduser()


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
            from ..benchdata import missing

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


# --------------------------------------------------------------------------------------------------
# The handcoded expert, fixed for the 0.4.x games
# --------------------------------------------------------------------------------------------------


class _HandcodedFixMixin:
    """Fixes to alfworld's handcoded policies (applied to every task type).

    * ``move X to Y``: alfworld 0.4.2 tests ``"put" in last_action``, but the games' grammar says
      ``move X to Y``; after a placement the expert still believed it held the object, so it never
      looked for the second object of a two-object task. ``move`` (and ``put``) now empty the
      inventory.
    * Verbs are matched as the first word, not as substrings of object names.
    * No closing: the original closes every receptacle it opened while searching (a wasted step per
      receptacle that matters in kitchens with 20+ cabinets and drawers; the goal never needs it).
    * Co-located receptacles (e.g. a desk with drawers in it): ``go to`` a receptacle at the current
      location is not admissible; the expert ``examine``s it instead (see ``_Expert``), and a
      successful ``examine R`` of a receptacle counts as arriving at ``R``.
    * Objects that are also receptacle classes (mug, bowl, plate, pot...) are searched where such
      objects are usually found (alfworld searched every receptacle in listing order for them).
    * Search order: among the receptacles where the object class is usually found, open ones
      (countertops, tables, shelves: one step each) are visited before closed ones (drawers,
      cabinets: two steps each). The original visits all 27 drawers of a kitchen before its two
      countertops.
    """

    def get_list_of_receptacles_to_search_for_object_cls(self, obj_cls):
        receps = super().get_list_of_receptacles_to_search_for_object_cls(obj_cls)
        # the search visits the list from its end: put the openable receptacles first
        return sorted(receps, key=lambda r: not self.is_receptacle_openable(r))

    def get_list_of_receptacles_of_type(self, recep_cls):
        receps = super().get_list_of_receptacles_of_type(recep_cls)
        if not receps and self.OBJECT_TO_VAL_RECEPTACLE.get(recep_cls):
            # A movable object that is also a receptacle class (mug, bowl, plate, pot, pan, box...):
            # alfworld searches it as a receptacle type, finds none in the room and falls back to every
            # receptacle in listing order, ignoring where such objects are usually found.
            prior = self.get_list_of_receptacles_to_search_for_object_cls(recep_cls)
            receps = [r for r in self.receptacles if r not in prior] + prior
        return receps

    def update_state_tracking(self, game_state, last_action):
        obs = game_state["feedback"]
        succeeded = "Nothing happens" not in obs
        words = last_action.split()
        verb = words[0] if words else ""

        arrived = None
        if last_action.startswith("go to "):
            arrived = last_action[len("go to "):].strip()
        elif verb == "examine" and succeeded and " ".join(words[1:]) in self.receptacles:
            arrived = " ".join(words[1:])
        if arrived is not None:
            self.curr_recep = arrived
            if arrived in self.receptacles_to_check:
                self.receptacles_to_check.remove(arrived)
            self.checked_inside_curr_recep = (not self.is_receptacle_openable(arrived)) or "open" in obs

        if not succeeded:
            return
        if verb == "open":
            if last_action == f"open {self.curr_recep}":
                self.checked_inside_curr_recep = True
        elif verb == "take":
            inv_obj = " ".join(words[1:3])
            self.got_inventory_from_recep = " ".join(words[-2:])
            self.inventory.append(inv_obj)
            self.blacklist_obj(inv_obj)
        elif verb in ("move", "put") and self.inventory:
            inv_obj = self.inventory.pop()
            self.got_inventory_from_recep = ""
            self.blacklist_obj(inv_obj)
            if self.task_params["object_target"] in last_action:
                self.object_blacklist.append(inv_obj)


class _SameReceptacleMixin:
    """Two-object tasks: both objects must end in the *same* receptacle (the PDDL goal), but alfworld's
    policy takes the second one to any receptacle of the right type. Once a target object is inside a
    receptacle of the target type (the expert already reads that from the game facts), that receptacle
    instance is the only one it goes to and places in."""

    target_recep = ""

    def get_predicates(self, game_state, obj, parent):
        preds = list(super().get_predicates(game_state, obj, parent))
        if not self.target_recep:
            facts = self.get_facts(game_state)
            pred = f"inreceptacle {obj} {parent}"
            inside = [f for f in facts if self.remove_num_ids(f) == pred]
            if inside:
                self.target_recep = " ".join(inside[0].split()[-2:])
        if self.target_recep:
            preds[0] = self.curr_recep == self.target_recep  # at_right_recep
        return tuple(preds)

    def get_list_of_receptacles_of_type(self, recep_cls):
        if self.target_recep and recep_cls == self.task_params["parent_target"]:
            return [self.target_recep]
        return super().get_list_of_receptacles_of_type(recep_cls)

    def is_already_at_receptacle(self, sub_param):
        if self.target_recep and sub_param == self.task_params["parent_target"]:
            return self.curr_recep == self.target_recep
        return super().is_already_at_receptacle(sub_param)


_FIXED_POLICIES: dict[str, type] = {}


def _fixed_policy_class(task_type: str) -> type:
    """alfworld's TextWorld policy for ``task_type`` with our fixes in front of it."""
    if task_type not in _FIXED_POLICIES:
        from alfworld.agents.expert import handcoded_expert_tw as tw

        name = task_type.replace("_", " ").title().replace(" ", "") + "TWPolicy"
        base = getattr(tw, name, None)
        if base is None:
            raise ValueError(f"alfworld has no handcoded policy for task type {task_type!r}")
        mixins = (_HandcodedFixMixin,) + ((_SameReceptacleMixin,) if task_type == "pick_two_obj_and_place" else ())
        _FIXED_POLICIES[task_type] = type("Fixed" + name, mixins + (base,), {})
    return _FIXED_POLICIES[task_type]


def _make_handcoded_agent(task_params: dict[str, Any], max_steps: int):
    """A ``HandCodedTWAgent`` whose ``reset`` takes its parameters from us, not from traj_data.json."""
    import alfworld.gen.constants as constants
    from alfworld.agents.expert import HandCodedTWAgent

    params = {k: (v.lower() if v in constants.OBJECTS else v) for k, v in task_params.items()}

    class _Agent(HandCodedTWAgent):
        def reset(self, game: Any = None) -> None:  # the game path is not needed
            self.task_params = dict(params)
            self.policy = _fixed_policy_class(params["task_type"])(self.task_params, max_steps=self.max_steps)

    return _Agent(max_steps=max_steps)


def _expert_wrapper(task_params: dict[str, Any], expert_type: str, seed: int):
    """A fresh ``AlfredExpert`` for one game (used with ``expert_type="handcoded"``).

    Handcoded: the agent is ours (parameters from the folder name, fixed tracking); its first action
    is computed from the intro (alfworld's wrapper always opens with a wasted ``look``); an
    unreachable ``go to R`` (R at the current location) becomes ``examine R``; its random choices run
    on a private generator reseeded at every ``reset`` (deterministic, the caller's global ``random``
    state untouched); an expert that gives up (alfworld raises on timeout or when it runs out of
    subgoals) leaves an empty plan and the error in ``expert_error`` instead of breaking the step.
    """
    from alfworld.agents.environment.alfred_tw_env import AlfredExpert

    class _Expert(AlfredExpert):
        def load(self, gamefile):
            super().load(gamefile)
            self._handcoded_expert = _make_handcoded_agent(task_params, max_steps=10**6)
            self.expert_error: Optional[str] = None
            self.raw_action: Optional[str] = None

        def reset(self):
            self._rng_state = random.Random(seed).getstate()
            self._at_start = True
            self.expert_error = None
            return super().reset()

        def step(self, command):
            self._at_start = False
            return super().step(command)

        def _gather_infos(self):
            if self.expert_type != "handcoded":
                return super()._gather_infos()
            outer = random.getstate()
            random.setstate(self._rng_state)
            try:
                self._gather_handcoded()
            except Exception as e:  # alfworld signals a stuck expert by raising
                self.expert_error = f"{type(e).__name__}: {e}"
                self.state["extra.expert_plan"] = []
            finally:
                self._rng_state = random.getstate()
                random.setstate(outer)

        def _gather_handcoded(self):
            agent, state = self._handcoded_expert, self.state
            admissible = state["admissible_commands"]
            last = self.prev_command
            if self._at_start:
                agent.observe(state["feedback"])
                last = "look"
            action = agent.act(state, 0, state["won"], last)
            if action.startswith("go to ") and action not in admissible:
                examine = "examine " + action[len("go to "):]
                if examine in admissible:
                    action = examine
            self.raw_action = action
            state["extra.expert_plan"] = [action if action in admissible else "look"]

    return _Expert(expert_type=expert_type)


# --------------------------------------------------------------------------------------------------
# Env and family
# --------------------------------------------------------------------------------------------------


def _normalise(action: str) -> str:
    return " ".join(str(action).split()).lower()


def _key_seed(key: str) -> int:
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)


class AlfworldEnv:
    """One ALFWorld game at a time, behind the :class:`~talentrl_core.envs.base.Env` protocol.

    ``reset`` of the game already loaded skips the load (only the PDDL state is rebuilt). The episode
    ends when the game is won (reward 1.0) or after ``max_steps`` steps (``info['truncated']``).
    Actions are compared case- and space-insensitively; an inadmissible one still goes to the game
    (which answers "Nothing happens.") and ``info['valid']`` is False.

    Experts: ``handcoded`` runs inside the game wrappers (it must observe every step); ``walkthrough``
    and ``planner`` follow a plan (the stored walkthrough, or the PDDL planner's plan made on first
    request) and replan only when the agent changes the game state off the plan. ``strategy_action``
    plays a registered strategy expert instead (``alfworld_strategies``: searches by receptacle class).
    """

    name = FAMILY

    def __init__(self, root: Path, expert: str = "handcoded", max_steps: int = 30) -> None:
        if expert not in EXPERTS:
            raise ValueError(f"alfworld expert {expert!r}: choose one of {EXPERTS}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.root = Path(root)
        self.expert = expert
        self.max_steps = max_steps
        self._game = None
        self._loaded_key: Optional[str] = None
        self._expert_wrapper = None
        self._task: Optional[Task] = None
        self._state = None
        self._goal = ""
        self._first_obs = self._obs = ""
        self._transcript: list[tuple[str, str]] = []
        self._steps = 0
        self._done = False
        self._won = False
        self._walkthrough: list[str] = []
        self._plan: Optional[list[str]] = None
        self._plan_index = 0

    # -- loading --------------------------------------------------------------------------------

    def _load(self, task: Task) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        path = self.root / task.key
        if not path.is_file():
            raise FileNotFoundError(f"ALFWorld game {task.key!r} not found under {self.root}")
        self.close()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "walkthrough"])
        wrappers = [AlfredDemangler(shuffle=False), AlfredInfos()]  # fresh instances for this game
        self._expert_wrapper = None
        if self.expert == "handcoded":
            self._expert_wrapper = _expert_wrapper(parse_game_key(task.key), "handcoded", _key_seed(task.key))
            wrappers.append(self._expert_wrapper)
            infos.extras.append("expert_plan")
        self._game = textworld.start(str(path), request_infos=infos, wrappers=wrappers)
        self._loaded_key = task.key

    # -- protocol -------------------------------------------------------------------------------

    def reset(self, task: Task) -> str:
        if task.env != FAMILY:
            raise ValueError(f"AlfworldEnv cannot play a {task.env!r} task")
        if self._game is None or self._loaded_key != task.key:
            self._load(task)
        self._state = self._game.reset()
        self._task = task
        self._steps = 0
        self._done = False
        self._won = bool(self._state["won"])
        self._walkthrough = list(self._state.get("extra.walkthrough") or [])
        self._plan = list(self._walkthrough) if self.expert == "walkthrough" and self._walkthrough else None
        self._plan_index = 0
        text = self._state.feedback
        self._goal = text.split(_GOAL_PREFIX, 1)[1].strip() if _GOAL_PREFIX in text else ""
        self._first_obs = self._obs = text.replace(_BANNER, "").strip()
        self._transcript = []
        return self._obs

    def goal(self) -> str:
        self._require_reset()
        return self._goal

    def step(self, action: str) -> StepResult:
        self._require_reset()
        command = _normalise(action)
        if self._done:
            return StepResult("The episode is over.", 0.0, True, self._won, {"valid": False, "steps": self._steps})
        valid = command in self._state["admissible_commands"]
        on_plan = (
            valid and self._plan is not None and self._plan_index < len(self._plan)
            and command == self._plan[self._plan_index]
        )
        facts_before = self._state["_facts"] if self._plan is not None and not on_plan else None
        self._state, _, _ = self._game.step(command)
        self._steps += 1
        if on_plan:
            self._plan_index += 1
        elif facts_before is not None and set(facts_before) != set(self._state["_facts"]):
            self._plan = None  # the agent changed the game off the plan: replan when asked
        self._won = bool(self._state["won"])
        truncated = not self._won and self._steps >= self.max_steps
        self._done = self._won or truncated
        info: dict[str, Any] = {"valid": valid, "steps": self._steps, "truncated": truncated}
        err = getattr(self._expert_wrapper, "expert_error", None)
        if err:
            info["expert_error"] = err
        self._obs = self._state.feedback
        self._transcript.append((command, self._obs))
        return StepResult(self._obs, 1.0 if self._won else 0.0, self._done, self._won, info)

    def admissible_actions(self) -> Optional[list[str]]:
        self._require_reset()
        return list(self._state["admissible_commands"])

    def expert_action(self) -> Optional[str]:
        """The configured expert's next command, or None when the episode is over or the expert has
        given up (the handcoded expert is a heuristic; see ``info['expert_error']``)."""
        self._require_reset()
        if self._done:
            return None
        if self.expert == "handcoded":
            plan = self._state.get("extra.expert_plan") or []
            return plan[0] if plan else None
        if self._plan is None or self._plan_index >= len(self._plan):
            self._plan, self._plan_index = self.replan(), 0
        return self._plan[self._plan_index] if self._plan else None

    def strategy_action(self, name: str) -> Optional[str]:
        """The next command of the registered strategy expert ``name`` (``alfworld_strategies``)."""
        self._require_reset()
        if self._done:
            return None
        view = EpisodeView(self._goal, self._first_obs, self._obs, tuple(self.admissible_actions()),
                           tuple(self._transcript))
        return get_strategy(FAMILY, name).act(view)

    def close(self) -> None:
        if self._game is not None:
            try:
                self._game.close()
            finally:
                self._game = None
                self._loaded_key = None
                self._expert_wrapper = None

    # -- helpers --------------------------------------------------------------------------------

    @property
    def task(self) -> Optional[Task]:
        return self._task

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def expert_error(self) -> Optional[str]:
        """Why the handcoded expert gave up, if it did."""
        return getattr(self._expert_wrapper, "expert_error", None)

    def walkthrough(self) -> list[str]:
        """The game's stored walkthrough (from the initial state)."""
        self._require_reset()
        return list(self._walkthrough)

    def replan(self) -> list[str]:
        """A plan from the current state by the PDDL planner (fast-downward; ~0.1-1 s)."""
        self._require_reset()
        pddl = self._game.unwrapped
        return list(pddl._pddl_state.replan(pddl._entity_infos))

    def _require_reset(self) -> None:
        if self._state is None:
            raise RuntimeError("AlfworldEnv: call reset(task) first")

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class AlfworldFamily:
    """ALFWorld tasks (4 splits of real games) and env instances."""

    name = FAMILY

    def __init__(self, cfg: EnvConfig, cache_dir: str | os.PathLike) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        self.archive = resolve_archive(cfg.alfworld_archive)
        self._root: Optional[Path] = None
        self._index: Optional[dict[str, list[str]]] = None

    @property
    def root(self) -> Path:
        """The unpacked games root (unpacks on first use)."""
        if self._root is None:
            self._root = ensure_unpacked(self.archive, self.cache_dir)
            index = _read_index(self.cache_dir / FAMILY)
            self._index = index["splits"] if index else _scan_games(self._root)
        return self._root

    def splits(self) -> list[str]:
        return list(SPLIT_SIZES)

    def task_types(self) -> list[str]:
        return list(TASK_TYPES)

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        if split not in SPLIT_SIZES:
            raise ValueError(f"ALFWorld split {split!r}: choose one of {list(SPLIT_SIZES)}")
        if n < 0:
            raise ValueError(f"n={n}: use 0 for the whole split or a positive subset size")
        self.root  # noqa: B018 - unpack / read the index
        keys = self._index[split]
        if 0 < n < len(keys):
            keys = [keys[i] for i in sorted(random.Random(seed).sample(range(len(keys)), n))]
        out = []
        for key in keys:
            p = parse_game_key(key)
            payload = {k: p[k] for k in ("object_target", "mrecep_target", "parent_target", "toggle_target", "scene")}
            out.append(Task(FAMILY, split, p["task_type"], key, payload))
        return out

    def make(self) -> AlfworldEnv:
        return AlfworldEnv(self.root, expert=self.cfg.expert, max_steps=self.cfg.max_steps)


# --------------------------------------------------------------------------------------------------
# Expert check (CLI)
# --------------------------------------------------------------------------------------------------


def play_expert(env: AlfworldEnv, task: Task) -> dict[str, Any]:
    """Play ``env``'s expert on ``task`` until done; timings and outcome."""
    t0 = time.perf_counter()
    env.reset(task)
    reset_s = time.perf_counter() - t0
    won, steps, step_s, error, actions = False, 0, 0.0, None, []
    while True:
        action = env.expert_action()
        if action is None:
            error = env.expert_error or "expert returned no action"
            break
        t1 = time.perf_counter()
        res = env.step(action)
        step_s += time.perf_counter() - t1
        steps += 1
        actions.append(action)
        if res.done:
            won = res.won
            break
    return {
        "task_id": task.task_id,
        "key": task.key,
        "task_type": task.task_type,
        "won": won,
        "steps": steps,
        "reset_s": reset_s,
        "step_s": step_s / max(steps, 1),
        "error": error,
        "actions": actions,
    }


_WORKER: dict[str, Any] = {}


def _worker_init(root: str, expert: str, max_steps: int) -> None:
    _WORKER["env"] = AlfworldEnv(Path(root), expert=expert, max_steps=max_steps)


def _worker_play(task_json: str) -> dict[str, Any]:
    return play_expert(_WORKER["env"], Task.from_json(task_json))


def check_split(
    family: AlfworldFamily, split: str, workers: int = 2, n: int = 0, seed: int = 0
) -> dict[str, Any]:
    """Play the configured expert on every game of ``split`` (or a seeded subset of ``n``)."""
    import multiprocessing as mp

    tasks = family.tasks(split, n=n, seed=seed)
    args = (str(family.root), family.cfg.expert, family.cfg.max_steps)
    t0 = time.perf_counter()
    if workers <= 1:
        _worker_init(*args)
        try:
            results = [_worker_play(t.to_json()) for t in tasks]
        finally:
            _WORKER.pop("env").close()
    else:
        with mp.get_context("spawn").Pool(workers, initializer=_worker_init, initargs=args) as pool:
            results = list(pool.imap(_worker_play, [t.to_json() for t in tasks], chunksize=1))
    wall = time.perf_counter() - t0
    per_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        per_type[r["task_type"]][0] += int(r["won"])
        per_type[r["task_type"]][1] += 1
    wins = sum(int(r["won"]) for r in results)
    return {
        "split": split,
        "expert": family.cfg.expert,
        "max_steps": family.cfg.max_steps,
        "wins": wins,
        "total": len(results),
        "per_type": {t: per_type[t] for t in TASK_TYPES if t in per_type},
        "wall_s": wall,
        "mean_reset_s": sum(r["reset_s"] for r in results) / max(len(results), 1),
        "mean_step_s": sum(r["step_s"] * r["steps"] for r in results) / max(sum(r["steps"] for r in results), 1),
        "mean_steps_won": sum(r["steps"] for r in results if r["won"]) / max(wins, 1),
        "max_steps_won": max((r["steps"] for r in results if r["won"]), default=0),
        "failures": [r for r in results if not r["won"]],
        "games": [{k: r[k] for k in ("key", "task_type", "won", "steps", "reset_s", "step_s")} for r in results],
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m talentrl_core.envs.alfworld", description=__doc__.split("\n")[0])
    ap.add_argument("--check", metavar="SPLIT", required=True, choices=list(SPLIT_SIZES), help="split to play")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2; at most one per core)")
    ap.add_argument("--expert", default="handcoded", choices=EXPERTS)
    ap.add_argument("--max-steps", type=int, default=50, help="step limit per game (default 50)")
    ap.add_argument("--n", type=int, default=0, help="play a seeded subset of this many games (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--archive",
        default=str(Path(os.environ.get("TALENTRL_DATA_DIR", "../shared/data")) / "alfworld" / "json_2.1.1_all.tar.xz"),
    )
    ap.add_argument("--cache-dir", default="artifacts/cache")
    ap.add_argument("--out", default="", help="write the full results (JSON) here")
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error("--workers must be >= 1")
    workers = min(a.workers, os.cpu_count() or 1)  # one PDDL-bound process per core at most

    cfg = EnvConfig(name=EnvName.alfworld, max_steps=a.max_steps, alfworld_archive=a.archive, expert=a.expert)
    fam = AlfworldFamily(cfg, a.cache_dir)
    res = check_split(fam, a.check, workers=workers, n=a.n, seed=a.seed)
    print(f"ALFWorld {res['split']}: expert={res['expert']} max_steps={res['max_steps']} workers={workers}")
    for t, (w, n) in res["per_type"].items():
        print(f"  {t:32s} {w:4d}/{n:<4d}")
    pct = 100.0 * res["wins"] / max(res["total"], 1)
    print(f"  {'overall':32s} {res['wins']:4d}/{res['total']:<4d} ({pct:.1f}%)")
    print(
        f"  wall {res['wall_s']:.1f} s; mean reset {res['mean_reset_s']:.2f} s; mean step {1000 * res['mean_step_s']:.0f} ms;"
        f" steps to win: mean {res['mean_steps_won']:.1f}, max {res['max_steps_won']}"
    )
    for f in res["failures"]:
        print(f"  FAIL {f['key']} steps={f['steps']} error={f['error']} last={f['actions'][-4:]}")
    if a.out:
        from ..io import write_json

        write_json(a.out, res)
    return 0 if res["wins"] == res["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
