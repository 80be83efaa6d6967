"""The hf rollout: layout of its output, shared-prefix prefill, seeding, and loud weight-sync failures."""

import pytest
import torch

from dagrl.data.dataset import PromptDataset
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.sequences import response_mask_from_tokens


@pytest.fixture(scope="module")
def setup(tiny_model, tiny_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    data = PromptDataset([tiny_data["train"]], tokenizer, max_prompt_length=32)
    rollout = HFRollout(str(tiny_model), [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.device("cpu"))
    return tokenizer, data, rollout


def test_response_mask_covers_up_to_first_eos():
    tokens = torch.tensor([[5, 9, 2, 7, 2], [5, 6, 7, 8, 9], [2, 1, 1, 1, 1]])
    assert response_mask_from_tokens(tokens, [2]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_layout_and_shared_prefix_equals_repeated_prompts(setup):
    tokenizer, data, rollout = setup
    prompts = data.rows([0, 1, 2])
    greedy = SamplingSpec(n=3, do_sample=False, response_length=5)
    out = rollout.generate(prompts, greedy, seed=0)
    assert len(out) == 9 and out["responses"].shape == (9, 5)
    assert out["input_ids"].shape == (9, 32 + 5)
    assert torch.equal(out["input_ids"][:, 32:], out["responses"])
    assert torch.equal(out["attention_mask"][:, 32:], out["response_mask"].to(out["attention_mask"].dtype))
    assert list(out["index"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # greedy samples of one prompt are identical, and equal to generating from a repeated prompt batch
    single = rollout.generate(prompts.repeat_interleave(3), SamplingSpec(n=1, do_sample=False, response_length=5), 0)
    assert torch.equal(out["responses"], single["responses"])
    # tokens after the first eos are padding
    assert (out["responses"][out["response_mask"] == 0] == tokenizer.pad_token_id).all()


def test_sampling_is_seeded(setup):
    _, data, rollout = setup
    spec = SamplingSpec(n=4, temperature=1.0, response_length=5)
    first = rollout.generate(data.rows([0, 1]), spec, seed=11)["responses"]
    again = rollout.generate(data.rows([0, 1]), spec, seed=11)["responses"]
    other = rollout.generate(data.rows([0, 1]), spec, seed=12)["responses"]
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_load_weights_changes_output_and_rejects_bad_names_and_shapes(setup):
    _, data, rollout = setup
    params = {name: p.detach().clone() for name, p in rollout.model.named_parameters()}
    greedy = SamplingSpec(n=1, do_sample=False, response_length=5)
    before = rollout.generate(data.rows([0, 1, 2, 3]), greedy, seed=0)["responses"]
    changed = [(name, tensor + 0.5 * torch.randn_like(tensor)) for name, tensor in params.items()]
    metrics = rollout.load_weights(iter([changed[:3], changed[3:]]))
    assert metrics["perf/weight_sync_gb"] > 0
    assert not torch.equal(before, rollout.generate(data.rows([0, 1, 2, 3]), greedy, seed=0)["responses"])
    with pytest.raises(KeyError, match="model.nope"):
        rollout.load_weights(iter([[("model.nope", torch.zeros(1))]]))
    name, tensor = changed[0]
    with pytest.raises(ValueError, match=name):
        rollout.load_weights(iter([[(name, tensor[:1])]]))
    with pytest.raises(RuntimeError, match="stale"):
        rollout.load_weights(iter([changed[:2]]))
    rollout.load_weights(iter([list(params.items())]))  # restore for other tests
