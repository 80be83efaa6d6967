"""The vLLM rollout's CPU-testable parts: request building, response unpacking, the weight manifest, config.

The fakes below have the attribute shapes of vLLM 0.26's RequestOutput / CompletionOutput / Logprob; the real
engine is exercised in tests/gpu/test_vllm_rollout.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from dagrl.data.batch import Batch
from dagrl.engine.rollout import routes
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.engine.rollout.vllm_io import prompt_token_ids, request_params, request_seed, unpack_outputs
from dagrl.engine.rollout.weight_manifest import WeightManifest

EOS, PAD = 2, 0


def left_padded_prompts() -> Batch:
    ids = torch.tensor([[PAD, PAD, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    return Batch({"input_ids": ids, "attention_mask": mask}, {"uid": ["a", "b"]})


def completion(index: int, tokens: list[int], stop_reason=None, log_probs: list[float] | None = None):
    steps = None
    if log_probs is not None:
        steps = [{token: SimpleNamespace(logprob=lp)} for token, lp in zip(tokens, log_probs)]
    return SimpleNamespace(index=index, token_ids=tokens, logprobs=steps, stop_reason=stop_reason)


def test_prompts_lose_their_left_padding():
    assert prompt_token_ids(left_padded_prompts()) == [[5, 6], [7, 8, 9, 10]]


def test_request_params_map_sampling_and_seed_each_request():
    sampling = SamplingSpec(n=3, temperature=0.7, top_p=0.9, top_k=-1, do_sample=True, response_length=5)
    params = request_params(sampling, rows=2, seed=11, eos_token_ids=[EOS, 3], with_log_probs=True)
    first = params[0].as_kwargs()
    assert first["n"] == 3 and first["temperature"] == 0.7 and first["top_p"] == 0.9
    assert first["top_k"] == 0  # vLLM's "off"
    assert first["max_tokens"] == 5 and first["stop_token_ids"] == [EOS, 3] and first["logprobs"] == 0
    assert first["detokenize"] is False
    assert params[0].seed != params[1].seed and params[0].seed == request_seed(11, 0)
    assert request_params(sampling, 2, 11, [EOS], False)[1].seed == params[1].seed  # same call, same seeds


def test_greedy_request_params():
    greedy = SamplingSpec(n=1, temperature=0.7, top_p=0.5, top_k=4, do_sample=False, response_length=5)
    kwargs = request_params(greedy, 1, 0, [EOS], with_log_probs=False)[0].as_kwargs()
    assert kwargs["temperature"] == 0.0 and kwargs["top_p"] == 1.0 and kwargs["top_k"] == 0
    assert kwargs["logprobs"] is None


def test_unpack_outputs_pads_masks_and_orders_completions():
    sampling = SamplingSpec(n=2, response_length=4)
    outputs = [
        SimpleNamespace(
            outputs=[
                completion(1, [11, EOS], log_probs=[-0.5, -0.25]),
                completion(0, [12, 13, 14, 15], log_probs=[-1.0, -2.0, -3.0, -4.0]),
            ]
        ),
        # a stop token vLLM matched but did not put in token_ids still closes the response
        SimpleNamespace(
            outputs=[
                completion(0, [21], stop_reason=EOS, log_probs=[-0.1]),
                completion(1, [22, 23, 24, 25, 26], log_probs=[-1.0] * 5),
            ]
        ),
    ]
    batch = unpack_outputs(left_padded_prompts(), outputs, sampling, [EOS], PAD, with_log_probs=True)
    assert batch["responses"].tolist() == [[12, 13, 14, 15], [11, EOS, PAD, PAD], [21, EOS, PAD, PAD], [22, 23, 24, 25]]
    assert batch["response_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert list(batch["uid"]) == ["a", "a", "b", "b"]
    assert batch["input_ids"].shape == (4, 8)
    assert batch["input_ids"][1].tolist() == [PAD, PAD, 5, 6, 11, EOS, PAD, PAD]
    assert batch["position_ids"][1].tolist()[2:6] == [0, 1, 2, 3]
    log_probs = batch["rollout_log_probs"]
    assert log_probs[0].tolist() == [-1.0, -2.0, -3.0, -4.0]
    assert log_probs[1].tolist() == [-0.5, -0.25, 0.0, 0.0]
    assert math.isclose(log_probs[2, 0].item(), -0.1, rel_tol=1e-6)
    assert log_probs[2, 1].item() == 0.0  # the appended stop token has no vLLM log-prob


def test_unpack_outputs_rejects_a_short_answer():
    sampling = SamplingSpec(n=2, response_length=4)
    with pytest.raises(RuntimeError, match="expected n=2"):
        unpack_outputs(
            left_padded_prompts(),
            [SimpleNamespace(outputs=[completion(0, [1])])] * 2,
            sampling,
            [EOS],
            PAD,
            with_log_probs=False,
        )
    with pytest.raises(RuntimeError, match="1 outputs for 2 prompts"):
        unpack_outputs(left_padded_prompts(), [SimpleNamespace(outputs=[])], sampling, [EOS], PAD, False)


def test_weight_manifest_names_the_bad_tensor(tiny_model):
    manifest = WeightManifest(str(tiny_model))
    name = "model.layers.0.self_attn.q_proj.weight"
    shape = manifest.shapes[name]
    manifest.check(name, torch.empty(shape))
    with pytest.raises(ValueError, match=r"q_proj.weight has shape \(1, 1\)"):
        manifest.check(name, torch.empty(1, 1))
    with pytest.raises(KeyError, match="model.layers.9.mlp"):
        manifest.check("model.layers.9.mlp.up_proj.weight", torch.empty(shape))


def test_weight_manifest_covers_every_exported_tensor(tiny_model):
    """The actor's export stream and the manifest agree on every name and shape (what vLLM will receive)."""
    from transformers import AutoModelForCausalLM

    manifest = WeightManifest(str(tiny_model))
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    for name, param in model.named_parameters():
        manifest.check(name, param)
    assert len(manifest.shapes) == len(dict(model.named_parameters()))


def test_vllm_routes_land_on_the_columns_of_the_tokens_they_routed():
    """vLLM's routed_experts per completion: one route per token the model ran (the prompt's, then each response
    token fed back, so the last is missing). Each fake route is the token's own id: placed, every route sits on its
    token's column; padding and each response's last token are -1. A sequence short of more routes is refused."""
    sampling = SamplingSpec(n=1, response_length=4)
    prompts = left_padded_prompts()
    prompt_ids = prompt_token_ids(prompts)
    responses = [[11, 12, EOS], [21]]  # the second: vLLM left the matched stop token out of token_ids
    stops = [None, EOS]

    def ran(row: int, response: list[int]):
        tokens = prompt_ids[row] + response[:-1] if stops[row] is None else prompt_ids[row] + response
        return torch.tensor(tokens, dtype=torch.int32)[:, None, None].expand(-1, 3, 2).numpy()  # [tokens, layers, k]

    outputs = [
        SimpleNamespace(outputs=[completion(0, response, stop_reason=stop)]) for response, stop in zip(responses, stops)
    ]
    batch = unpack_outputs(prompts, outputs, sampling, [EOS], PAD, with_log_probs=False)
    placed = routes.place([ran(row, r) for row, r in enumerate(responses)], batch["attention_mask"])
    assert placed.shape == (2, 8, 3, 2) and placed.dtype == torch.int16
    routed = placed[..., 0, 0]
    assert routed.tolist() == [[-1, -1, 5, 6, 11, 12, -1, -1], [7, 8, 9, 10, 21, -1, -1, -1]]
    assert (placed == routed[..., None, None]).all()  # every layer and choice of a token placed alike
    with pytest.raises(RuntimeError, match="returned 3 routes for a sequence of 5 tokens"):
        routes.place([ran(0, responses[0])[:3], ran(1, responses[1])], batch["attention_mask"])
