"""The hermes tool-call format: tool schemas in the prompt, calls parsed from an assistant turn's text, and the
token segment a turn's observations add to a trajectory.

Calls are `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in the assistant text, parsed after the
turn ends at its eos (as verl does: multi-token tags and a tokenizer-less engine rule out stop strings). Parsing is
strict; a malformed block is reported back to the model as an observation, never raised.

Token-in/token-out: the ids the model sampled are never re-tokenised. After a turn, only the observation segment is
rendered: the chat template applied to the conversation with and without the new messages, the difference taken
from the end of the last eos (the separator a template writes after an eos, e.g. ChatML's newline, belongs to the
segment, since the model stopped at the eos).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FORMATS = ("hermes",)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


def hermes_tools_prompt(schemas: list[dict]) -> str:
    """The tool section of a system message in the hermes style (Qwen's and NousResearch's wording)."""
    listed = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{listed}\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders its `tools` argument (SmolLM2's ignores it)."""
    probe = [{"role": "user", "content": "hi"}]
    schema = {
        "type": "function",
        "function": {"name": "probe_tool_name", "parameters": {"type": "object", "properties": {}}},
    }
    with_tools = tokenizer.apply_chat_template(probe, tools=[schema], tokenize=False, add_generation_prompt=True)
    return with_tools != tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)


def with_tools(chat: list[dict], schemas: list[dict], template_renders_tools: bool) -> tuple[list[dict], dict]:
    """The chat and the `apply_chat_template` keyword arguments that offer `schemas`: through the template's `tools`
    argument, or (when it ignores them) as a hermes section appended to the system message."""
    if not schemas:
        return chat, {}
    if template_renders_tools:
        return chat, {"tools": schemas}
    section = hermes_tools_prompt(schemas)
    if chat and chat[0].get("role") == "system":
        return [{**chat[0], "content": f"{chat[0]['content']}\n\n{section}"}, *chat[1:]], {}
    return [{"role": "system", "content": section}, *chat], {}


def parse_calls(text: str, max_calls: int) -> tuple[list[ToolCall], list[str]]:
    """The turn's calls (at most `max_calls`, in order) and one error text per block that is not a valid call
    (malformed, unclosed, or beyond `max_calls`)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for block in TOOL_CALL.findall(text):
        try:
            call = _parse_block(block)
        except ValueError as error:
            errors.append(f"invalid tool call: {error}")
            continue
        if len(calls) == max_calls:
            errors.append(f"invalid tool call: more than {max_calls} calls in one turn; {call.name} was not run")
        else:
            calls.append(call)
    if text.count("<tool_call>") > text.count("</tool_call>"):
        errors.append("invalid tool call: <tool_call> without a closing </tool_call>")
    return calls, errors


def _parse_block(block: str) -> ToolCall:
    try:
        value = json.loads(block)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise ValueError('expected {"name": <function-name>, "arguments": {...}}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models emit the arguments object as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ValueError(f"arguments of {value['name']} are not a JSON object") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments of {value['name']} must be a JSON object")
    return ToolCall(value["name"], arguments)


def truncate(text: str, limit: int, side: str) -> str:
    """verl's tool_response_truncate_side: keep `limit` characters from the left, the right or both ends."""
    if len(text) <= limit:
        return text
    marker = "...(truncated)"
    if side == "left":
        return text[:limit] + marker
    if side == "right":
        return marker + text[-limit:]
    half = limit // 2
    return text[:half] + marker + text[len(text) - (limit - half) :]


class SegmentRenderer:
    """Token ids of the messages a turn adds after the model's last (eos-terminated) turn; see the module doc."""

    def __init__(self, tokenizer: Any, template_kwargs: dict | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs or {}

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **self.template_kwargs
        )

    def segment(self, conversation: list[dict], new: list[dict], eos_text: str) -> list[int]:
        """`conversation` ends with the assistant turn the model just finished with the token `eos_text`; `new`
        are the observations (tool or user messages). The segment runs to the next assistant header. An eos the
        template never writes (e.g. <|endoftext|> under ChatML) ends the turn's content: the template's own turn
        end then opens the segment."""
        head = self.render(conversation[:-1], generation_prompt=True)
        before = self.render(conversation, generation_prompt=False)
        after = self.render(conversation + new, generation_prompt=True)
        end = len(head) + len(conversation[-1]["content"])  # where the sampled text ends
        if not before.startswith(head + conversation[-1]["content"]) or not after.startswith(before[:end]):
            raise ValueError(
                "the chat template does not render a conversation as a prefix of its continuation "
                "(it rewrites earlier turns); multi-turn rollouts need one that appends"
            )
        if eos_text and before.startswith(eos_text, end):
            end += len(eos_text)
        return list(self.tokenizer(after[end:], add_special_tokens=False)["input_ids"])
