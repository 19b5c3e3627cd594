"""One live TextWorld game (``TextWorldEnv``): reset from the game cache, normalised score-delta rewards, TextWorld's
expert (its ``policy_commands``, else the walkthrough while the agent follows it), the strategy experts."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ..base import StepResult, Task
from ..strategies import EpisodeView, get_strategy
from .games import _quiet_jericho, generate_game
from .settings import FAMILY, spec_of
from .strategies import hide_route, hint_route

_BANNER_LINE = re.compile(r"^[\s_$|\\/<>]+$")


def clean_text(text: str) -> str:
    """Drop TextWorld's ASCII-art banner, the ``>`` prompt line (with its status bar) and blank runs."""
    lines = []
    for line in (text or "").splitlines():
        if line.strip() and _BANNER_LINE.match(line):
            continue
        if line.lstrip().startswith(">"):
            continue
        lines.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def same_text(a: str, b: str) -> bool:
    """Whether two texts are the same up to whitespace and quote marks: TextWorld's intro observation prints the
    objective's apostrophes as double quotes (``you"ve``), and a hidden route must be hidden there too.

    >>> same_text('And once you"ve done that,  you win!', "And once you've done that, you win!")
    True
    """
    def norm(t: str) -> str:
        return " ".join(t.replace('"', "'").split())
    return norm(a) == norm(b)


def _normalise_command(action: str) -> str:
    # One line, single spaces, lower case: TextWorld's admissible commands are written that way, and a
    # newline inside an action must not reach the interpreter as a second command.
    return " ".join(str(action).split()).lower()


class TextWorldEnv:
    """One live TextWorld game. ``reset`` generates the game if the cache lacks it."""

    name = FAMILY

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = Path(cache_dir)
        self._env = None
        self._game_file: Optional[Path] = None
        self._state = None
        self._task: Optional[Task] = None
        self._score = 0
        self._max_score = 0
        self._done = False
        self._won = False
        self._history: list[str] = []
        self._hide_route = False
        self._objective = ""
        self._first_obs = ""
        self._obs = ""
        self._transcript: list[tuple[str, str]] = []

    @property
    def task_type(self) -> Optional[str]:
        return self._task.task_type if self._task else None

    @property
    def task_id(self) -> Optional[str]:
        return self._task.task_id if self._task else None

    def reset(self, task: Task) -> str:
        import textworld

        game_file = generate_game(self.cache_dir, spec_of(task))
        if self._env is None or self._game_file != game_file:
            self.close()
            infos = textworld.EnvInfos(
                admissible_commands=True,
                policy_commands=True,
                won=True,
                lost=True,
                score=True,
                max_score=True,
                objective=True,
                moves=True,
            )
            with _quiet_jericho():
                self._env = textworld.start(str(game_file), request_infos=infos)
            self._game_file = game_file
        self._task = task
        self._state = self._env.reset()
        self._score = int(self._state.get("score") or 0)
        self._max_score = int(self._state.get("max_score") or 0)
        self._done = bool(self._state.get("won") or self._state.get("lost"))
        self._won = bool(self._state.get("won"))
        self._history = []
        self._transcript = []
        objective = " ".join(str(self._state.get("objective") or "").split())
        route = spec_of(task).options["route"]
        self._hide_route = route != "stated"
        self._objective = {"hidden": hide_route, "hint": hint_route}.get(route, str)(objective)
        obs = clean_text(self._state.feedback)
        if self._hide_route:  # the intro observation repeats the objective: show the hidden text there too
            paras = obs.split("\n\n")
            obs = "\n\n".join(self._objective if same_text(p, objective) else p for p in paras)
        self._first_obs = self._obs = obs
        return obs

    def _require(self) -> None:
        if self._state is None:
            raise RuntimeError("TextWorldEnv: call reset(task) first")

    def goal(self) -> str:
        self._require()
        return self._objective

    def _progress(self, score: int) -> float:
        if self._max_score > 0:
            return score / self._max_score
        return 1.0 if self._won else 0.0

    def step(self, action: str) -> StepResult:
        self._require()
        command = _normalise_command(action)
        valid = command in set(self._state.get("admissible_commands") or [])
        if self._done:
            return StepResult(
                "The game is over.", 0.0, True, self._won,
                {"valid": valid, "score": self._score, "max_score": self._max_score, "lost": not self._won},
            )
        before = self._progress(self._score)
        self._state, _, _ = self._env.step(command)
        self._history.append(command)
        won = bool(self._state.get("won"))
        lost = bool(self._state.get("lost"))
        score = self._state.get("score")
        self._score = int(score) if score is not None else self._score
        self._won = won
        self._done = won or lost
        reward = self._progress(self._score) - before
        info = {
            "valid": valid,
            "score": self._score,
            "max_score": self._max_score,
            "lost": lost,
            "moves": self._state.get("moves"),
        }
        obs = clean_text(self._state.feedback)
        self._obs = obs
        self._transcript.append((command, obs))
        return StepResult(obs, float(reward), self._done, won, info)

    def strategy_action(self, name: str) -> Optional[str]:
        """The next command of the registered strategy expert ``name`` (``strategies``)."""
        self._require()
        if self._done:
            return None
        view = EpisodeView(self._objective, self._first_obs, self._obs, tuple(self.admissible_actions()), tuple(self._transcript))
        return get_strategy(FAMILY, name).act(view)

    def admissible_actions(self) -> list[str]:
        self._require()
        return sorted(set(self._state.get("admissible_commands") or []))

    def expert_action(self) -> Optional[str]:
        self._require()
        if self._done:
            return None
        policy = self._state.get("policy_commands") or []
        if policy:
            return policy[0]
        # TextWorld gives no policy for some games (tw-cooking with `drop`): replay the walkthrough as
        # long as the agent has followed it exactly.
        walk = self.walkthrough()
        n = len(self._history)
        if n < len(walk) and self._history == walk[:n]:
            return walk[n]
        return None

    def walkthrough(self) -> list[str]:
        """The game's recorded walkthrough (from its .json; the same for every episode of the game)."""
        self._require()
        return list(self._state.get("extra.walkthrough") or [])

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                self._env = None
                self._game_file = None


# --------------------------------------------------------------------------------------------------
# The family
# --------------------------------------------------------------------------------------------------
