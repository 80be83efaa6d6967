"""The multi-turn loop: one loop over the rollout engines' request level, used by `hf` and `vllm` alike.

Every trajectory (a prompt's sample) is a request at a time: the prompt plus everything after it so far, with the
response budget that is left. When an engine finishes a turn, the turn's text is parsed for tool calls (hermes);
the calls of every trajectory that finished in that engine step run concurrently (`max_parallel_calls` per turn,
`tool_timeout_s` per call), or the sample's interaction answers (verl's interaction: feedback, a score, whether to
stop). The observations' token segment is appended (never sampled: `response_mask` 0) and the trajectory is
re-submitted; the others keep decoding. Calls run on the tools' own event loop in a thread, so the engine goes on
decoding while they work: a trajectory's observations join at the engine step `tool_overlap_steps` after its
turn ended (the engine waits there for calls not yet done; 0: it waits for each step's calls at once). Trajectories
leave when a turn has no call and no interaction continues it, when `max_assistant_turns` / `max_user_turns` are
used up, or when the response budget (`data.max_response_length`, counted over every token after the prompt) runs
out (`truncated`).

Observations join at engine steps fixed by when their turn ended, never by how long the calls took, so with
deterministic tools a seeded run samples the same trajectories again (and a resumed run continues exactly), for
any `tool_overlap_steps`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
import time
import uuid
from typing import Any, Callable


from dagrl.agent.prompting import SegmentRenderer, ToolCall, parse_calls, truncate, with_tools
from dagrl.agent.registry import maybe_await
from dagrl.data.batch import Batch
from dagrl.agent.trajectory import Trajectory, trajectory_batch, trajectory_metrics
from dagrl.engine.rollout.interface import Completion, SamplingSpec

logger = logging.getLogger(__name__)


async def _contained(coroutine) -> Any:
    """`coroutine`, with a SystemExit or KeyboardInterrupt from user code (a tool, an interaction) turned into an
    error the waiting thread re-raises: escaping, they would stop the tools' event loop and leave it waiting."""
    try:
        return await coroutine
    except (SystemExit, KeyboardInterrupt) as error:
        raise RuntimeError(
            f"a tool or interaction raised {type(error).__name__}({error}) in the multi-turn loop"
        ) from error


class AgentLoop:
    """Built once per run from `actor_rollout_ref.rollout.multi_turn` and the loaded tools and interactions."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        tools: dict[str, Any],
        interactions: dict[str, Any],
        template_renders_tools: bool,
    ) -> None:
        self.config, self.tokenizer = config, tokenizer
        self.tools, self.interactions = tools, interactions
        self.schemas = [tool.get_openai_tool_schema() for tool in tools.values()]
        self.renders_tools = template_renders_tools
        _, template_kwargs = with_tools([], self.schemas, template_renders_tools)
        self.renderer = SegmentRenderer(tokenizer, template_kwargs)
        self.eos_token_ids: set[int] = set()
        self.events = asyncio.new_event_loop()  # the tools' loop (tools may keep state bound to it), in a thread
        self._thread: threading.Thread | None = None
        self.tool_wait = 0.0  # seconds the engine stood waiting for calls, since the last rollout began

    # ---- one rollout --------------------------------------------------------------------------------
    def generate(
        self, engine: Any, prompts: Batch, sampling: SamplingSpec, seed: int, response_length: int
    ) -> tuple[Batch, dict[str, float]]:
        """n trajectories per prompt, rows grouped by prompt (as `generate` orders them). A row's budget over all its
        turns is its own response limit (`sampling.limit(row)`), `response_length` at most."""
        self.eos_token_ids = set(engine.eos_token_ids)
        trajectories = self._start(prompts, sampling, seed)
        self.tool_wait = 0.0
        self.drive(engine, trajectories, sampling)
        self._run([self._finish(t) for t in trajectories])
        metrics = {**self._metrics(trajectories), "timing_s/tool_wait": self.tool_wait}
        return self._batch(prompts, trajectories, sampling.n, response_length), metrics

    def drive(
        self,
        engine: Any,
        trajectories: list[Trajectory],
        sampling: SamplingSpec,
        enough: Callable[[], bool] | None = None,
        updates: Any = None,
    ) -> int:
        """Advance every trajectory not done until all are, or until `enough()` (partial rollout: what is in
        flight is then aborted, its turn kept in `pending`, and the calls under way answer first, so every
        trajectory stops ready for its next request). `updates`: the rollout pool's weight pushes, loaded between
        engine steps as in PartialRolloutBuffer.run. Returns the number of such loads."""
        by_id: dict[str, Trajectory] = {}

        def submit(batch: list[Trajectory]) -> None:
            requests = [t.request(sampling) for t in batch]
            by_id.update((request.id, t) for request, t in zip(requests, batch))
            engine.submit(requests)

        def hold(aborted: list[Completion]) -> list[Trajectory]:
            held = [by_id.pop(c.id) for c in aborted]
            for t, c in zip(held, aborted):
                t.pending = c
            return held

        submit([t for t in trajectories if not t.done])
        lag, step, loads = self.config.tool_overlap_steps, 0, 0
        waiting: list[tuple[int, Trajectory, concurrent.futures.Future]] = []  # (due step, ...), in order
        while True:
            stop = (enough is not None and enough()) or not (engine.in_flight() or waiting)
            if updates is None:
                if stop:
                    break
            else:
                everyone, pushed = updates.poll(stop)
                if pushed:
                    held = hold(engine.abort())
                    updates.load()
                    loads += 1
                    submit(held)
                if everyone:
                    break
            if engine.in_flight():
                finished = engine.advance()
                step += 1
                for t in (t for c in finished if (t := self._take_turn(by_id.pop(c.id), c))):
                    waiting.append((step + lag, t, self._spawn(self._act(t))))
            elif waiting:  # nothing left to decode: the next observations are due now
                step = max(step, min(due for due, *_ in waiting))
            due = [w for w in waiting if w[0] <= step]
            if due:
                waiting = [w for w in waiting if w[0] > step]
                submit([t for t, new in zip((t for _, t, _ in due), self._answers(due)) if self._observe(t, new)])
        if engine.in_flight():
            hold(engine.abort())
        for t, new in zip((t for _, t, _ in waiting), self._answers(waiting)):
            self._observe(t, new)  # the next request continues after the observation
        return loads

    def _answers(self, due: list) -> list[list[dict]]:
        start = time.perf_counter()
        answers = [future.result() for *_, future in due]
        self.tool_wait += time.perf_counter() - start
        return answers

    def _spawn(self, coroutine) -> concurrent.futures.Future:
        """Start `coroutine` on the tools' event loop (its thread is started on first use)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.events.run_forever, name="dagrl-tools", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(_contained(coroutine), self.events)

    def _run(self, coroutines: list) -> list:
        """Run `coroutines` concurrently on the tools' event loop; their results, in order."""
        return [future.result() for future in [self._spawn(c) for c in coroutines]]

    def _start(self, prompts: Batch, sampling: SamplingSpec, seed: int) -> list[Trajectory]:
        ids, mask = prompts["input_ids"], prompts["attention_mask"].bool()
        extra = prompts.get("extra_info")
        extra = [{}] * len(prompts) if extra is None else extra
        trajectories = []
        for row in range(len(prompts)):
            info = extra[row] or {}
            chat, _ = with_tools(list(prompts["raw_prompt"][row]), self.schemas, self.renders_tools)
            kwargs = dict(info.get("interaction_kwargs") or {})
            interaction = self.interactions.get(kwargs.get("name")) if kwargs else None
            if kwargs and interaction is None:
                raise ValueError(
                    f"extra_info.interaction_kwargs.name={kwargs.get('name')!r} of prompt row "
                    f"{prompts['index'][row]} is not in the interaction config "
                    f"(has {sorted(self.interactions)})"
                )
            for sample in range(sampling.n):
                trajectories.append(
                    Trajectory(
                        row,
                        sample,
                        (seed + 7919 * row + sample) & 0x7FFFFFFF,
                        tuple(ids[row][mask[row]].tolist()),
                        [dict(m) for m in chat],
                        sampling.limit(row),
                        dict(info.get("tools_kwargs") or {}),
                        interaction,
                        kwargs,
                    )
                )
        for t in trajectories:
            if t.interaction is not None:
                t.interaction_id = str(uuid.uuid4())
                self._run([maybe_await(t.interaction.start_interaction(t.interaction_id, **t.interaction_kwargs))])
        return trajectories

    def _take_turn(self, t: Trajectory, completion: Completion) -> Trajectory | None:
        """Record a finished assistant turn; the trajectory when it goes on to act (tools or interaction), else
        it is done."""
        acting = self._record_turn(t, completion)
        t.done = acting is None
        return acting

    def _record_turn(self, t: Trajectory, completion: Completion) -> Trajectory | None:
        tokens = list(completion.token_ids)
        t.pending = None
        t.ids += tokens
        t.mask += [1] * len(tokens)
        t.log_probs += list(completion.log_probs)
        t.versions += list(completion.versions)
        t.assistant_turns += 1
        eos = bool(tokens) and tokens[-1] in self.eos_token_ids
        t.last_text = self.tokenizer.decode(tokens[:-1] if eos else tokens, skip_special_tokens=True)
        t.last_eos = self.tokenizer.decode(tokens[-1:]) if eos else ""
        t.messages.append({"role": "assistant", "content": t.last_text})
        cfg = self.config
        if not eos or len(t.ids) >= t.limit:
            t.truncated = True
            return None
        if t.assistant_turns >= cfg.max_assistant_turns:
            return None
        if "<tool_call>" in t.last_text and self.tools:
            return t
        if t.interaction is not None and t.user_turns < cfg.max_user_turns:
            return t
        return None

    async def _act(self, t: Trajectory) -> list[dict]:
        """The messages answering the trajectory's last turn: one tool message per call, or the interaction's."""
        if "<tool_call>" in t.last_text and self.tools:
            calls, errors = parse_calls(t.last_text, self.config.max_parallel_calls)
            results = await asyncio.gather(*(self._call(t, call) for call in calls))
            t.tool_calls += len(calls)
            t.tool_errors += len(errors)
            limit, side = self.config.max_tool_response_length, self.config.tool_response_truncate_side
            return [{"role": "tool", "content": truncate(text, limit, side)} for text in [*results, *errors]]
        stop, text, score, _ = await maybe_await(
            t.interaction.generate_response(t.interaction_id, t.messages, **t.interaction_kwargs)
        )
        t.turn_scores.append(float(score))
        t.user_turns += 1
        return [] if stop else [{"role": "user", "content": str(text)}]

    async def _call(self, t: Trajectory, call: ToolCall) -> str:
        from dagrl.agent.tools import create_instance, execute_call

        tool = self.tools.get(call.name)
        if tool is None:
            t.tool_errors += 1
            return f"invalid tool call: no tool named {call.name!r} (available: {', '.join(sorted(self.tools))})"
        timeout = self.config.tool_timeout_s
        try:
            if call.name not in t.instances:
                create_kwargs = (t.tools_kwargs.get(call.name) or {}).get("create_kwargs", {})
                t.instances[call.name] = await create_instance(tool, None, create_kwargs)
            run = execute_call(tool, t.instances[call.name], call.arguments, {})
            if not inspect.iscoroutinefunction(tool.execute):  # a blocking tool: a thread, so the timeout holds
                run = asyncio.to_thread(asyncio.run, run)
            text, _, _ = await asyncio.wait_for(run, timeout)
            t.valid_calls += 1
            return text
        except asyncio.TimeoutError:
            t.tool_timeouts += 1
            return f"error: {call.name} timed out after {timeout} s"
        except Exception as error:  # the model's arguments broke the tool: it sees why, the metrics count it
            t.tool_errors += 1
            logger.debug("tool %s raised on %s", call.name, call.arguments, exc_info=True)
            return f"error: {call.name} raised {type(error).__name__}: {error}"

    def _observe(self, t: Trajectory, new: list[dict]) -> bool:
        """Append the observations' tokens; whether the trajectory goes on to another turn."""
        if not new:
            t.done = True
            return False
        segment = self.renderer.segment(t.messages, new, t.last_eos)
        t.messages += new
        room = t.limit - len(t.ids)
        t.ids += segment[:room]
        t.mask += [0] * len(segment[:room])
        t.log_probs += [0.0] * len(segment[:room])
        t.versions += [-1] * len(segment[:room])
        if len(segment) >= room:  # no token left for the model to answer
            t.truncated = t.done = True
            return False
        return True

    async def _finish(self, t: Trajectory) -> None:
        for name, instance in t.instances.items():
            tool = self.tools[name]
            t.tool_rewards[name] = float(await maybe_await(tool.calc_reward(instance)))
            await maybe_await(tool.release(instance))
        if t.interaction is not None:
            await maybe_await(t.interaction.finalize_interaction(t.interaction_id))

    # ---- the trained batch ----------------------------------------------------------------------------
    def _batch(self, prompts: Batch, trajectories: list[Trajectory], n: int, response_length: int) -> Batch:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        return trajectory_batch(prompts, trajectories, n, response_length, int(pad))

    _metrics = staticmethod(trajectory_metrics)
