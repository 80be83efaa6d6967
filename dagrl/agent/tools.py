"""Tools: verl's BaseTool interface, the helpers the turn loop calls them through, and their YAML loader.

The YAML file is verl's (`actor_rollout_ref.rollout.multi_turn.tool_config_path`):

    tools:
      - class_name: dagrl.agent.calculator.CalculatorTool    # or package.module:ClassName
        config: {}                                           # optional, free-form, given to the constructor
        tool_schema:                                         # the OpenAI function schema offered to the model
          type: function
          function: {name: calculator, description: ..., parameters: {type: object, properties: ..., required: ...}}

Classes are built as `cls(config=config, tool_schema=schema)`. verl passes a pydantic OpenAIFunctionToolSchema;
we pass a ToolSchema: a plain dict (what chat templates and json.dumps take) that also reads like the pydantic
object (`schema.function.name`, `schema.model_dump()`), so classes written against verl's BaseTool construct
unchanged. A tool with a `default_schema` class attribute (the built-in ones) may leave tool_schema out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from dagrl.agent.registry import check_calls, construct, import_class, load_entries, maybe_await
from dagrl.config.errors import ConfigError

TOOL_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a function name
# method -> the positional arguments the turn loop (dagrl/agent/loop.py) passes it
TOOL_CALLS = {
    "create": ("instance_id",),
    "execute": ("instance_id", "parameters"),
    "calc_reward": ("instance_id",),
    "release": ("instance_id",),
}


class ToolExited(RuntimeError):
    """A tool method called sys.exit. Turned into an exception, so the turn loop treats it as any tool failure (an
    error observation the model sees, counted in the metrics) instead of a SystemExit ending the trainer."""


def _exited(tool: Any, method: str, error: SystemExit) -> ToolExited:
    code = "" if error.code is None else repr(error.code)
    return ToolExited(f"{type(tool).__name__}.{method} called sys.exit({code})")


@dataclass
class ToolResponse:
    """What a tool answers. verl's also carries images and videos; the turn loop is text-only and ignores them."""

    text: str = ""
    image: Any = None
    video: Any = None


class ToolSchema(dict):
    """An OpenAI function schema: a dict whose keys also read as attributes, like verl's pydantic schema."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return ToolSchema(value) if isinstance(value, dict) and not isinstance(value, ToolSchema) else value

    def model_dump(self, **_: Any) -> dict:
        return dict(self)


class BaseTool:
    """verl's interface: one instance per tool serves every trajectory, each trajectory's state under its
    instance id (create -> execute* -> calc_reward -> release)."""

    default_schema: dict | None = None

    def __init__(self, config: dict | None, tool_schema: dict | Any | None) -> None:
        self.config = dict(config or {})
        schema = tool_schema if tool_schema is not None else self.default_schema
        if schema is None:
            raise ValueError(f"{type(self).__name__} needs a tool_schema")
        if hasattr(schema, "model_dump"):  # verl's pydantic object, when built by verl-minded code
            schema = schema.model_dump(exclude_none=True)
        self.tool_schema = ToolSchema(schema)

    @property
    def name(self) -> str:
        return self.tool_schema["function"]["name"]

    def get_openai_tool_schema(self) -> dict:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Starts one trajectory's state; `kwargs` are the row's tools_kwargs.<name>.create_kwargs."""
        return (instance_id if instance_id is not None else str(uuid4())), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse | str, float, dict]:
        """(response, step reward, metrics) for one call with the model's arguments."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drops the trajectory's state."""


def response_text(response: Any) -> str:
    """The text of any response shape: a str, ToolResponse (ours or verl's), older verl's {"text": ...}, None."""
    if response is None:
        return ""
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        return str(response.get("text") or "")
    text = getattr(response, "text", None)
    return str(text) if text is not None else str(response)


async def create_instance(tool: Any, instance_id: str | None, create_kwargs: dict | None) -> str:
    """The instance id from `tool.create`, plain or coroutine, returning an id (older verl) or (id, response)."""
    try:
        created = await maybe_await(tool.create(instance_id, **(create_kwargs or {})))
    except SystemExit as error:  # a BaseException: the loop's `except Exception` would let it end the trainer
        raise _exited(tool, "create", error) from None
    if isinstance(created, tuple):
        created = created[0]
    if created is None:  # a create() that only sets state up: the id is ours to choose
        created = instance_id if instance_id is not None else str(uuid4())
    return str(created)


async def execute_call(
    tool: Any, instance_id: str, parameters: dict[str, Any], execute_kwargs: dict | None
) -> tuple[str, float, dict]:
    """(text, step reward, metrics) from `tool.execute`, plain or coroutine, returning a bare response or the
    (response, reward, metrics) triple with any response shape response_text takes."""
    try:
        result = await maybe_await(tool.execute(instance_id, parameters, **(execute_kwargs or {})))
    except SystemExit as error:  # a BaseException: the loop's `except Exception` would let it end the trainer
        raise _exited(tool, "execute", error) from None
    response, reward, metrics = result if isinstance(result, tuple) and len(result) == 3 else (result, 0.0, {})
    return response_text(response), float(reward or 0.0), dict(metrics or {})


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_schema(schema: Any, key: str, where: str) -> ToolSchema:
    """`schema` as a ToolSchema when it is an OpenAI function schema; a one-line ConfigError naming `where`
    (the file and entry) and the field otherwise."""

    def fail(message: str) -> ConfigError:
        return ConfigError(key, f"{key}: {where}: tool_schema{message}")

    if not isinstance(schema, dict):
        raise fail(f" must be a mapping (type: function, function: ...), got {_show(schema)}")
    if schema.get("type") != "function":
        raise fail(f".type must be 'function', got {_show(schema.get('type'))}")
    function = schema.get("function")
    if not isinstance(function, dict):
        raise fail(f".function must be a mapping with name, description and parameters, got {_show(function)}")
    name = function.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise fail(f".function.name must be 1-64 letters, digits, _ or -, got {_show(name)}")
    if not isinstance(function.get("description", ""), str):
        raise fail(f".function.description must be a string, got {_show(function['description'])}")
    parameters = function.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise fail(f".function.parameters must be a mapping with type: object, got {_show(parameters)}")
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise fail(f".function.parameters.properties must be a mapping of name -> schema, got {_show(properties)}")
    for field, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if not (isinstance(kind, str) or (isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind))):
            raise fail(f".function.parameters.properties.{field} must be a mapping with a type, got {_show(spec)}")
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(field, str) for field in required):
        raise fail(f".function.parameters.required must be a list of property names, got {_show(required)}")
    missing = [field for field in required if field not in properties]
    if missing:
        raise fail(
            f".function.parameters.required names {', '.join(map(repr, missing))}, not in properties "
            f"({', '.join(map(repr, properties)) or 'none'})"
        )
    return ToolSchema(schema)


def load_tools(path: str, key: str = TOOL_KEY) -> dict[str, BaseTool]:
    """function name -> tool instance for every entry of the `tools` list of the YAML file at `path`."""
    tools: dict[str, BaseTool] = {}
    where_of: dict[str, str] = {}
    for number, entry in enumerate(load_entries(path, key, "tools")):
        where = f"{path}, tools[{number}]"
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ConfigError(key, f"{key}: {where}: config must be a mapping, got {type(config).__name__}")
        cls = import_class(entry["class_name"], key, where)
        # duck typing: verl's own tools subclass verl's BaseTool, not ours
        if not callable(getattr(cls, "execute", None)):
            raise ConfigError(
                key,
                f"{key}: {where}: class {entry['class_name']!r} has no execute method "
                f"(subclass dagrl.agent.tools.BaseTool)",
            )
        raw = entry.get("tool_schema")
        if raw is None:
            raw = getattr(cls, "default_schema", None)
            if raw is None:
                raise ConfigError(
                    key,
                    f"{key}: {where}: tool_schema is missing (the OpenAI function schema "
                    f"offered to the model), and {entry['class_name']} has no default_schema",
                )
        schema = validate_schema(raw, key, where)
        name = schema["function"]["name"]
        where = f"{where} ({name!r})"
        if name in tools:
            raise ConfigError(
                key,
                f"{key}: {where}: duplicate tool name {name!r} (also {where_of[name]}); "
                f"the model calls tools by name, so names must be unique",
            )
        tools[name] = construct(cls, key, where, entry["class_name"], config=config, tool_schema=schema)
        check_calls(tools[name], key, where, entry["class_name"], TOOL_CALLS, "dagrl.agent.tools.BaseTool")
        where_of[name] = where
    return tools
