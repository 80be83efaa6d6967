"""Tools: the YAML loader and its one-line errors, schema validation, the calculator, and the helpers that let the
turn loop call verl-style tools with plain or coroutine methods and every return shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml

from dagrl.agent.calculator import CALCULATOR_SCHEMA, CalculatorTool, calculate
from dagrl.agent.sandbox import PythonTool
from dagrl.agent.tools import (
    TOOL_KEY,
    BaseTool,
    ToolResponse,
    ToolSchema,
    create_instance,
    execute_call,
    load_tools,
    validate_schema,
)
from dagrl.config.errors import ConfigError


def function_schema(name: Any = "adder", properties: Any = None, required: Any = None, **function: Any) -> dict:
    properties = {"a": {"type": "integer"}, "b": {"type": "integer"}} if properties is None else properties
    parameters = {"type": "object", "properties": properties, "required": ["a", "b"] if required is None else required}
    return {
        "type": "function",
        "function": {"name": name, "description": "Adds.", "parameters": parameters, **function},
    }


def write_tools(tmp_path, entries: list[dict]) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": entries}))
    return str(path)


class SyncDuck:
    """Not a BaseTool: plain methods, an id-returning create and bare-str execute results, as older verl tools and
    hand-written ones have; reads its schema the way verl's BaseTool does (attributes, model_dump)."""

    def __init__(self, config: dict, tool_schema: Any) -> None:
        self.name = tool_schema.function.name
        self.dumped = tool_schema.model_dump()
        self.offset = config.get("offset", 0)
        self.state: dict[str, int] = {}

    def get_openai_tool_schema(self) -> dict:
        return self.dumped

    def create(self, instance_id: str | None = None, start: int = 0, **kwargs: Any) -> str:
        self.state[f"duck-{start}"] = start
        return f"duck-{start}"

    def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> Any:
        self.state[instance_id] += parameters["a"] + self.offset
        if parameters.get("shape") == "triple":  # older verl: ({"text": ...}, reward, metrics)
            return {"text": f"total {self.state[instance_id]}"}, 0.25, {"calls": 1}
        return f"total {self.state[instance_id]}"

    def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return float(self.state[instance_id])

    def release(self, instance_id: str, **kwargs: Any) -> None:
        self.state.pop(instance_id)


def test_load_tools_builds_every_class_name_form_keyed_by_function_name(tmp_path):
    path = write_tools(
        tmp_path,
        [
            {
                "class_name": "dagrl.agent.calculator.CalculatorTool",
                "config": {"type": "native"},
                "tool_schema": CALCULATOR_SCHEMA,
            },
            {"class_name": "dagrl.agent.sandbox:PythonTool", "config": {"timeout_s": 3}},  # its default schema
            {
                "class_name": "tests.agent.test_tools.SyncDuck",
                "config": {"offset": 10},
                "tool_schema": function_schema("duck"),
            },
        ],
    )
    tools = load_tools(path)
    assert list(tools) == ["calculator", "python", "duck"]
    assert isinstance(tools["calculator"], CalculatorTool) and tools["calculator"].config == {"type": "native"}
    assert isinstance(tools["python"], PythonTool) and tools["python"].timeout_s == 3.0
    assert tools["python"].name == "python" and tools["duck"].name == "duck"
    schema = tools["calculator"].get_openai_tool_schema()
    assert schema.function.name == "calculator" and json.loads(json.dumps(schema)) == CALCULATOR_SCHEMA
    assert tools["duck"].dumped == function_schema("duck")

    async def calls() -> list:
        python = await execute_call(tools["python"], "p", {"code": "print(6 * 7)"}, {})
        calculator = await execute_call(tools["calculator"], "c", {"expression": "6 * 7"}, {})
        return [python, calculator]

    (python_text, _, python_metrics), calculator = asyncio.run(calls())
    assert python_text == "42\n" and python_metrics["exit_code"] == 0 and calculator == ("42", 0.0, {})


WRONG_SCHEMAS = [
    (function_schema(name=None), "function.name must be"),
    (function_schema(name="my tool"), "function.name must be"),
    ({**function_schema(), "type": "tool"}, ".type must be 'function'"),
    ({"type": "function"}, ".function must be a mapping"),
    (function_schema(description=3), "description must be a string"),
    (
        {"type": "function", "function": {"name": "adder", "parameters": {"type": "array"}}},
        "parameters must be a mapping with type: object",
    ),
    (function_schema(properties=["a"]), "properties must be a mapping"),
    (function_schema(properties={"a": {"description": "no type"}}, required=["a"]), "properties.a must be"),
    (function_schema(required=["a", "c"]), "required names 'c', not in properties ('a', 'b')"),
    (function_schema(required="a"), "required must be a list"),
    ("calculator", "tool_schema must be a mapping"),
]


@pytest.mark.parametrize("schema, fragment", WRONG_SCHEMAS)
def test_invalid_schemas_stop_loading_naming_file_entry_and_field(tmp_path, schema, fragment):
    path = write_tools(
        tmp_path,
        [
            {"class_name": "dagrl.agent.calculator.CalculatorTool", "tool_schema": CALCULATOR_SCHEMA},
            {"class_name": "dagrl.agent.calculator.CalculatorTool", "tool_schema": schema},
        ],
    )
    with pytest.raises(ConfigError) as caught:
        load_tools(path)
    message = str(caught.value)
    assert caught.value.key == TOOL_KEY and fragment in message
    assert f"{path}, tools[1]" in message and "\n" not in message


def test_validate_schema_accepts_openai_schemas_and_reads_them_as_attributes():
    schema = validate_schema(
        function_schema(properties={"x": {"type": ["number", "null"]}}, required=[]), TOOL_KEY, "here"
    )
    assert isinstance(schema, ToolSchema) and schema.function.parameters.properties == {
        "x": {"type": ["number", "null"]}
    }
    no_required = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    assert validate_schema(no_required, TOOL_KEY, "here").function.name == "f"
    with pytest.raises(AttributeError):
        _ = schema.function.strict  # absent keys are absent, so getattr(schema, key, default) works


@pytest.mark.parametrize(
    "entries, entry, fragment",
    [
        ([{"class_name": "dagrl.agent.no_such_module.Tool", "tool_schema": CALCULATOR_SCHEMA}], 0, "cannot import"),
        ([{"class_name": "dagrl.agent.calculator.NoSuchTool", "tool_schema": CALCULATOR_SCHEMA}], 0, "has no class"),
        ([{"class_name": "collections.OrderedDict", "tool_schema": CALCULATOR_SCHEMA}], 0, "has no execute method"),
        ([{"class_name": "dagrl.agent.tools.BaseTool"}], 0, "tool_schema is missing"),
        ([{"class_name": "dagrl.agent.calculator.CalculatorTool", "config": [1]}], 0, "config must be a mapping"),
        (
            [{"class_name": "dagrl.agent.sandbox.PythonTool", "config": {"timeout_s": -1}}],
            0,
            "raised ValueError: config.timeout_s=-1 must be a positive number",
        ),
        (
            [
                {"class_name": "dagrl.agent.calculator.CalculatorTool"},
                {"class_name": "tests.agent.test_tools.SyncDuck", "tool_schema": function_schema("calculator")},
            ],
            1,
            "duplicate tool name 'calculator' (also",
        ),
        (
            [{"class_name": "dagrl.agent.calculator.CalculatorTool"}, {"tool_schema": CALCULATOR_SCHEMA}],
            1,
            "must be a mapping with a class_name",
        ),
    ],
)
def test_entry_errors_name_the_file_and_entry_in_one_line(tmp_path, entries, entry, fragment):
    path = write_tools(tmp_path, entries)
    with pytest.raises(ConfigError) as caught:
        load_tools(path)
    message = str(caught.value)
    assert caught.value.key == TOOL_KEY and fragment in message
    assert f"{path}, tools[{entry}]" in message and "\n" not in message


@pytest.mark.parametrize(
    "content, fragment",
    [(None, "no such file"), ("tools: [unclosed", "is not valid YAML"), ("tools: []", "non-empty 'tools' list")],
)
def test_file_errors_name_the_file_in_one_line(tmp_path, content, fragment):
    path = tmp_path / "tools.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_tools(str(path), key="custom.key")
    message = str(caught.value)
    assert caught.value.key == "custom.key" and fragment in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("123*456", "56088"),
        ("(2+3)**2", "25"),
        ("7/2", "3.5"),
        ("12/2", "6"),
        ("-3 + +4", "1"),
        ("17 // 5", "3"),
        ("17 % 5", "2"),
        ("2**-2", "0.25"),
        ("1.5 * 4", "6"),
        ("0.1 + 0.2", "0.30000000000000004"),
        ("10**30 / 10**10", "100000000000000000000"),
        (" 2 * (3 + 4) ", "14"),
        ("2**100", str(2**100)),
    ],
)
def test_calculator_values(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    "expression, fragment",
    [
        ("__import__('os')", "Call is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("(1).real", "Attribute"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("2**10**10", "exponent"),
        ("9**99**2", "exponent"),
        ("(10**100)**99", "more than 4096 bits"),
        ("1/0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1e308 * 10", "not a finite number"),
        ("1 +", "invalid expression"),
        ("1" * 201, "longer than 200 characters"),
        ("[1, 2]", "List is not allowed"),
    ],
)
def test_calculator_refuses_with_error_text(expression, fragment):
    text = calculate(expression)
    assert text.startswith("error: ") and fragment in text


def test_calculator_tool_answers_error_text_for_bad_arguments():
    tool = CalculatorTool(config={}, tool_schema=None)

    async def texts() -> list[str]:
        return [
            (await execute_call(tool, "i", parameters, None))[0]
            for parameters in ({"expression": "3*4"}, {"expression": 12}, {}, {"expression": ["1"]})
        ]

    refusal = 'error: call with {"expression": "<arithmetic>"}, e.g. "12 * 34"'
    assert asyncio.run(texts()) == ["12", "12", refusal, refusal]


def test_duck_typed_sync_tool_and_every_return_shape_go_through_the_helpers(tmp_path):
    tools = load_tools(
        write_tools(
            tmp_path,
            [
                {
                    "class_name": "tests.agent.test_tools.SyncDuck",
                    "config": {"offset": 10},
                    "tool_schema": function_schema("duck"),
                }
            ],
        )
    )
    duck = tools["duck"]

    async def lifecycle() -> tuple:
        instance = await create_instance(duck, None, {"start": 5})
        bare = await execute_call(duck, instance, {"a": 1}, {})
        triple = await execute_call(duck, instance, {"a": 2, "shape": "triple"}, None)
        return instance, bare, triple

    instance, bare, triple = asyncio.run(lifecycle())
    assert instance == "duck-5" and bare == ("total 16", 0.0, {}) and triple == ("total 28", 0.25, {"calls": 1})
    assert duck.calc_reward(instance) == 28.0


def test_base_tool_defaults_follow_verl():
    tool = BaseTool(config=None, tool_schema=function_schema("base"))

    async def lifecycle() -> tuple:
        created = await tool.create()
        kept = await create_instance(tool, "given", {})
        fresh = await create_instance(tool, None, None)
        result = await tool.execute(fresh, {})
        return created, kept, fresh, result, await tool.calc_reward(fresh), await tool.release(fresh)

    (created_id, created_response), kept, fresh, result, reward, released = asyncio.run(lifecycle())
    assert len(created_id) == 36 and isinstance(created_response, ToolResponse) and kept == "given"
    assert len(fresh) == 36 and fresh != created_id and reward == 0.0 and released is None
    assert result[0].text == "Updated the tool state." and tool.name == "base" and tool.config == {}
    with pytest.raises(ValueError, match="needs a tool_schema"):
        BaseTool(config={}, tool_schema=None)


class ExitingTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {"name": "quit", "parameters": {"type": "object", "properties": {}}},
    }

    async def create(self, instance_id=None, **kwargs):
        if kwargs.get("exit"):
            raise SystemExit(3)
        return instance_id or "id", ToolResponse()

    def execute(self, instance_id, parameters, **kwargs):
        raise SystemExit(0)


def test_a_tool_that_calls_sys_exit_is_a_tool_error_not_the_end_of_the_trainer():
    """SystemExit is a BaseException the turn loop's `except Exception` would miss (ending the trainer, exit 0):
    the helpers turn it into ToolExited, an Exception, which the loop shows the model as any tool failure."""
    from dagrl.agent.tools import ToolExited

    tool = ExitingTool(config={}, tool_schema=None)
    with pytest.raises(ToolExited, match=r"ExitingTool.execute called sys.exit\(0\)"):
        asyncio.run(execute_call(tool, "id", {}, None))
    with pytest.raises(ToolExited, match=r"ExitingTool.create called sys.exit\(3\)"):
        asyncio.run(create_instance(tool, None, {"exit": True}))
    assert issubclass(ToolExited, Exception)
