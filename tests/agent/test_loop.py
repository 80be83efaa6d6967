"""The multi-turn loop's own logic on a scripted engine (fixed turns per trajectory): tool turns, token identity with
the whole conversation rendered at once, masks and behaviour log-probs, truncation, timeouts, interaction turns,
scoring on the last assistant turn. The real engines drive the same loop in tests/agent/test_agentic_run.py."""

from __future__ import annotations

import asyncio
import random
import time
from types import SimpleNamespace

import pytest
import torch

from dagrl.agent.loop import AgentLoop
from dagrl.agent.prompting import hermes_tools_prompt, parse_calls, truncate, with_tools
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Completion, Progress, SamplingSpec
from tests.helpers import make_tiny_tokenizer

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "adds",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


class AddTool:
    """A verl-style tool (coroutines) that adds, counting its lifecycle calls."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay, self.created, self.released, self.calls = delay, 0, 0, []

    def get_openai_tool_schema(self) -> dict:
        return CALC

    async def create(self, instance_id=None, **kwargs):
        self.created += 1
        return f"i{self.created}", None

    async def execute(self, instance_id, parameters, **kwargs):
        self.calls.append((instance_id, parameters))
        await asyncio.sleep(self.delay)
        return str(parameters["a"] + parameters["b"]), 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.5

    async def release(self, instance_id, **kwargs):
        self.released += 1


class BlockingTool(AddTool):
    def execute(self, instance_id, parameters, **kwargs):  # a plain method that hangs
        time.sleep(self.delay)
        return "late", 0.0, {}


class ScriptedEngine:
    """Answers request `row/sample/turn` with the scripted text of that (row, turn), tokenised, then the eos."""

    def __init__(self, tokenizer, script: dict[tuple[int, int], str]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.eos_token_ids = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.pad_token_id = tokenizer.pad_token_id
        self.flight: list = []
        self.seen: list = []

    def submit(self, requests) -> None:
        self.seen += requests
        self.flight += requests

    def in_flight(self) -> int:
        return len(self.flight)

    def advance(self) -> list[Completion]:
        request = self.flight.pop(0)  # one per step: trajectories interleave
        row, _, turn = map(int, request.id.split("/"))
        tokens = self.tokenizer(self.script[row, turn], add_special_tokens=False)["input_ids"] + self.eos_token_ids
        progress = Progress(request)
        for token in tokens[: request.budget]:
            progress.token_ids.append(token)
            progress.log_probs.append(-0.25)
            progress.versions.append(0)
        return [progress.completion("stop" if len(tokens) <= request.budget else "length")]


def config(**overrides) -> SimpleNamespace:
    options = dict(
        max_assistant_turns=5,
        max_user_turns=5,
        max_parallel_calls=2,
        max_tool_response_length=256,
        tool_response_truncate_side="middle",
        tool_timeout_s=5.0,
        tool_overlap_steps=0,
    )
    return SimpleNamespace(**{**options, **overrides})


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tiny_tokenizer(str(tmp_path_factory.mktemp("tok")))


def prompts(tokenizer, questions: list[str], extra: list[dict] | None = None, tools=(CALC,)) -> Batch:
    chats = [[{"role": "user", "content": q}] for q in questions]
    texts = []
    for chat in chats:
        offered, kwargs = with_tools(chat, list(tools), False)
        texts.append(tokenizer.apply_chat_template(offered, add_generation_prompt=True, tokenize=False, **kwargs))
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        input_ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return Batch(
        {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        {
            "raw_prompt": chats,
            "index": list(range(len(ids))),
            "data_source": ["t"] * len(ids),
            "extra_info": extra or [{} for _ in ids],
            "reward_model": [{"ground_truth": "5"}] * len(ids),
        },
    )


CALL = '<tool_call>{"name": "calc", "arguments": {"a": 2, "b": 3}}</tool_call>'


def test_tool_turns_keep_sampled_tokens_and_match_the_whole_conversation_rendered(tokenizer):
    tool = AddTool()
    loop = AgentLoop(config(), tokenizer, {"calc": tool}, {}, template_renders_tools=False)
    engine = ScriptedEngine(
        tokenizer, {(0, 0): f"Let me add. {CALL}", (0, 1): "The answer is 5", (1, 0): "The answer is 7"}
    )
    batch, metrics = loop.generate(
        engine,
        prompts(tokenizer, ["What is 2 + 3?", "What is 3 + 4?"]),
        SamplingSpec(n=1, response_length=200),
        seed=1,
        response_length=200,
    )
    messages = batch["extra_info"][0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[3]["content"] == "5" and tool.calls == [("i1", {"a": 2, "b": 3})]
    assert tool.created == 1 and tool.released == 1 and batch["extra_info"][0]["tool_rewards"] == {"calc": 0.5}
    # token identity: prompt + response tokens == the whole conversation rendered and tokenised at once
    whole = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
    length = int(batch["attention_mask"][0].sum())
    assert batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist() == whole[:length]
    assert whole[length:] == tokenizer("\n", add_special_tokens=False)["input_ids"]  # the template's newline
    # the mask covers exactly the two sampled turns; behaviour log-probs exist exactly there
    turn_tokens = [
        len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in (f"Let me add. {CALL}", "The answer is 5")
    ]
    mask = batch["response_mask"][0]
    assert int(mask.sum()) == sum(turn_tokens)
    assert mask[: turn_tokens[0]].all() and not mask[turn_tokens[0]]
    assert torch.equal(batch["rollout_log_probs"][0] != 0, mask.bool())
    assert list(batch["solution_str"]) == ["The answer is 5", "The answer is 7"]
    assert metrics["multi_turn/tool_calls/mean"] == 0.5 and metrics["multi_turn/num_turns/max"] == 2
    assert metrics["multi_turn/truncated_ratio"] == 0.0 and metrics["multi_turn/tool_errors"] == 0
    # the second turn's request is the whole context so far, with the budget left
    second = [r for r in engine.seen if r.id == "0/0/1"][0]
    assert second.prompt_ids == tuple(whole[: len(second.prompt_ids)])
    assert second.sampling.response_length == 200 - (
        len(second.prompt_ids) - int(batch["attention_mask"][0, : batch["prompts"].shape[1]].sum())
    )


def test_response_budget_truncates_and_marks_the_trajectory(tokenizer):
    loop = AgentLoop(config(), tokenizer, {"calc": AddTool()}, {}, template_renders_tools=False)
    engine = ScriptedEngine(tokenizer, {(0, 0): f"{CALL}", (0, 1): "The answer is five, surely and certainly"})
    first = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1
    batch, metrics = loop.generate(
        engine, prompts(tokenizer, ["q"]), SamplingSpec(response_length=first + 14), seed=0, response_length=first + 14
    )
    assert metrics["multi_turn/truncated_ratio"] == 1.0 and batch["extra_info"][0]["truncated"]
    assert int(batch["attention_mask"][0, batch["prompts"].shape[1] :].sum()) == first + 14  # every slot used


def test_malformed_unknown_and_extra_calls_become_observations(tokenizer):
    tool = AddTool()
    loop = AgentLoop(config(max_parallel_calls=1), tokenizer, {"calc": tool}, {}, template_renders_tools=False)
    turn = f'{CALL} <tool_call>{{"name": "nope", "arguments": {{}}}}</tool_call> <tool_call>{{oops</tool_call>'
    engine = ScriptedEngine(tokenizer, {(0, 0): turn, (0, 1): "5"})
    batch, metrics = loop.generate(
        engine, prompts(tokenizer, ["q"]), SamplingSpec(response_length=300), seed=0, response_length=300
    )
    observed = [m["content"] for m in batch["extra_info"][0]["messages"] if m["role"] == "tool"]
    assert observed[0] == "5" and len(tool.calls) == 1
    assert any("more than 1 calls" in o for o in observed) and any("not JSON" in o for o in observed)
    assert metrics["multi_turn/tool_errors"] == 2


@pytest.mark.parametrize("tool_class", [AddTool, BlockingTool])
def test_a_tool_past_its_timeout_answers_timed_out(tokenizer, tool_class):
    def generate(delay: float):
        loop = AgentLoop(
            config(tool_timeout_s=0.2), tokenizer, {"calc": tool_class(delay=delay)}, {}, template_renders_tools=False
        )
        engine = ScriptedEngine(tokenizer, {(0, 0): CALL, (0, 1): "5"})
        start = time.perf_counter()
        batch, metrics = loop.generate(
            engine, prompts(tokenizer, ["q"]), SamplingSpec(response_length=300), seed=0, response_length=300
        )
        return batch, metrics, time.perf_counter() - start

    *_, at_once = generate(0.0)  # the rest of the call, on this machine as loaded as it is now
    batch, metrics, seconds = generate(3.0)
    assert seconds < at_once + 0.2 + 1.5, (seconds, at_once)  # answered at the timeout, not after the tool's 3 s
    assert batch["extra_info"][0]["messages"][3]["content"] == "error: calc timed out after 0.2 s"
    assert metrics["multi_turn/tool_timeouts"] == 1


def test_max_assistant_turns_ends_a_trajectory_that_keeps_calling(tokenizer):
    tool = AddTool()
    loop = AgentLoop(config(max_assistant_turns=2), tokenizer, {"calc": tool}, {}, template_renders_tools=False)
    engine = ScriptedEngine(tokenizer, {(0, 0): CALL, (0, 1): CALL, (0, 2): "never"})
    batch, metrics = loop.generate(
        engine, prompts(tokenizer, ["q"]), SamplingSpec(response_length=300), seed=0, response_length=300
    )
    assert len(tool.calls) == 1 and metrics["multi_turn/num_turns/max"] == 2
    assert list(batch["solution_str"]) == [CALL]


class Retry:
    """A verl-style interaction with plain methods: wrong until the answer holds the ground truth."""

    def __init__(self) -> None:
        self.started, self.finalized = {}, []

    def start_interaction(self, instance_id, ground_truth=None, name=None):
        self.started[instance_id] = ground_truth
        return instance_id

    def generate_response(self, instance_id, messages, **kwargs):
        right = self.started[instance_id] in messages[-1]["content"]
        return (True, "Correct.", 1.0, {}) if right else (False, "Wrong, try again.", 0.0, {})

    def finalize_interaction(self, instance_id, **kwargs):
        self.finalized.append(instance_id)


def test_interaction_turns_feed_back_until_right_and_are_scored_per_turn(tokenizer):
    retry = Retry()
    loop = AgentLoop(config(max_user_turns=3), tokenizer, {}, {"retry": retry}, template_renders_tools=False)
    engine = ScriptedEngine(tokenizer, {(0, 0): "4", (0, 1): "6", (0, 2): "5", (0, 3): "unused"})
    extra = [{"interaction_kwargs": {"name": "retry", "ground_truth": "5"}}]
    batch, metrics = loop.generate(
        engine,
        prompts(tokenizer, ["2+3?"], extra, tools=()),
        SamplingSpec(n=2, response_length=200),
        seed=0,
        response_length=200,
    )
    for info in batch["extra_info"]:
        assert [m["content"] for m in info["messages"] if m["role"] == "user"][1:] == ["Wrong, try again."] * 2
        assert info["turn_scores"] == [0.0, 0.0, 1.0]
    assert list(batch["solution_str"]) == ["5", "5"] and len(retry.finalized) == 2
    assert metrics["multi_turn/num_turns/mean"] == 6.0
    # the feedback is attended to but never trained on
    mask, attention = batch["response_mask"][0], batch["attention_mask"][0, batch["prompts"].shape[1] :]
    assert int(mask.sum()) == 3 * 2 and int(attention.sum()) > 6


def test_the_reward_scores_the_last_assistant_turn_only(tokenizer):
    from dagrl.reward.manager import RewardManager

    loop = AgentLoop(config(), tokenizer, {"calc": AddTool()}, {}, template_renders_tools=False)
    engine = ScriptedEngine(tokenizer, {(0, 0): CALL, (0, 1): "I do not know"})
    batch, _ = loop.generate(
        engine, prompts(tokenizer, ["2+3?"]), SamplingSpec(response_length=300), seed=0, response_length=300
    )
    seen = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append((solution_str, len(extra_info["messages"])))
        return float(solution_str.strip() == ground_truth)

    scores, _ = RewardManager(compute_score=compute_score)(batch, tokenizer)
    assert seen == [("I do not know", 5)] and float(scores.sum()) == 0.0  # the tool's "5" is not the answer
    last = int(torch.nonzero(batch["response_mask"][0])[-1])
    assert scores[0].nonzero().flatten().tolist() in ([], [last])


def test_parse_calls_strictness():
    calls, errors = parse_calls(
        'a <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> b '
        '<tool_call>{"name": "g", "arguments": "{\\"y\\": 2}"}</tool_call>',
        max_calls=4,
    )
    assert [(c.name, c.arguments) for c in calls] == [("f", {"x": 1}), ("g", {"y": 2})] and not errors
    for text, fragment in [
        ('<tool_call>{"name": "f"', "without a closing"),
        ("<tool_call>[1]</tool_call>", "expected"),
        ('<tool_call>{"name": "f", "arguments": 3}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "expected"),
    ]:
        calls, errors = parse_calls(text, max_calls=4)
        assert not calls and len(errors) == 1 and fragment in errors[0], text
    assert truncate("abcdefghij", 4, "left") == "abcd...(truncated)"
    assert truncate("abcdefghij", 4, "right") == "...(truncated)ghij"
    assert truncate("abcdefghij", 4, "middle") == "ab...(truncated)ij"


def test_tools_go_into_the_system_message_when_the_template_ignores_them():
    chat, kwargs = with_tools(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}],
        [CALC],
        template_renders_tools=False,
    )
    assert (
        not kwargs
        and chat[0]["content"].startswith("Be brief.\n\n# Tools")
        and '"name": "calc"' in chat[0]["content"]
        and chat[0]["content"].endswith(hermes_tools_prompt([CALC]))
    )
    chat, kwargs = with_tools([{"role": "user", "content": "q"}], [CALC], template_renders_tools=True)
    assert kwargs == {"tools": [CALC]} and len(chat) == 1


class SlowEngine(ScriptedEngine):
    """The scripted engine taking `step_s` per engine step, like a real decode."""

    def __init__(self, tokenizer, script, step_s: float) -> None:
        super().__init__(tokenizer, script)
        self.step_s, self.order = step_s, []

    def advance(self) -> list[Completion]:
        time.sleep(self.step_s)
        done = super().advance()
        self.order += [c.id for c in done]
        return done


class JitteryTool(AddTool):
    """Each call takes a random 0..2 x `delay`."""

    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.sleep(random.uniform(0, 2 * self.delay))
        return str(parameters["a"] + parameters["b"]), 0.0, {}


def run_overlapped(tokenizer, lag: int, tool_s: float, tool_class=AddTool):
    script = {(row, turn): CALL if turn < 2 else "The answer is 5" for row in range(4) for turn in range(3)}
    loop = AgentLoop(
        config(tool_overlap_steps=lag), tokenizer, {"calc": tool_class(delay=tool_s)}, {}, template_renders_tools=False
    )
    engine = SlowEngine(tokenizer, script, step_s=0.02)
    start = time.perf_counter()
    batch, metrics = loop.generate(
        engine, prompts(tokenizer, ["q"] * 4), SamplingSpec(n=2, response_length=300), seed=0, response_length=300
    )
    return batch, metrics, engine.order, time.perf_counter() - start


def test_tool_calls_overlap_decoding_and_the_schedule_does_not_depend_on_their_timing(tokenizer):
    """8 trajectories x 2 calls of 0.3 s: waiting at once (lag 0) costs the engine a wait per finished turn; with
    the calls' answers due 40 engine steps later, the engine decodes the others meanwhile. The order in which
    turns finish is fixed by the lag, not by how long a call took (calls of random length change nothing)."""
    base, base_metrics, _, base_s = run_overlapped(tokenizer, 0, 0.3)
    batch, metrics, order, wall = run_overlapped(tokenizer, 40, 0.3)
    for lag in (2, 40):
        orders = [run_overlapped(tokenizer, lag, 0.05, JitteryTool)[2] for _ in range(2)]
        assert orders[0] == orders[1]
    assert torch.equal(batch["input_ids"], base["input_ids"])  # the scripted engine answers the same either way
    assert metrics["multi_turn/tool_calls/mean"] == base_metrics["multi_turn/tool_calls/mean"] == 2
    assert base_metrics["timing_s/tool_wait"] > 16 * 0.3 * 0.9  # 16 calls, one engine step ending each
    assert metrics["timing_s/tool_wait"] < 0.5 * base_metrics["timing_s/tool_wait"]
    assert wall < 0.6 * base_s


class ExitingInteraction:
    """An interaction whose reply calls sys.exit(0)."""

    def start_interaction(self, instance_id, **kwargs):
        return instance_id

    def generate_response(self, instance_id, messages, **kwargs):
        raise SystemExit(0)

    def finalize_interaction(self, instance_id, **kwargs):
        return None


def test_sys_exit_in_an_interaction_is_an_error_not_a_hang_or_exit_0(tokenizer):
    loop = AgentLoop(config(), tokenizer, {}, {"bye": ExitingInteraction()}, template_renders_tools=False)
    engine = ScriptedEngine(tokenizer, {(0, 0): "The answer is 4"})
    batch = prompts(tokenizer, ["q"], extra=[{"interaction_kwargs": {"name": "bye"}}])
    with pytest.raises(RuntimeError, match=r"raised SystemExit\(0\)"):
        loop.generate(engine, batch, SamplingSpec(response_length=50), seed=0, response_length=50)
