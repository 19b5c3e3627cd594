"""alfworld's handcoded expert, fixed for the 0.4.x games (``_HandcodedFixMixin``, ``_SameReceptacleMixin``), and the
expert wrapper an ``AlfworldEnv`` plays it through (see the package docstring, ``envs/alfworld/__init__.py``)."""

from __future__ import annotations

import random
from typing import Any, Optional

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
