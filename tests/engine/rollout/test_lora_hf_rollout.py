"""The hf rollout's adapter-only sync: after load_adapter it holds (and samples from) exactly the weights merged by
hand, a second adapter replaces the first rather than adding to it, and a base sync keeps the adapter on top."""

import dataclasses

import pytest
import torch
from lora_helpers import merged_by_hand, random_adapter
from tiny_models import load_hf, make_model_dir

from dagrl.data.batch import Batch
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import Request, SamplingSpec


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("base"), "llama")


def rollout_of(path) -> HFRollout:
    return HFRollout(str(path), [2], 0, torch.device("cpu"), log_probs=True)


def assert_weights(rollout: HFRollout, model) -> None:
    want = dict(model.named_parameters())
    for name, param in rollout.model.named_parameters():
        assert torch.equal(param, want[name]), name


PROMPTS = Batch(
    {
        "input_ids": torch.tensor([[0, 5, 6, 7], [9, 10, 11, 12]]),
        "attention_mask": torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]),
    }
)


def test_adapter_sampling_equals_the_hand_merged_model(base_dir, tmp_path):
    base = load_hf(base_dir)
    adapter = random_adapter(base, rank=4, alpha=16.0, seed=0)
    rollout = rollout_of(base_dir)
    assert rollout.supports_adapter
    metrics = rollout.load_adapter(adapter, version=3)
    assert rollout.version == 3 and metrics["perf/weight_sync_gb"] > 0
    merged = merged_by_hand(base, adapter)
    assert_weights(rollout, merged)  # bit for bit: one fp32 formula, the same kernels after
    merged.save_pretrained(tmp_path / "merged")
    reference = rollout_of(tmp_path / "merged")
    spec = SamplingSpec(n=2, temperature=1.0, response_length=6)
    out, want = rollout.generate(PROMPTS, spec, seed=5), reference.generate(PROMPTS, spec, seed=5)
    assert torch.equal(out["responses"], want["responses"])
    assert torch.equal(out["rollout_log_probs"], want["rollout_log_probs"])
    base_out = rollout_of(base_dir).generate(PROMPTS, spec, seed=5)
    assert not torch.equal(out["rollout_log_probs"], base_out["rollout_log_probs"])  # the adapter is in effect
    # the request level samples with the adapter too, its tokens tagged with the adapter's version
    done = None
    request = Request("r", (5, 6, 7), SamplingSpec(do_sample=False, response_length=4), seed=0)
    rollout.submit([request])
    while rollout.in_flight():
        done = rollout.advance() or done
    assert done[0].versions == (3,) * len(done[0].token_ids)


def test_a_second_adapter_replaces_the_first(base_dir):
    base = load_hf(base_dir)
    rollout = rollout_of(base_dir)
    rollout.load_adapter(random_adapter(base, seed=0))
    second = random_adapter(base, rank=2, alpha=2.0, targets=("q_proj", "down_proj"), seed=1)
    rollout.load_adapter(second)
    assert_weights(rollout, merged_by_hand(base, second))  # k/v/o/gate/up are the base again, exactly


def test_a_base_sync_keeps_the_adapter_on_top(base_dir):
    base = load_hf(base_dir)
    rollout = rollout_of(base_dir)
    adapter = random_adapter(base, targets=("v_proj", "up_proj"), seed=2)
    rollout.load_adapter(adapter)
    new_base = load_hf(base_dir)
    with torch.no_grad():
        for param in new_base.parameters():
            param.add_(0.01)
    rollout.load_weights(iter([list(new_base.state_dict().items())]), version=4)
    assert rollout.version == 4
    assert_weights(rollout, merged_by_hand(new_base, adapter))


def test_a_bad_adapter_or_requests_in_flight_change_nothing(base_dir):
    base = load_hf(base_dir)
    rollout = rollout_of(base_dir)
    first = random_adapter(base, seed=0)
    rollout.load_adapter(first)
    second = random_adapter(base, targets=("q_proj",), seed=1)
    a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    unknown = {k.replace("layers.0.", "layers.7."): v for k, v in second.tensors.items() if "layers.0." in k}
    wider = {**second.tensors, a: torch.zeros(4, second.tensors[a].shape[1] + 1)}
    for tensors, error in (({**second.tensors, **unknown}, KeyError), (wider, ValueError)):
        with pytest.raises(error, match="layers.7.self_attn.q_proj.weight|B·A is"):
            rollout.load_adapter(dataclasses.replace(second, tensors=tensors))
    rollout.submit([Request("r", (5, 6), SamplingSpec(do_sample=False, response_length=4), seed=0)])
    with pytest.raises(RuntimeError, match="load_adapter with 1 requests in flight"):
        rollout.load_adapter(random_adapter(base, seed=3))
    rollout.abort()
    assert_weights(rollout, merged_by_hand(base, first))
