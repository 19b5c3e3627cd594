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

import importlib
from typing import Any

_EXPORTS = {
    "AlfworldEnv": "env", "EXPERTS": "env",
    "AlfworldFamily": "family", "check_split": "family", "play_expert": "family", "main": "family",
    "AlfworldDataError": "data", "FAMILY": "data", "GAME_FILE": "data", "INDEX_FILE": "data", "SPLIT_SIZES": "data",
    "TASK_TYPES": "data", "ensure_unpacked": "data", "parse_game_key": "data", "resolve_archive": "data",
}
"""Names of the old ``envs/alfworld.py`` module (bench/ imports them from here), loaded on first use: importing the
package (as the registry does for ``spec``) imports none of its modules."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
