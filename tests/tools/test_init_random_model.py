"""scripts/init_random_model.py: tiny models of every family load with transformers and have the planned size;
large presets are checked by config only; --tokenizer sizes the vocabulary to the copied tokenizer."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dagrl.plan import presets
from dagrl.plan.model import ModelShape
from tests.helpers import make_tiny_tokenizer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "init_random_model.py"


def load_script():
    spec = importlib.util.spec_from_file_location("init_random_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", presets.FAMILIES)
def test_tiny_model_of_each_family_loads(family, tmp_path):
    from transformers import AutoModelForCausalLM

    count = load_script().build(family, "tiny", str(tmp_path), num_layers=3, seed=1, dtype="fp32")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    assert model.config.model_type == family and model.config.num_hidden_layers == 3
    assert sum(p.numel() for p in model.parameters()) == count
    assert count == ModelShape.from_hf(json.loads((tmp_path / "config.json").read_text())).total_params()
    assert model.dtype == torch.float32
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 128) and torch.isfinite(logits).all()


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    build = load_script().build
    weights = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        build("qwen3", "tiny", str(tmp_path / name), seed=seed, dtype="fp32")
        from safetensors.torch import load_file

        weights[name] = load_file(str(tmp_path / name / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(weights["a"][key], weights["b"][key])
    assert not torch.equal(weights["a"][key], weights["c"][key])


@pytest.mark.parametrize(
    "family,size,expected",
    [
        (
            "qwen3",
            "1.7b",
            dict(
                hidden_size=2048,
                intermediate_size=6144,
                num_hidden_layers=28,
                num_attention_heads=16,
                num_key_value_heads=8,
                head_dim=128,
                tie_word_embeddings=True,
            ),
        ),
        (
            "qwen3",
            "8b",
            dict(
                hidden_size=4096,
                intermediate_size=12288,
                num_hidden_layers=36,
                num_attention_heads=32,
                num_key_value_heads=8,
                head_dim=128,
                tie_word_embeddings=False,
                vocab_size=151936,
            ),
        ),
        (
            "qwen3_moe",
            "30b-a3b",
            dict(
                hidden_size=2048,
                moe_intermediate_size=768,
                num_hidden_layers=48,
                num_attention_heads=32,
                num_key_value_heads=4,
                num_experts_per_tok=8,
                num_local_experts=128,
                norm_topk_prob=True,
            ),
        ),
    ],
)
def test_large_presets_by_config_only(family, size, expected, tmp_path):
    """The real checkpoints' shapes; nothing the size of the model is allocated (config.json only)."""
    count = load_script().build(family, size, str(tmp_path), config_only=True)
    config = json.loads((tmp_path / "config.json").read_text())
    assert {key: config.get(key, config.get("num_experts")) for key in expected} == expected
    assert not list(tmp_path.glob("*.safetensors"))
    assert count == ModelShape.from_hf(config).total_params()


def test_cli_with_tokenizer_and_bf16(tmp_path, caplog):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = make_tiny_tokenizer(str(tmp_path / "tok"))
    out = tmp_path / "model"
    caplog.set_level("INFO", logger="init_random_model")
    load_script().main(
        [
            "--family",
            "llama",
            "--size",
            "tiny",
            "--out",
            str(out),
            "--num-layers",
            "1",
            "--tokenizer",
            str(tmp_path / "tok"),
            "--dtype",
            "bf16",
        ]
    )
    assert "wrote llama tiny" in caplog.text
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer) and model.dtype == torch.bfloat16
    assert model.config.eos_token_id == tokenizer.eos_token_id
    question = "What is 7 + 12?"
    assert AutoTokenizer.from_pretrained(out)(question)["input_ids"] == tokenizer(question)["input_ids"]


def test_cli_rejects_a_size_the_family_does_not_have(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--family", "qwen3_moe", "--size", "8b", "--out", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown size '8b' for qwen3_moe" in proc.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without a GPU gives")
def test_cli_names_the_device_flag_when_there_is_no_gpu(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--family",
            "qwen3",
            "--size",
            "tiny",
            "--out",
            str(tmp_path / "m"),
            "--device",
            "cuda",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--device cuda: no CUDA device on this machine; use --device cpu" in proc.stderr
    assert not (tmp_path / "m").exists()
