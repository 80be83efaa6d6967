"""The reward manager: decodes responses, scores each with a rule or custom function, and places the score on the
last valid response token (`token_level_scores`).

Failures are never silent. A scorer that raises, returns something that is not a number, or runs past
`timeout_s` is counted in `reward/errors` (timeouts also in `reward/timeouts`); then either the sample scores 0
and one warning names the first failure (`on_error="zero"`), or the run stops with a RunError naming the
scorer and the sample (`on_error="raise"`). A scorer that calls sys.exit stops the run under either policy: it
asked the process to end, and a SystemExit escaping here would end the trainer with the scorer's exit code (0
for a bare sys.exit()), as if the run had finished. A step whose every response failed is the reward node's to
stop (dagrl/nodes/common.py: it sums failures over ranks): zeros there would train on nothing.

Timeouts. In the main thread a per-sample real-time timer (`signal.setitimer` + SIGALRM) interrupts the scorer:
this stops pure-Python loops and sleeps at once. Its limits: a scorer blocked inside one long C call (a huge regex
backtrack, a C extension) is only interrupted when that call returns, and a scorer that sets its own SIGALRM timer
(e.g. math-verify's default timeouts) replaces ours for its duration. Off the main thread (signals cannot be used
there) each sample runs in a helper thread and a timed-out one gets an asynchronous exception, which stops
pure-Python code but not a thread blocked in C (it is then left running and a warning says so).
"""

from __future__ import annotations

import ctypes
import inspect
import logging
import math
import numbers
import os
import signal
import threading
import time
from collections import defaultdict
from functools import partial
from typing import Any, Callable

import torch

from dagrl.config.errors import RunError
from dagrl.data.batch import Batch

logger = logging.getLogger(__name__)

KINDS = ("naive", "dapo")
ON_ERROR = ("zero", "raise")


class ScorerTimeout(BaseException):
    """Raised inside a scorer that ran too long. A BaseException, so a scorer's `except Exception` cannot eat it."""


class BadScore(ValueError):
    """A scorer's return value that is not a score (a str, None, a dict without 'score', NaN)."""


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def scorer_name(function: Callable | None) -> str:
    """How messages name the scorer: the user's function and its file, or the built-in rule scorers."""
    if function is None:
        return "the built-in reward scorer"
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or repr(function)
    try:
        where = inspect.getsourcefile(function) or inspect.getfile(function)
    except TypeError:  # a builtin, a callable object: its module is the best name left
        where = getattr(function, "__module__", None)
    return (
        f"reward function {name} in {os.path.abspath(where)!r}"
        if where and os.path.sep in where
        else f"reward function {name}" + (f" of module {where}" if where else "")
    )


class _MainThreadTimer:
    """Arms SIGALRM per sample; installed once per batch, restoring any earlier handler and pending timer."""

    def __enter__(self) -> "_MainThreadTimer":
        self._old_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        self._old_delay, self._old_interval = signal.setitimer(signal.ITIMER_REAL, 0)
        self._entered_at = time.monotonic()
        return self

    @staticmethod
    def _on_alarm(signum: int, frame: Any) -> None:
        raise ScorerTimeout()

    def call(self, function: Callable[[], Any], timeout_s: float | None) -> Any:
        if not timeout_s:
            return function()
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return function()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def __exit__(self, *exc: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old_handler)
        if self._old_delay > 0:  # someone else's timer was pending: give it back what is left of it
            left = max(self._old_delay - (time.monotonic() - self._entered_at), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, self._old_interval)


class _ThreadTimer:
    """Off the main thread: runs each sample in a helper thread and interrupts it on timeout."""

    def __enter__(self) -> "_ThreadTimer":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def call(self, function: Callable[[], Any], timeout_s: float | None) -> Any:
        if not timeout_s:
            return function()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = function()
            except BaseException as error:  # handed to the caller below, which counts or raises it
                outcome["error"] = error

        worker = threading.Thread(target=run, name="dagrl-reward-scorer", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(ScorerTimeout))
            worker.join(0.5)
            if worker.is_alive():
                logger.warning("a timed-out reward scorer thread is blocked in C code and keeps running")
            raise ScorerTimeout()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]


class RewardManager:
    """Scores a batch of responses: `manager(batch, tokenizer) -> (token_level_scores [B, R], metrics)`."""

    def __init__(
        self,
        kind: str = "naive",
        compute_score: Callable | None = None,
        reward_kwargs: dict[str, Any] | None = None,
        timeout_s: float | None = 10.0,
        on_error: str = "zero",
        overlong_buffer: dict[str, Any] | None = None,
        max_response_length: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"reward_model.reward_manager={kind!r} is not one of {KINDS}")
        if on_error not in ON_ERROR:
            raise ValueError(f"reward on_error={on_error!r} is not one of {ON_ERROR}")
        if timeout_s is not None and timeout_s < 0:
            raise ValueError(f"reward timeout_s must be >= 0 (0 or None: no timeout), got {timeout_s}")
        self.scorer = scorer_name(compute_score)
        if compute_score is None:
            from dagrl.reward.scorers import default_compute_score

            compute_score = default_compute_score
        self.kind = kind
        self.compute_score = compute_score
        self.reward_kwargs = dict(reward_kwargs or {})
        self.timeout_s = timeout_s
        self.on_error = on_error
        self.max_response_length = max_response_length
        self.overlong_buffer = self._check_overlong_buffer(overlong_buffer) if kind == "dapo" else None
        # the last score_batch's first failure ("on sample i (...) raised ..."), None when every sample scored
        self.first_failure: str | None = None

    @staticmethod
    def _check_overlong_buffer(config: dict[str, Any] | None) -> dict[str, Any] | None:
        if not config or not config.get("enable", False):
            return None
        length, factor = config.get("len"), config.get("penalty_factor")
        if not isinstance(length, numbers.Integral) or length <= 0:
            raise ValueError(f"reward_model.overlong_buffer.len must be a positive integer, got {length!r}")
        if not isinstance(factor, numbers.Real) or factor < 0:
            raise ValueError(f"reward_model.overlong_buffer.penalty_factor must be >= 0, got {factor!r}")
        return {"len": int(length), "penalty_factor": float(factor)}

    # ---- scoring ---------------------------------------------------------------------------------
    def __call__(self, batch: Batch, tokenizer: Any) -> tuple[torch.Tensor, dict[str, float]]:
        token_level_scores, metrics, _ = self.score_batch(batch, tokenizer)
        return token_level_scores.to(batch["responses"].device), metrics

    def score_batch(
        self, batch: Batch, tokenizer: Any
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, torch.Tensor]]:
        """`__call__`'s result, on the CPU, plus per-response values [B] (verl's reward_extra_info): `score`, the
        scorer's score before overlong shaping; `acc`, the scorer's `acc` when it returns a dict with one, else its
        score (the built-in rule scorers score 1 for a correct answer); `failed`, 1 where the sample failed (its
        score and acc are 0)."""
        responses, response_mask = batch["responses"], batch["response_mask"]
        size, width = responses.shape
        valid = response_mask.bool().cpu()
        lengths = valid.sum(dim=-1)
        response_ids = responses.cpu()
        # a multi-turn trajectory is scored on its last assistant turn (dagrl/agent/loop.py), never on tool output
        texts = batch.get("solution_str")
        if texts is None:
            # rows as tensors: transformers turns each with one tolist(); a list of ints it checks element by element
            # in Python (256 x 1,024 tokens: 0.074 s of decoding became 0.058 s on a CPU here)
            texts = tokenizer.batch_decode([response_ids[i][valid[i]] for i in range(size)], skip_special_tokens=True)
        extra_infos = batch.get("extra_info")

        scores = torch.zeros(size, dtype=torch.float32)
        acc = torch.full((size,), float("nan"))
        extra_values: dict[str, list[float]] = defaultdict(list)
        failures: list[tuple[int, BaseException]] = []
        timeouts = 0
        timer = _MainThreadTimer() if threading.current_thread() is threading.main_thread() else _ThreadTimer()
        with timer:
            for i in range(size):
                data_source = batch["data_source"][i]
                extra_info = extra_infos[i] if extra_infos is not None else None
                try:
                    ground_truth = batch["reward_model"][i]["ground_truth"]  # a row without one is a sample error
                    result = timer.call(
                        partial(
                            self.compute_score, data_source, texts[i], ground_truth, extra_info, **self.reward_kwargs
                        ),
                        self.timeout_s,
                    )
                    scores[i] = self._score_of(result, extra_values)
                    if isinstance(result, dict) and isinstance(result.get("acc"), numbers.Real):
                        acc[i] = float(result["acc"])
                except SystemExit as error:  # a BaseException: `except Exception` would let it end the trainer
                    code = "" if error.code is None else _show(error.code)
                    raise RunError(
                        f"{self.scorer} called sys.exit({code}) on sample {i} (data_source "
                        f"{data_source!r}); a reward function returns a "
                        f"score and never exits the trainer: remove the sys.exit()/exit() call (raise "
                        f"an exception to fail one sample)"
                    ) from error
                except (Exception, ScorerTimeout) as error:
                    timeouts += isinstance(error, ScorerTimeout)
                    if self.on_error == "raise":
                        raise RunError(
                            f"{self.scorer} {self._failure_message(i, data_source, error)}" + self._fix(error)
                        ) from error
                    failures.append((i, error))
        metrics: dict[str, float] = {"reward/errors": float(len(failures)), "reward/timeouts": float(timeouts)}
        self.first_failure = None
        if failures:
            index, error = failures[0]
            self.first_failure = self._failure_message(index, batch["data_source"][index], error)
            logger.warning(
                "%d of %d responses failed scoring (%d timed out) and score 0; first: %s %s",
                len(failures),
                size,
                timeouts,
                self.scorer,
                self.first_failure,
            )
        for key, values in extra_values.items():
            metrics[f"reward/{key}/mean"] = float(sum(values) / len(values))
        failed = torch.zeros(size, dtype=torch.float32)
        failed[[index for index, _ in failures]] = 1.0
        rows = {"score": scores.clone(), "acc": torch.where(acc.isnan(), scores, acc), "failed": failed}
        if self.overlong_buffer is not None:
            penalties = self._overlong_penalties(lengths, width)
            scores += penalties
            metrics["reward/overlong_penalty/mean"] = float(penalties.mean()) if size else 0.0
            metrics["reward/overlong_ratio"] = float((penalties < 0).float().mean()) if size else 0.0

        token_level_scores = torch.zeros((size, width), dtype=torch.float32)
        # The last valid token carries the score; a response with no valid token keeps it at position 0 (masked
        # out of the loss, but still in the sequence-level sum that advantages use).
        positions = torch.arange(width).expand(size, width)
        last_valid = torch.where(valid, positions, torch.zeros_like(positions)).max(dim=-1).values
        token_level_scores[torch.arange(size), last_valid] = scores
        return token_level_scores, metrics, rows

    def _score_of(self, result: Any, extra_values: dict[str, list[float]]) -> float:
        """The float score of one scorer result; numeric extra keys of a dict result become metrics."""
        if isinstance(result, dict):
            if "score" not in result:
                raise BadScore(f"returned a dict without a 'score' key (keys {sorted(map(str, result))})")
            for key, value in result.items():
                if key != "score" and isinstance(value, numbers.Real):
                    extra_values[key].append(float(value))
            result = result["score"]
        if not isinstance(result, numbers.Real):
            raise BadScore(
                f"returned {_show(result)} (a {type(result).__name__}), not a float or a dict with a 'score' key"
            )
        score = float(result)
        if not math.isfinite(score):
            raise BadScore(f"returned a non-finite score {score}")
        return score

    def all_failed_message(self, total: int, step: int) -> str:
        """The RunError of a step whose every response failed scoring under on_error=zero (nodes/common.py)."""
        return (
            f"{self.scorer} failed on all {total} responses of step {step}, first {self.first_failure}; "
            f"reward_model.on_error=zero scores occasional failures 0, but a step with no score trains "
            f"nothing: fix the scorer (custom_reward_function.path/name)"
        )

    @staticmethod
    def _fix(error: BaseException) -> str:
        """What the user can do about a failure that stops the run (reward_model.on_error=raise)."""
        first = (
            "raise reward_model.timeout_s or speed up the scorer"
            if isinstance(error, ScorerTimeout)
            else "fix the scorer (custom_reward_function.path/name, or the built-in one for this data_source)"
        )
        return f"; {first}, or set reward_model.on_error=zero to score such responses 0 and count them"

    def _failure_message(self, index: int, data_source: str, error: BaseException) -> str:
        if isinstance(error, ScorerTimeout):
            what = f"timed out after {self.timeout_s} s (the reward timeout)"
        elif isinstance(error, BadScore):
            what = str(error)
        else:
            what = f"raised {_describe(error)}"
        return f"on sample {index} (data_source {data_source!r}) {what}"

    def _overlong_penalties(self, lengths: torch.Tensor, width: int) -> torch.Tensor:
        """DAPO's soft overlong punishment: 0 up to (max length - buffer), then linear down to -penalty_factor
        at the max length."""
        assert self.overlong_buffer is not None
        max_length = self.max_response_length or width
        buffer, factor = self.overlong_buffer["len"], self.overlong_buffer["penalty_factor"]
        exceed = lengths.float() - (max_length - buffer)
        return torch.clamp(-exceed / buffer * factor, max=0.0)
