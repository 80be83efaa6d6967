"""actor_rollout_ref.rollout.ignore_eos (verl's key): every training response runs to its limit, eos or not, on the
hf rollout (batch and request level) and in vLLM's requests and unpacking; validation keeps eos."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import Request, SamplingSpec, finish_reason
from dagrl.engine.rollout.vllm_io import request_params, single_request_params, unpack_outputs
from tests.rollout.test_vllm_io import EOS, PAD, completion, left_padded_prompts

R = 6


def always_eos_rollout(tiny_model):
    """An hf rollout whose model samples nothing but eos: without ignore_eos every response is 1 token long."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rollout = HFRollout(str(tiny_model), [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.device("cpu"))
    eos = tokenizer.eos_token_id
    rollout.model.get_output_embeddings().register_forward_hook(
        lambda head, args, logits: torch.full_like(logits, float("-inf")).index_fill(-1, torch.tensor([eos]), 0.0)
    )
    return tokenizer, rollout


def prompts_of(tokenizer, texts):
    from dagrl.data.batch import Batch

    encoded = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    return Batch(
        {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]},
        {"uid": [str(i) for i in range(len(texts))]},
    )


def test_hf_batch_runs_every_response_to_its_limit_past_eos(tiny_model):
    tokenizer, rollout = always_eos_rollout(tiny_model)
    prompts = prompts_of(tokenizer, ["one two", "three"])
    stopped = rollout.generate(prompts, SamplingSpec(n=2, response_length=R), seed=0)
    assert stopped["response_mask"].sum(-1).tolist() == [1, 1, 1, 1]  # eos ends each response
    ignored = rollout.generate(prompts, SamplingSpec(n=2, response_length=R, ignore_eos=True), seed=0)
    assert ignored["response_mask"].sum(-1).tolist() == [R] * 4
    responses = ignored["responses"] if "responses" in ignored else ignored["input_ids"][:, -R:]
    assert (responses == tokenizer.eos_token_id).all()  # the eos tokens are kept and trained, as vLLM's are


def test_hf_requests_finish_for_length_not_eos(tiny_model):
    tokenizer, rollout = always_eos_rollout(tiny_model)
    ids = tuple(tokenizer("one two")["input_ids"])
    for ignore, reason, length in ((False, "stop", 1), (True, "length", R)):
        sampling = SamplingSpec(response_length=R, ignore_eos=ignore)
        rollout.submit([Request(id="a", prompt_ids=ids, sampling=sampling, seed=1)])
        done = []
        while not done:
            done = rollout.advance()
        assert (done[0].finish_reason, len(done[0].token_ids)) == (reason, length)


def test_finish_reason_and_vllm_requests_drop_the_stop_tokens():
    request = Request(id="a", prompt_ids=(5,), sampling=SamplingSpec(response_length=4, ignore_eos=True), seed=0)
    assert finish_reason(EOS, 1, request, [EOS]) is None and finish_reason(EOS, 4, request, [EOS]) == "length"
    kwargs = single_request_params(request, [EOS, 3]).as_kwargs()
    assert kwargs["stop_token_ids"] == [] and kwargs["ignore_eos"] is True
    plain = request_params(SamplingSpec(response_length=4), 1, 0, [EOS, 3], False)[0].as_kwargs()
    assert plain["stop_token_ids"] == [EOS, 3] and plain["ignore_eos"] is False


def test_vllm_unpacking_keeps_tokens_after_an_eos_in_the_mask():
    outputs = [
        SimpleNamespace(outputs=[completion(0, [9, EOS, 9, 9])]),
        SimpleNamespace(outputs=[completion(0, [EOS, 8, 8, 8])]),
    ]
    kept = unpack_outputs(
        left_padded_prompts(),
        outputs,
        SamplingSpec(n=1, response_length=4, ignore_eos=True),
        [EOS],
        PAD,
        with_log_probs=False,
    )
    assert kept["response_mask"].sum(-1).tolist() == [4, 4]
    cut = unpack_outputs(left_padded_prompts(), outputs, SamplingSpec(n=1, response_length=4), [EOS], PAD, False)
    assert cut["response_mask"].sum(-1).tolist() == [2, 1]


def test_the_training_rollout_takes_the_key():
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.nodes.common import train_sampling

    for value in (False, True):
        cfg = Cfg(compose([f"actor_rollout_ref.rollout.ignore_eos={str(value).lower()}"]))
        assert train_sampling(SimpleNamespace(cfg=cfg, shape=SimpleNamespace(response_length=R))).ignore_eos is value
