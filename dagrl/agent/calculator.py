"""A calculator tool: arithmetic on numbers, evaluated from the expression's syntax tree (never eval).

Allowed: int and float literals, + - * / // % **, unary + and -, parentheses. Bounded so a model cannot stall the
rollout: expressions of at most 200 characters, exponents of magnitude at most 100 and integers of at most 4096
bits (about 1200 digits). Bad input answers "error: ..." text; the tool never raises on the model's arguments.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from dagrl.agent.tools import BaseTool, ToolResponse

MAX_LENGTH = 200
MAX_EXPONENT = 100
MAX_BITS = 4096

CALCULATOR_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression (numbers, + - * / // % **, parentheses) and returns "
        "the result.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": 'The expression, e.g. "12 * 34".'}},
            "required": ["expression"],
        },
    },
}

Number = int | float
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _bits(value: Number) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def _binary(op: ast.operator, left: Number, right: Number) -> Number:
    # size checks come before the operation: computing 9**100**100 to reject it afterwards would never end
    if isinstance(op, ast.Pow):
        if abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is beyond +-{MAX_EXPONENT}")
        if isinstance(right, int) and _bits(left) * abs(right) > MAX_BITS:
            raise ValueError(f"the result would have more than {MAX_BITS} bits")
    if isinstance(op, ast.Mult) and _bits(left) + _bits(right) > MAX_BITS + 1:
        raise ValueError(f"the result would have more than {MAX_BITS} bits")
    if isinstance(op, ast.Div) and isinstance(left, int) and isinstance(right, int) and right and left % right == 0:
        return left // right  # exact, also for integers beyond a float's 53 bits
    result = _BINARY[type(op)](left, right)
    if isinstance(result, complex):
        raise ValueError("the result is not a real number")
    return result


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # not bool, complex or str
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _binary(node.op, _evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.Constant):
        raise ValueError(f"{node.value!r} is not a number")
    raise ValueError(f"{type(node).__name__} is not allowed: only numbers, + - * / // % ** and parentheses")


def format_number(value: Number) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number (overflow)")
        if value.is_integer() and abs(value) < 2**53:  # 7.0 -> "7"; beyond 2**53 a float's digits are not exact
            return str(int(value))
    return repr(value)


def calculate(expression: str) -> str:
    """The value of `expression` as text, or "error: ..." saying why there is none."""
    if len(expression) > MAX_LENGTH:
        return f"error: the expression is longer than {MAX_LENGTH} characters"
    try:
        return format_number(_evaluate(ast.parse(expression.strip(), mode="eval")))
    except SyntaxError as error:
        return f"error: invalid expression ({error.msg})"
    except ZeroDivisionError:
        return "error: division by zero"
    except OverflowError:
        return "error: the result is too large"
    except (ValueError, TypeError, RecursionError, MemoryError) as error:
        return f"error: {error}"


class CalculatorTool(BaseTool):
    """Stateless: every call evaluates its own `expression` argument; no step reward."""

    default_schema = CALCULATOR_SCHEMA

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        expression = parameters.get("expression") if isinstance(parameters, dict) else None
        if isinstance(expression, (int, float)) and not isinstance(expression, bool):
            expression = str(expression)  # a model that sends {"expression": 12} means the number
        if not isinstance(expression, str):
            return ToolResponse(text='error: call with {"expression": "<arithmetic>"}, e.g. "12 * 34"'), 0.0, {}
        return ToolResponse(text=calculate(expression)), 0.0, {}
