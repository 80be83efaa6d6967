"""Pre-flight of the model directory's files (dagrl/config/model_files.py): the tokenizer's ids against
config.json vocab_size, and the safetensors shards (present, not truncated), from headers only."""

from __future__ import annotations

import json
import shutil

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.model_files import check_vocab, check_weight_files, highest_token_id


@pytest.fixture
def model(tiny_model, tmp_path):
    return shutil.copytree(tiny_model, tmp_path / "model")


def test_the_tiny_model_passes(model):
    config = json.loads((model / "config.json").read_text())
    assert highest_token_id(model)[0] == config["vocab_size"] - 1
    check_vocab(str(model), config)
    check_weight_files(str(model))


def test_a_special_token_beyond_the_vocabulary(model):
    settings = json.loads((model / "tokenizer_config.json").read_text())
    settings["added_tokens_decoder"] = {"4000": {"content": "<|tool|>", "special": True}}
    (model / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match="token ids up to 4000 .tokenizer_config.json added_tokens_decoder."):
        check_vocab(str(model), {"vocab_size": 400})


def test_no_weights_and_a_cut_header(model):
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:20])  # the header's length, then less than the header
    with pytest.raises(ConfigError, match="shorter than its own"):
        check_weight_files(str(model))
    weights.unlink()
    with pytest.raises(ConfigError, match="no \\*.safetensors"):
        check_weight_files(str(model))
