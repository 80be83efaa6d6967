"""The PEFT adapter directory: what dagrl writes loads in peft.PeftModel.from_pretrained and computes the model merged
by hand; it reads back as the same adapter; malformed adapters fail by name before anything is written."""

import json

import pytest
import torch
from lora_helpers import logits, merged_by_hand, random_adapter
from tiny_models import load_hf, make_model_dir

from dagrl.engine.lora import LoraAdapter
from dagrl.engine.lora_peft import merge_state_dict, read_peft_dir, write_peft_dir


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("base"), "llama")


def test_peft_loads_the_directory_and_computes_the_hand_merged_model(base_dir, tmp_path):
    import peft  # a test requirement (setup.py)

    base = load_hf(base_dir)
    adapter = random_adapter(base, rank=4, alpha=8.0, targets=("q_proj", "v_proj", "gate_proj", "down_proj"))
    write_peft_dir(adapter, tmp_path / "adapter", str(base_dir))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8.0
    assert config["task_type"] == "CAUSAL_LM" and config["bias"] == "none"
    assert config["base_model_name_or_path"] == str(base_dir)
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    want = logits(merged_by_hand(base, adapter), ids)
    assert not torch.allclose(logits(base, ids), want, atol=1e-3)  # the adapter changes the model
    wrapped = peft.PeftModel.from_pretrained(load_hf(base_dir), str(tmp_path / "adapter")).eval()
    torch.testing.assert_close(logits(wrapped, ids), want, rtol=0, atol=2e-5)  # fp32 floor: PEFT adds x·Aᵀ·Bᵀ
    # PEFT's own merge writes the same weights as dagrl's
    merged = merge_state_dict(dict(load_hf(base_dir).state_dict()), adapter)
    for name, weight in wrapped.merge_and_unload().state_dict().items():
        torch.testing.assert_close(weight, merged[name], rtol=0, atol=1e-6)


def test_a_written_directory_reads_back_as_the_same_adapter(base_dir, tmp_path):
    adapter = random_adapter(load_hf(base_dir), rank=2, alpha=3.0, targets=("o_proj", "up_proj"))
    back = read_peft_dir(write_peft_dir(adapter, tmp_path / "a", "base"))
    assert (back.rank, back.alpha, back.target_modules) == (2, 3.0, ("o_proj", "up_proj"))
    assert back.tensors.keys() == adapter.tensors.keys()
    assert all(torch.equal(back.tensors[k], adapter.tensors[k]) for k in adapter.tensors)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_merge_changes_only_the_adapted_weights(base_dir):
    base = load_hf(base_dir)
    adapter = random_adapter(base, targets=("k_proj",))
    state = dict(base.state_dict())
    merged = merge_state_dict(state, adapter)
    changed = {name for name in state if merged[name] is not state[name]}
    assert changed == {f"model.layers.{i}.self_attn.k_proj.weight" for i in range(2)}
    assert adapter.scaling == 2.0


def _broken(adapter: LoraAdapter, **change) -> LoraAdapter:
    return LoraAdapter(**{**adapter.__dict__, **change})


def test_malformed_adapters_fail_by_name_before_writing(base_dir, tmp_path):
    adapter = random_adapter(load_hf(base_dir), targets=("q_proj",))
    a_name = next(k for k in adapter.tensors if k.endswith("lora_A.weight"))
    cases = {
        "lora_A.weight only": _broken(
            adapter, tensors={k: v for k, v in adapter.tensors.items() if k != a_name.replace("_A", "_B")}
        ),
        "with rank=3": _broken(adapter, rank=3),
        "outside target_modules": _broken(adapter, target_modules=("k_proj",)),
        "is not named": _broken(adapter, tensors={**adapter.tensors, "model.layers.0.q_proj.weight": torch.zeros(1)}),
    }
    for words, bad in cases.items():
        with pytest.raises((KeyError, ValueError), match=words):
            write_peft_dir(bad, tmp_path / "out", "base")
        assert not (tmp_path / "out").exists()
    state = {k: v for k, v in load_hf(base_dir).state_dict().items() if "layers.1." not in k}
    with pytest.raises(KeyError, match="model.layers.1.self_attn.q_proj.weight"):
        merge_state_dict(state, adapter)
