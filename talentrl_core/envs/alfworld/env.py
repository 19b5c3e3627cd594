"""One ALFWorld game at a time (``AlfworldEnv``), played through TextWorld's PDDL backend with alfworld's wrappers."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

from ..base import StepResult, Task
from ..strategies import EpisodeView, get_strategy
from .data import FAMILY, parse_game_key
from .expert import _expert_wrapper

EXPERTS = ("handcoded", "walkthrough", "planner")
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_GOAL_PREFIX = "Your task is to: "

def _normalise(action: str) -> str:
    return " ".join(str(action).split()).lower()


def _key_seed(key: str) -> int:
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)


def _defer_expert(wrapper):
    """Make the handcoded expert wrapper lazy: each step only records what its ``_gather_infos`` would read (state,
    last command, start flag); the returned ``catch_up()`` replays the records in order when the expert's action is
    asked (its private random generator carries over), so the plans are the eager ones and a policy that never asks
    (LLM, random) never pays for them."""
    eager, pending = wrapper._gather_infos, []

    def record():
        if wrapper._at_start:  # a reset: the agent was reset with it
            pending.clear()
        pending.append((wrapper.state, wrapper.prev_command, wrapper._at_start))

    def catch_up():
        if pending:
            latest = (wrapper.state, wrapper.prev_command, wrapper._at_start)
            try:
                for wrapper.state, wrapper.prev_command, wrapper._at_start in pending:
                    eager()
            finally:
                pending.clear()
                wrapper.state, wrapper.prev_command, wrapper._at_start = latest

    wrapper._gather_infos = record
    return catch_up


class AlfworldEnv:
    """One ALFWorld game at a time, behind the :class:`~talentrl_core.envs.base.Env` protocol.

    ``reset`` of the game already loaded skips the load (only the PDDL state is rebuilt). The episode
    ends when the game is won (reward 1.0) or after ``max_steps`` steps (``info['truncated']``).
    Actions are compared case- and space-insensitively; an inadmissible one still goes to the game
    (which answers "Nothing happens.") and ``info['valid']`` is False.

    Experts: ``handcoded`` runs inside the game wrappers (it must observe every step); ``walkthrough``
    and ``planner`` follow a plan (the stored walkthrough, or the PDDL planner's plan made on first
    request) and replan only when the agent changes the game state off the plan. ``strategy_action``
    plays a registered strategy expert instead (``alfworld.strategies``: searches by receptacle class).
    """

    name = FAMILY

    def __init__(self, root: Path, expert: str = "handcoded", max_steps: int = 30, lazy_expert: bool = True) -> None:
        if expert not in EXPERTS:
            raise ValueError(f"alfworld expert {expert!r}: choose one of {EXPERTS}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.root = Path(root)
        self.expert = expert
        self.max_steps = max_steps
        self.lazy_expert = lazy_expert
        "Handcoded expert: run only when its action is asked (``info['expert_error']`` then appears only after)."
        self._catch_up = lambda: None
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
            if self.lazy_expert:
                self._catch_up = _defer_expert(self._expert_wrapper)
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
            self._catch_up()
            plan = self._expert_wrapper.state.get("extra.expert_plan") or []
            return plan[0] if plan else None
        if self._plan is None or self._plan_index >= len(self._plan):
            self._plan, self._plan_index = self.replan(), 0
        return self._plan[self._plan_index] if self._plan else None

    def strategy_action(self, name: str) -> Optional[str]:
        """The next command of the registered strategy expert ``name`` (``alfworld.strategies``)."""
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
                self._catch_up = lambda: None

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
        self._catch_up()
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
