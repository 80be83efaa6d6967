"""The rollout engines' request level (submit / advance / abort / load weights while paused): the hf decode loop
against transformers' own generate and a full forward, partial rollouts carried across a weight sync, and the vLLM
side's output bookkeeping on recorded-shape fakes (the real engine: tests/gpu/test_vllm_rollout.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dagrl.data.dataset import PromptDataset
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.hf_decode import filter_logits
from dagrl.engine.rollout.interface import Progress, Request, SamplingSpec, run_to_completion
from dagrl.engine.rollout.vllm_io import record_progress, single_request_params
from tests.rollout.test_vllm_io import completion

GREEDY = SamplingSpec(do_sample=False, response_length=6)


@pytest.fixture(scope="module")
def setup(tiny_model, tiny_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    data = PromptDataset([tiny_data["train"]], tokenizer, max_prompt_length=32)
    # eos = a token the random model emits, so that some requests stop early and leave the batch mid-flight
    rollout = HFRollout(str(tiny_model), [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.device("cpu"))
    return data, rollout


def requests(data, rows: list[int], sampling: SamplingSpec, prefix: str = "r") -> list[Request]:
    prompts = data.rows(rows)
    ids = [row[mask.bool()].tolist() for row, mask in zip(prompts["input_ids"], prompts["attention_mask"])]
    return [Request(f"{prefix}{i}", tuple(p), sampling, seed=100 + i) for i, p in enumerate(ids)]


def test_greedy_requests_match_generate_and_their_log_probs_a_full_forward(setup):
    data, rollout = setup
    batch = rollout.generate(data.rows([0, 1, 2, 3]), GREEDY, seed=0)
    done = run_to_completion(rollout, requests(data, [0, 1, 2, 3], GREEDY))
    for row, finished in enumerate(done):
        length = int(batch["response_mask"][row].sum())
        assert list(finished.token_ids) == batch["responses"][row, :length].tolist()
        assert finished.finish_reason == ("length" if length == GREEDY.response_length else "stop")
        # teacher-forced log-probs of the same tokens, one forward without cache or padding
        sequence = torch.tensor([finished.request.prompt_ids + finished.token_ids])
        logits = rollout.model(sequence).logits[0, len(finished.request.prompt_ids) - 1 : -1].float()
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(finished.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(finished.log_probs), expected, atol=1e-4)
        assert finished.versions == (0,) * length


def test_sampling_depends_on_the_request_not_on_its_batch(setup):
    data, rollout = setup
    hot = SamplingSpec(temperature=3.0, top_p=0.95, top_k=100, response_length=6)  # long, varied responses
    submitted = requests(data, [0, 1, 2, 3, 4, 5], hot)
    together = run_to_completion(rollout, submitted)
    assert max(len(c.token_ids) for c in together) > 2
    for request, finished in zip(submitted, together):
        assert run_to_completion(rollout, [request])[0].token_ids == finished.token_ids
    reseeded = run_to_completion(rollout, [Request(r.id, r.prompt_ids, hot, seed=r.seed + 50) for r in submitted])
    assert [c.token_ids for c in reseeded] != [c.token_ids for c in together]


def test_a_partial_rollout_crosses_a_weight_sync_and_is_tagged_with_both_versions(setup):
    data, rollout = setup
    straight = run_to_completion(rollout, requests(data, [4, 5, 6], GREEDY))
    rollout.submit(requests(data, [4, 5, 6], GREEDY))
    finished = [c for _ in range(2) for c in rollout.advance()]
    with pytest.raises(RuntimeError, match="requests in flight"):
        rollout.load_weights(iter([]), version=1)
    partial = rollout.abort()
    assert (
        partial
        and rollout.in_flight() == 0
        and all(c.finish_reason == "abort" and len(c.token_ids) == 2 for c in partial)
    )
    params = list(rollout.model.named_parameters())
    rollout.load_weights(iter([[(name, tensor.detach().clone()) for name, tensor in params]]), version=1)
    resumed = run_to_completion(rollout, [c.continuation() for c in partial])
    by_id = {c.id: c for c in finished + resumed}
    for original in straight:
        carried = by_id[original.id]
        # same weights: re-prefilling prompt + prefix continues exactly where the uninterrupted run went
        assert carried.token_ids == original.token_ids
        assert torch.allclose(torch.tensor(carried.log_probs), torch.tensor(original.log_probs), atol=1e-4)
        if carried in resumed:
            assert carried.versions == (0, 0) + (1,) * (len(carried.token_ids) - 2)
            assert len(carried.token_ids) <= GREEDY.response_length
    rollout.load_weights(iter([[(name, tensor.detach().clone()) for name, tensor in params]]), version=0)


def test_abort_of_some_requests_leaves_the_others_running(setup):
    data, rollout = setup
    submitted = requests(data, list(range(8)), SamplingSpec(do_sample=False, response_length=5))
    rollout.submit(submitted)
    ended = {c.id for c in rollout.advance()}
    flying = [r.id for r in submitted if r.id not in ended]
    assert len(flying) >= 2 and rollout.in_flight() == len(flying)
    aborted = rollout.abort([flying[0], "unknown"])
    assert [c.id for c in aborted] == [flying[0]] and rollout.in_flight() == len(flying) - 1
    with pytest.raises(ValueError, match="already in flight"):
        rollout.submit([r for r in submitted if r.id == flying[1]])
    rest = []
    while rollout.in_flight():
        rest += rollout.advance()
    assert sorted(c.id for c in rest) == sorted(flying[1:])
    with pytest.raises(ValueError, match="no tokens left"):
        rollout.submit([Request("full", (1, 2), GREEDY, seed=0, prefix_ids=(5,) * 6)])


def test_a_request_that_joins_mid_flight_is_prefilled_alone_and_decodes_as_it_would_alone(setup):
    # a multi-turn trajectory's next turn joins a batch still decoding: only it is prefilled, the others go on
    data, rollout = setup
    straight = run_to_completion(rollout, requests(data, [0, 1, 2], GREEDY))
    alone = run_to_completion(rollout, requests(data, [7], GREEDY, prefix="j"))[0]
    shapes = []
    hook = rollout.model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        rollout.submit(requests(data, [0, 1, 2], GREEDY))
        done = rollout.advance()
        flying = rollout.in_flight()
        assert flying >= 1
        joining = requests(data, [7], GREEDY, prefix="j")
        rollout.submit(joining)
        done += rollout.advance()
        while rollout.in_flight():
            done += rollout.advance()
    finally:
        hook.remove()
    # the first prefill (3 rows), then the joiner alone (1 row, its whole prompt) and the others one token each
    assert shapes[0][0] == 3 and shapes[1] == (1, len(joining[0].prompt_ids)) and shapes[2] == (flying, 1)
    assert all(shape[1] == 1 for shape in shapes[3:])
    by_id = {c.id: c for c in done}
    for expected in straight + [alone]:
        assert by_id[expected.id].token_ids == expected.token_ids
        assert torch.allclose(torch.tensor(by_id[expected.id].log_probs), torch.tensor(expected.log_probs), atol=1e-4)


def test_top_k_and_top_p_keep_the_most_likely_tokens():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    top_k = filter_logits(logits, SamplingSpec(top_k=2))
    assert torch.isfinite(top_k).tolist() == [[True, True, False, False, False]]
    probs = logits.softmax(-1)[0]  # 0.64, 0.24, 0.09, ...: top_p=0.7 keeps the first two (the one crossing 0.7)
    assert probs[0] < 0.7 < probs[0] + probs[1]
    assert torch.isfinite(filter_logits(logits, SamplingSpec(top_p=0.7))).tolist() == [
        [True, True, False, False, False]
    ]
    assert torch.allclose(filter_logits(logits, SamplingSpec(temperature=2.0)), logits / 2)


def test_vllm_delta_outputs_become_progress_with_versions_and_the_stop_token():
    request = Request(
        "a",
        (5, 6),
        SamplingSpec(response_length=4),
        seed=3,
        prefix_ids=(9,),
        prefix_log_probs=(-0.5,),
        prefix_versions=(0,),
    )
    params = single_request_params(request, [2])
    assert params.n == 1 and params.max_tokens == 3 and params.logprobs == 0 and params.seed == request.stream_seed
    assert request.stream_seed != request.seed  # a continuation does not replay its prefix's random stream
    progress = Progress(request)

    def output(tokens, finished, stop_reason=None, reason=None):
        out = completion(0, tokens, stop_reason, [-0.1 * (i + 1) for i in range(len(tokens))])
        out.finish_reason = reason
        return SimpleNamespace(request_id="a", finished=finished, outputs=[out])

    assert record_progress(progress, output([7], False), version=1) is None
    assert record_progress(progress, output([8], True, stop_reason=2, reason="stop"), version=2) == "stop"
    done = progress.completion("stop")
    assert done.token_ids == (9, 7, 8, 2)  # the matched stop token left out of token_ids ends the response
    assert done.versions == (0, 1, 2, 2)
    # per-step deltas; the stop token vLLM left out has none
    assert done.log_probs == pytest.approx((-0.5, -0.1, -0.1, 0.0))
