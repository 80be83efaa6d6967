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


def logits_of(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.arange(3, 35).reshape(2, 16)).logits


def test_peak_scales_an_untied_head_and_the_logits_by_its_factor(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    build = load_script().build
    build("qwen3", "tiny", str(tmp_path / "plain"), seed=2, dtype="fp32")
    build("qwen3", "tiny", str(tmp_path / "peaked"), seed=2, dtype="fp32", peak=30.0)
    plain, peaked = (AutoModelForCausalLM.from_pretrained(tmp_path / name) for name in ("plain", "peaked"))
    top = {name: logits_of(m).softmax(-1).max(-1).values.mean().item() for name, m in (("1", plain), ("30", peaked))}
    assert top["1"] < 0.25 and top["30"] > 0.9, top  # the same seed: one token then carries nearly all of it
    torch.testing.assert_close(logits_of(peaked), 30 * logits_of(plain), rtol=1e-4, atol=1e-4)
    weights = {name: load_file(str(tmp_path / name / "model.safetensors")) for name in ("plain", "peaked")}
    differ = [key for key, value in weights["plain"].items() if not torch.equal(value, weights["peaked"][key])]
    assert differ == ["lm_head.weight"]


def test_peak_keeps_a_tied_embedding_and_scales_the_final_norm_instead(tmp_path):
    from transformers import AutoModelForCausalLM

    plain, peaked = (presets.random_model("llama", "tiny", seed=2, tie=True) for _ in range(2))
    presets.peak_logits(peaked, 30.0)
    embedding = peaked.get_input_embeddings().weight
    assert peaked.get_output_embeddings().weight is embedding and torch.equal(
        embedding, plain.model.embed_tokens.weight
    )
    assert torch.equal(peaked.model.norm.weight, 30 * plain.model.norm.weight)
    peaked.save_pretrained(tmp_path, safe_serialization=True)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    torch.testing.assert_close(logits_of(loaded), 30 * logits_of(plain), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--peak", "0"], "--peak 0.0: the logits' scale must be > 0"),
        (["--peak", "30", "--config-only"], "--peak scales weights and --config-only writes none"),
    ],
)
def test_cli_refuses_a_peak_it_cannot_apply(tmp_path, capsys, flags, said):
    with pytest.raises(SystemExit) as exited:
        load_script().main(["--family", "qwen3", "--size", "tiny", "--out", str(tmp_path / "m"), *flags])
    assert exited.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
