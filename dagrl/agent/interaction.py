"""Interactions: the environment's side of a multi-turn rollout (verl's BaseInteraction), and their YAML loader.

After each assistant turn without tool calls, the turn loop asks the row's interaction (named by
`extra_info.interaction_kwargs.name`) for a reply: whether to stop, the user message to append, a turn score and
metadata. The YAML file is verl's:

    interaction:
      - name: try_again                                  # optional: defaults to the class name, less "Interaction"
        class_name: dagrl.agent.interaction.TryAgainInteraction
        config: {feedback: "Wrong, try again."}          # optional; the entry's name is added as config["name"]
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from dagrl.agent.registry import check_calls, construct, import_class, load_entries
from dagrl.config.errors import ConfigError
from dagrl.reward.scorers.last_number import last_integer

INTERACTION_KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
# What the turn loop (dagrl.agent.loop) calls on every trajectory with an interaction; calculate_score is optional.
LOOP_METHODS = ("start_interaction", "generate_response", "finalize_interaction")
# method -> the positional arguments the turn loop (dagrl/agent/loop.py) passes it
LOOP_CALLS = {
    "start_interaction": ("instance_id",),
    "generate_response": ("instance_id", "messages"),
    "finalize_interaction": ("instance_id",),
}


class BaseInteraction:
    """verl's interface. Every method may also be a plain function in a duck-typed class (the loop awaits
    through dagrl.agent.registry.maybe_await)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.name: str = config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Starts one trajectory's session; `kwargs` are the row's interaction_kwargs. Returns its id."""
        return instance_id if instance_id is not None else str(uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """(should_terminate, response text, turn score, metadata) for the conversation so far."""
        return False, "Your current result seems acceptable.", 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Releases the session's state."""


def last_assistant_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


class TryAgainInteraction(BaseInteraction):
    """ "Wrong, try again" until the last number of the last assistant message equals `ground_truth`.

    interaction_kwargs: {"name": ..., "ground_truth": "<integer>"}; config: {"feedback": text of a wrong turn}.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.feedback = str(config.get("feedback", "Wrong, try again."))
        self._sessions: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, ground_truth: Any = None, **kwargs: Any) -> str:
        if ground_truth is None:
            raise ValueError(f"interaction {self.name!r} needs interaction_kwargs.ground_truth (the answer)")
        instance_id = await super().start_interaction(instance_id)
        self._sessions[instance_id] = {"ground_truth": int(str(ground_truth).replace(",", "").strip()), "score": 0.0}
        return instance_id

    def _session(self, instance_id: str) -> dict[str, Any]:
        if instance_id not in self._sessions:
            raise KeyError(f"interaction {self.name!r} has no session {instance_id!r} (not started, or finalized)")
        return self._sessions[instance_id]

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        session = self._session(instance_id)
        correct = last_integer(last_assistant_text(messages)) == session["ground_truth"]
        session["score"] = 1.0 if correct else 0.0
        if correct:
            return True, "Correct.", 1.0, {}
        return False, self.feedback, 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return self._session(instance_id)["score"]

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._sessions.pop(instance_id, None)


def default_name(class_name: str) -> str:
    """verl's default: the class's own name, lower-cased, less an "Interaction" suffix ("Gsm8kInteraction" -> gsm8k)."""
    simple = class_name.replace(":", ".").rsplit(".", 1)[-1]
    return (
        simple[: -len("Interaction")] if simple.endswith("Interaction") and simple != "Interaction" else simple
    ).lower()


def load_interactions(path: str, key: str = INTERACTION_KEY) -> dict[str, BaseInteraction]:
    """name -> interaction instance for every entry of the `interaction` list of the YAML file at `path`."""
    interactions: dict[str, BaseInteraction] = {}
    where_of: dict[str, str] = {}
    for number, entry in enumerate(load_entries(path, key, "interaction")):
        where = f"{path}, interaction[{number}]"
        name = entry.get("name")
        if name is None:
            name = default_name(entry["class_name"])
        elif not isinstance(name, str) or not name:
            raise ConfigError(key, f"{key}: {where}: name must be a non-empty string, got {name!r}")
        where = f"{where} ({name!r})"
        if name in interactions:
            raise ConfigError(
                key,
                f"{key}: {where}: duplicate interaction name {name!r} (also {where_of[name]}); "
                f"names must be unique, rows pick one by interaction_kwargs.name",
            )
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ConfigError(key, f"{key}: {where}: config must be a mapping, got {type(config).__name__}")
        cls = import_class(entry["class_name"], key, where)
        missing = [method for method in LOOP_METHODS if not callable(getattr(cls, method, None))]
        if missing:
            raise ConfigError(
                key,
                f"{key}: {where}: class {entry['class_name']!r} has no {', '.join(missing)} "
                f"method (subclass dagrl.agent.interaction.BaseInteraction)",
            )
        # verl passes the entry's name inside config (self.name comes from it) and calls with config=
        interactions[name] = construct(cls, key, where, entry["class_name"], config={**config, "name": name})
        check_calls(
            interactions[name], key, where, entry["class_name"], LOOP_CALLS, "dagrl.agent.interaction.BaseInteraction"
        )
        where_of[name] = where
    return interactions
