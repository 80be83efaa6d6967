"""scripts/model_merger.py's LoRA export: a LoRA adapter over its base becomes a PEFT adapter directory that peft
loads onto the base, or the merged HF model that transformers loads, both computing the model merged by hand; from a
LoRA actor checkpoint, the merged model is the actor's merged sync."""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from lora_helpers import logits, merged_by_hand, random_adapter
from tiny_models import load_hf, make_model_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import model_merger  # noqa: E402


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("base"), "qwen3")


IDS = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(3))


def test_merged_export_is_the_hand_merged_model(base_dir, tmp_path):
    base = load_hf(base_dir)
    adapter = random_adapter(base, rank=8, alpha=4.0, seed=4)
    model_merger.export_lora(adapter, base_dir, str(tmp_path / "merged"), "merged")
    merged, want = load_hf(tmp_path / "merged"), merged_by_hand(base, adapter)
    for name, weight in want.state_dict().items():
        assert torch.equal(merged.state_dict()[name], weight), name
    assert (tmp_path / "merged" / "config.json").is_file()
    assert not torch.allclose(logits(merged, IDS), logits(base, IDS), atol=1e-3)


def test_peft_export_loads_onto_the_base(base_dir, tmp_path):
    import peft

    base = load_hf(base_dir)
    adapter = random_adapter(base, rank=4, alpha=8.0, targets=("q_proj", "o_proj", "up_proj"), seed=5)
    model_merger.export_lora(adapter, base_dir, str(tmp_path / "adapter"), "peft")
    wrapped = peft.PeftModel.from_pretrained(load_hf(base_dir), str(tmp_path / "adapter")).eval()
    torch.testing.assert_close(logits(wrapped, IDS), logits(merged_by_hand(base, adapter), IDS), rtol=0, atol=2e-5)
    assert wrapped.peft_config["default"].base_model_name_or_path == str(base_dir)


def test_an_adapter_the_base_cannot_take_is_refused(base_dir, tmp_path):
    adapter = random_adapter(load_hf(make_model_dir(tmp_path / "deeper", "qwen3", num_layers=3)), seed=6)
    with pytest.raises(model_merger.MergeError, match="model.layers.2.*does not have"):
        model_merger.export_lora(adapter, base_dir, str(tmp_path / "out"), "merged")
    assert not (tmp_path / "out").exists()


def test_a_lora_checkpoint_merges_to_the_actors_merged_export_and_to_a_peft_dir(base_dir, tmp_path):
    """The merger on a LoRA actor checkpoint: the merged model is the actor's merged sync bit for bit, and the PEFT
    directory on the recorded base computes it."""
    import peft

    from dagrl.engine.lora import LoraSpec
    from engine_helpers import ADAM, actor_engine, make_batch, merge_args, run_merger, sum_loss

    actor = actor_engine(base_dir, dataclasses.replace(ADAM, lr=1e-2), lora=LoraSpec(rank=4, alpha=8.0))
    for _ in range(2):  # B leaves zero: the adapter changes the model
        actor.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    actor.save_checkpoint(str(tmp_path / "ckpt"))
    synced = {name: t for bucket in actor.export_weights(1 << 16) for name, t in bucket}
    for fmt in ("merged", "peft"):
        run_merger(*merge_args(tmp_path / "ckpt", tmp_path / fmt, "--lora_format", fmt))
    merged = load_hf(tmp_path / "merged")
    for name, tensor in synced.items():
        assert torch.equal(merged.state_dict()[name], tensor), name
    assert any(not torch.equal(t, load_hf(base_dir).state_dict()[n]) for n, t in synced.items())
    wrapped = peft.PeftModel.from_pretrained(load_hf(base_dir), str(tmp_path / "peft")).eval()
    torch.testing.assert_close(logits(wrapped, IDS), logits(merged, IDS), rtol=0, atol=2e-5)
