from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import torch

from dagrl.data.batch import Batch
from dagrl.reward.manager import RewardManager

WIDTH = 24


def make_batch(
    tokenizer, texts: list[str], truths: list[str], data_source: str = "dagrl/arithmetic", end_with_eos: bool = True
) -> Batch:
    """Right-padded responses as a rollout produces them; eos (a special token) ends each one."""
    responses = torch.full((len(texts), WIDTH), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(texts), WIDTH), dtype=torch.long)
    for row, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids + ([tokenizer.eos_token_id] if end_with_eos else [])
        assert len(ids) <= WIDTH
        responses[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    return Batch(
        tensors={"responses": responses, "response_mask": mask},
        columns={
            "data_source": [data_source] * len(texts),
            "reward_model": [{"style": "rule", "ground_truth": t} for t in truths],
            "extra_info": [{"index": i} for i in range(len(texts))],
        },
    )


def test_score_sits_on_the_last_valid_token(tokenizer):
    batch = make_batch(tokenizer, ["19", "The sum is 7", "no idea", ""], ["19", "7", "3", "5"])
    scores, metrics = RewardManager("naive", None, {}, 5.0, "zero", None)(batch, tokenizer)
    assert scores.shape == (4, WIDTH) and scores.dtype == torch.float32
    lengths = batch["response_mask"].sum(-1)
    expected = torch.zeros(4, WIDTH)
    expected[0, lengths[0] - 1] = 1.0
    expected[1, lengths[1] - 1] = 1.0
    assert torch.equal(scores, expected)
    assert metrics["reward/errors"] == 0.0 and metrics["reward/timeouts"] == 0.0


def test_compute_score_gets_decoded_text_without_special_tokens_and_kwargs(tokenizer):
    calls = []

    def compute_score(data_source, solution_str, ground_truth, extra_info, bonus):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        return {"score": bonus, "acc": 1.0, "pred": solution_str}

    batch = make_batch(tokenizer, ["What is 7 + 12?", "19"], ["19", "19"])
    scores, metrics = RewardManager("naive", compute_score, {"bonus": 0.5}, 5.0, "zero", None)(batch, tokenizer)
    assert calls[0] == ("dagrl/arithmetic", "What is 7 + 12?", "19", {"index": 0})
    assert calls[1][1] == "19"
    assert scores.sum(-1).tolist() == [0.5, 0.5]
    assert metrics["reward/acc/mean"] == 1.0 and "reward/pred/mean" not in metrics


def flaky_scorer(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "boom":
        raise KeyError("no such key")
    if solution_str == "text":
        return "not a number"
    return 1.0


def test_errors_are_counted_scored_zero_and_warned(tokenizer, caplog):
    batch = make_batch(tokenizer, ["1", "boom", "text", "2"], ["1", "1", "1", "2"])
    with caplog.at_level(logging.WARNING, logger="dagrl.reward.manager"):
        scores, metrics = RewardManager("naive", flaky_scorer, {}, 5.0, "zero", None)(batch, tokenizer)
    assert scores.sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert metrics["reward/errors"] == 2.0 and metrics["reward/timeouts"] == 0.0
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "2 of 4" in warning and "sample 1" in warning and "KeyError" in warning


def test_on_error_raise_names_the_sample(tokenizer):
    batch = make_batch(tokenizer, ["1", "boom"], ["1", "1"])
    with pytest.raises(RuntimeError, match=r"sample 1 .*KeyError") as caught:
        RewardManager("naive", flaky_scorer, {}, 5.0, "raise", None)(batch, tokenizer)
    assert isinstance(caught.value.__cause__, KeyError)


def test_unknown_data_source_error_is_counted_not_swallowed(tokenizer):
    batch = make_batch(tokenizer, ["1"], ["1"], data_source="nobody/knows")
    with pytest.raises(RuntimeError, match="custom_reward_function.path"):
        RewardManager("naive", None, {}, 5.0, "raise", None)(batch, tokenizer)
    _, metrics = RewardManager("naive", None, {}, 5.0, "zero", None)(batch, tokenizer)
    assert metrics["reward/errors"] == 1.0


def hanging_scorer(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "spin":
        while True:  # an `except Exception` inside a scorer must not be able to eat the timeout
            try:
                pass
            except Exception:
                pass
    if solution_str == "sleep":
        time.sleep(100)
    return 1.0


def timed_scoring(tokenizer, responses: list[str], timeout_s: float, on_error: str = "zero") -> tuple[Any, float]:
    """(the manager's answer or the error it raised, seconds it took) for `responses`, each with ground truth 1."""
    batch = make_batch(tokenizer, responses, ["1"] * len(responses))
    started = time.monotonic()
    try:
        outcome = RewardManager("naive", hanging_scorer, {}, timeout_s, on_error, None)(batch, tokenizer)
    except RuntimeError as error:
        outcome = error
    return outcome, time.monotonic() - started


@pytest.mark.parametrize("in_main_thread", [True, False])
def test_hanging_scorers_are_stopped(tokenizer, in_main_thread):
    outcome = {}

    def score(responses):
        outcome["result"], outcome["seconds"] = timed_scoring(tokenizer, responses, 0.3)

    def run(responses) -> float:
        if in_main_thread:
            score(responses)
        else:
            worker = threading.Thread(target=score, args=(responses,))
            worker.start()
            worker.join(60)
            assert not worker.is_alive()
        return outcome["seconds"]

    at_once = run(["1", "1", "1"])  # the same call without a hang, on this machine as loaded as it is now
    seconds = run(["spin", "1", "sleep"])
    scores, metrics = outcome["result"]
    # two hanging samples, each stopped within ~2x the timeout (not at the end of the sleep's 100 s, or never)
    assert seconds < at_once + 2 * 2 * 0.3 + 1.0, (seconds, at_once)
    assert scores.sum(-1).tolist() == [0.0, 1.0, 0.0]
    assert metrics["reward/timeouts"] == 2.0 and metrics["reward/errors"] == 2.0


def test_timeout_with_on_error_raise(tokenizer):
    _, at_once = timed_scoring(tokenizer, ["1"], 0.2, "raise")
    error, seconds = timed_scoring(tokenizer, ["sleep"], 0.2, "raise")
    assert isinstance(error, RuntimeError) and "timed out" in str(error)
    assert seconds < at_once + 2 * 0.2 + 1.0, (seconds, at_once)


def test_alarm_handler_is_restored(tokenizer):
    import signal

    before = signal.getsignal(signal.SIGALRM)
    RewardManager("naive", hanging_scorer, {}, 0.2, "zero", None)(make_batch(tokenizer, ["1"], ["1"]), tokenizer)
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_dapo_overlong_penalty_is_linear_in_the_buffer(tokenizer):
    # Length-only responses: every token is the digit "1"; the scorer gives 1.0 to all.
    def always_one(*args, **kwargs):
        return 1.0

    lengths = [10, 16, 20, 24]
    responses = torch.full((4, WIDTH), tokenizer.pad_token_id)
    mask = torch.zeros((4, WIDTH), dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        responses[row, :length] = tokenizer.convert_tokens_to_ids("1")
    batch = Batch(
        tensors={"responses": responses, "response_mask": mask},
        columns={"data_source": ["x"] * 4, "reward_model": [{"ground_truth": "1"}] * 4},
    )
    manager = RewardManager("dapo", always_one, {}, 5.0, "zero", {"enable": True, "len": 8, "penalty_factor": 1.0})
    scores, metrics = manager(batch, tokenizer)
    # max length 24, buffer 8: no penalty up to 16, then -(length - 16) / 8.
    assert scores.sum(-1).tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0])
    assert metrics["reward/overlong_ratio"] == 0.5
    naive_scores, _ = RewardManager(
        "naive", always_one, {}, 5.0, "zero", {"enable": True, "len": 8, "penalty_factor": 1.0}
    )(batch, tokenizer)
    assert naive_scores.sum(-1).tolist() == [1.0] * 4


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="reward_manager"):
        RewardManager("prime", None, {}, 1.0, "zero", None)
    with pytest.raises(ValueError, match="on_error"):
        RewardManager("naive", None, {}, 1.0, "ignore", None)
    with pytest.raises(ValueError, match="overlong_buffer.len"):
        RewardManager("dapo", None, {}, 1.0, "zero", {"enable": True, "len": 0, "penalty_factor": 1.0})


def test_row_without_ground_truth_is_a_named_sample_error(tokenizer):
    batch = make_batch(tokenizer, ["1", "2"], ["1", "2"])
    batch["reward_model"] = [{"ground_truth": "1"}, {"style": "rule"}]
    with pytest.raises(RuntimeError, match=r"sample 1 .*KeyError"):
        RewardManager("naive", None, {}, 5.0, "raise", None)(batch, tokenizer)
    scores, metrics = RewardManager("naive", None, {}, 5.0, "zero", None)(batch, tokenizer)
    assert metrics["reward/errors"] == 1.0 and scores.sum(-1).tolist() == [1.0, 0.0]


def test_dapo_uses_the_configured_max_response_length(tokenizer):
    batch = make_batch(tokenizer, ["1"], ["1"])  # a short response in a WIDTH-wide batch
    length = int(batch["response_mask"].sum())
    manager = RewardManager(
        "dapo",
        lambda *a: 0.0,
        {},
        5.0,
        "zero",
        {"enable": True, "len": 4, "penalty_factor": 2.0},
        max_response_length=length + 1,
    )
    scores, _ = manager(batch, tokenizer)
    # expected length = max - buffer = length - 3, so 3 tokens over: -3 / 4 * 2
    assert scores.sum().item() == pytest.approx(-1.5)


def exiting_scorer(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "bye":
        raise SystemExit(0)  # what sys.exit(0) raises
    return 1.0


@pytest.mark.parametrize("on_error", ["zero", "raise"])
@pytest.mark.parametrize("in_main_thread", [True, False])
def test_a_scorer_that_calls_sys_exit_stops_the_run_under_either_policy(tokenizer, on_error, in_main_thread):
    """A SystemExit escaping the manager would end the trainer with the scorer's code (0: a "finished" run)."""
    from dagrl.config.errors import RunError

    batch = make_batch(tokenizer, ["1", "bye"], ["1", "1"])
    manager = RewardManager("naive", exiting_scorer, {}, 5.0, on_error, None)
    outcome: dict = {}

    def score() -> None:
        try:
            manager(batch, tokenizer)
        except BaseException as error:  # noqa: BLE001 - the test inspects whatever escapes
            outcome["error"] = error

    if in_main_thread:
        score()
    else:
        worker = threading.Thread(target=score)
        worker.start()
        worker.join()
    error = outcome.get("error")
    assert isinstance(error, RunError), error
    assert "exiting_scorer" in str(error) and "test_manager.py" in str(error)
    assert "sys.exit(0) on sample 1" in str(error) and "remove the sys.exit" in str(error)


@pytest.mark.parametrize(
    "returned, said",
    [
        ("seven", "returned 'seven' (a str), not a float or a dict with a 'score' key"),
        (None, "returned None (a NoneType)"),
        ({"reward": 1.0}, "returned a dict without a 'score' key (keys ['reward'])"),
    ],
)
def test_a_wrong_return_type_names_the_function_the_sample_and_the_value(tokenizer, returned, said):
    def typed_scorer(data_source, solution_str, ground_truth, extra_info):
        return returned if solution_str == "odd" else 1.0

    batch = make_batch(tokenizer, ["1", "odd"], ["1", "1"])
    with pytest.raises(RuntimeError) as caught:
        RewardManager("naive", typed_scorer, {}, 5.0, "raise", None)(batch, tokenizer)
    message = str(caught.value)
    assert "reward function " in message and "typed_scorer in " in message and "on sample 1" in message
    assert said in message and "\n" not in message


def test_a_step_where_every_score_failed_stops_the_run_with_on_error_zero(tokenizer):
    """Occasional failures score 0 and the run goes on; a step with none scored stops with one line."""
    from types import SimpleNamespace

    from dagrl.config.errors import RunError
    from dagrl.nodes.reward import score

    ctx = SimpleNamespace(
        reward_fn=RewardManager("naive", flaky_scorer, {}, 5.0, "zero", None), tokenizer=tokenizer, step=3
    )
    _, metrics = score(ctx, make_batch(tokenizer, ["1", "boom", "text", "2"], ["1", "1", "1", "2"]))
    assert metrics["reward/errors"] == 2.0
    with pytest.raises(RunError) as caught:
        score(ctx, make_batch(tokenizer, ["boom", "text", "boom"], ["1", "1", "1"]))
    message = str(caught.value)
    assert "flaky_scorer in " in message and "failed on all 3 responses of step 3" in message
    assert "first on sample 0 (data_source 'dagrl/arithmetic') raised KeyError" in message and "\n" not in message


def test_scores_made_in_the_background_are_checked_for_all_failed_by_the_kl_in_reward_node(tokenizer):
    """score_rows (the background scorer) makes no collective: the node that reads the scores checks them."""
    from types import SimpleNamespace

    from dagrl.config.errors import RunError
    from dagrl.nodes.reward import apply_kl_in_reward
    from dagrl.nodes.common import score_rows

    ctx = SimpleNamespace(
        reward_fn=RewardManager("naive", flaky_scorer, {}, 5.0, "zero", None),
        tokenizer=tokenizer,
        step=5,
        shape=SimpleNamespace(layout=SimpleNamespace(model_parallel_size=1)),
        cfg=SimpleNamespace(algorithm=SimpleNamespace(use_kl_in_reward=False)),
    )
    some, _ = score_rows(ctx, make_batch(tokenizer, ["1", "boom", "text", "2"], ["1", "1", "1", "2"]))
    assert some["reward_failed"].tolist() == [0.0, 1.0, 1.0, 0.0]
    out, metrics = apply_kl_in_reward(ctx, some)
    assert "reward_failed" not in out and metrics["critic/rewards/mean"] == 0.5
    none, _ = score_rows(ctx, make_batch(tokenizer, ["boom", "text", "boom"], ["1", "1", "1"]))  # no error yet
    with pytest.raises(RunError, match="failed on all 3 responses of step 5"):
        apply_kl_in_reward(ctx, none)
