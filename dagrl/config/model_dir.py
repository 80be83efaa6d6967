"""The model directory itself: config.json (read and its sizes checked), the tokenizer and chat template files,
what a directory without config.json holds instead, and the safetensors headers. Files only: neither torch nor
transformers is imported. The checks of these files against each other and the config are in model_files.py and
model_shapes.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dagrl.config.errors import ConfigError, require
from dagrl.models.families import FAMILIES, family

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit


def safetensors_header(shard: Path) -> tuple[dict | None, int, str | None]:
    """(header, its length, None), or (None, length, why it is not a safetensors header): reads the first 8 bytes
    (the header's length) and the header only, never tensor data."""
    size = shard.stat().st_size
    with open(shard, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return None, 0, f"{size} bytes, shorter than a safetensors header"
        length = int.from_bytes(head, "little")
        if length > MAX_HEADER_BYTES:
            return None, length, f"its header length {length} is not a safetensors header's"
        if 8 + length > size:
            return None, length, f"{size} bytes, shorter than its own {length}-byte header"
        try:
            header = json.loads(handle.read(length))
        except ValueError:
            return None, length, "its header is not valid JSON"
    if not isinstance(header, dict):
        return None, length, "its header is not a JSON object"
    return header, length, None


def read_hf_config(model_path: str | None, key: str = "actor_rollout_ref.model.path") -> dict:
    """The config.json of the HF model directory that config key `key` names."""
    require(bool(model_path), key, f"{key} is not set: point it at a local HF model directory")
    path = Path(os.path.expanduser(model_path))
    if path.is_file():
        kind = "a GGUF file (llama.cpp's format)" if path.suffix.lower() == ".gguf" else f"a file ({path.name})"
        raise ConfigError(
            key,
            f"{key}={path} is {kind}, not a model directory: point {key} at the HF model "
            f"directory (config.json, *.safetensors, tokenizer files)"
            + (f", e.g. {path.parent}" if path.name == "config.json" else ""),
        )
    require(path.is_dir(), key, f"model directory {path} does not exist: fix {key}")
    config_file = path / "config.json"
    if not config_file.is_file():  # say what the directory is instead (GGUF, the hub cache, a Megatron checkpoint)
        raise ConfigError(
            key, f"{config_file} is missing: {key} must be an HF model directory{missing_config_hint(path, key)}"
        )
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(
            key, f"{config_file} is not valid JSON ({err}): fix or re-download the model that {key} names"
        ) from None
    require(
        isinstance(hf_config, dict),
        key,
        f"{config_file} holds a JSON {type(hf_config).__name__}, not an HF "
        f"model config (a JSON object): fix or re-download the model {key} names",
    )
    model_type = hf_config.get("model_type")
    require(
        model_type is not None,
        key,
        f"{config_file} has no model_type: it is not an HF model config"
        + (missing_config_hint(path, key) or f"; fix or re-download the model {key} names"),
    )
    require(
        family(model_type) is not None,
        key,
        f"model type {model_type!r} in {config_file} is not supported; supported: {', '.join(FAMILIES)}",
    )
    check_hf_config_fields(hf_config, config_file, key)
    return hf_config


# config.json fields the layout checks and the model builder read: (name, required), each a positive integer
HF_INT_FIELDS = (
    ("hidden_size", True),
    ("num_attention_heads", True),
    ("num_hidden_layers", True),
    ("vocab_size", True),
    ("intermediate_size", True),
    ("num_key_value_heads", False),
    ("max_position_embeddings", False),
)


def check_hf_config_fields(hf_config: dict, config_file: Path, key: str) -> None:
    """The sizes in config.json are positive integers (a string, null or missing one would fail in the layout
    arithmetic or build a model of transformers' defaults), tie_word_embeddings a boolean."""
    for name, required in HF_INT_FIELDS:
        value = hf_config.get(name)
        if value is None and not required and name not in hf_config:
            continue
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            what = f"has {name}={value!r}, not a positive integer" if name in hf_config else f"has no {name}"
            raise ConfigError(key, f"{config_file} {what}: fix or re-download the model {key} names")
    # grouped-query attention: each KV head serves a whole group of query heads
    heads, kv_heads = hf_config["num_attention_heads"], hf_config.get("num_key_value_heads") or 0
    require(
        not kv_heads or (kv_heads <= heads and heads % kv_heads == 0),
        key,
        f"{config_file} has num_attention_heads={heads} and num_key_value_heads={kv_heads}: query heads must "
        f"be a multiple of the key/value heads; fix or re-download the model {key} names",
    )
    require(
        "head_dim" in hf_config or hf_config["hidden_size"] % heads == 0,
        key,
        f"{config_file} has hidden_size={hf_config['hidden_size']}, not divisible by num_attention_heads={heads} "
        f"(and no head_dim): fix or re-download the model {key} names",
    )
    tie = hf_config.get("tie_word_embeddings", False)
    require(
        isinstance(tie, bool),
        key,
        f"{config_file} has tie_word_embeddings={tie!r}, not true or false: fix or re-download the model {key} names",
    )


def check_tokenizer_files(model_path: str) -> None:
    """The tokenizer and chat template the prompts need, from the files alone (transformers is not imported)."""
    key = "actor_rollout_ref.model.path"
    path = Path(os.path.expanduser(model_path))
    tokenizer_config = path / "tokenizer_config.json"
    require(
        any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")),
        key,
        f"{path} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json): copy the model's tokenizer "
        f"files into the directory {key} names",
    )
    try:
        settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    except json.JSONDecodeError as err:
        raise ConfigError(key, f"{tokenizer_config} is not valid JSON ({err}): fix or re-download it") from None
    require(
        bool(settings.get("chat_template"))
        or (path / "chat_template.jinja").is_file()
        or (path / "chat_template.json").is_file(),
        key,
        f"the tokenizer in {path} has no chat template (none in tokenizer_config.json, no chat_template.jinja) "
        f"and prompts are chat lists: point {key} at an instruct/chat model, or add its template there",
    )


def missing_config_hint(path: Path, key: str) -> str:
    """What a directory without config.json holds instead, and where the model is ('' when nothing is known)."""
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if ggufs:
        return (
            f"; {path} holds {ggufs[0]}, a GGUF file (llama.cpp's format), which dagrl cannot train: convert it "
            f"to an HF directory (transformers' from_pretrained(..., gguf_file=...) then save_pretrained) or point "
            f"{key} at the original HF model"
        )
    snapshots = sorted(p.parent for p in path.glob("snapshots/*/config.json"))
    if snapshots:  # the hub cache's models--org--name: the files are in snapshots/<revision>
        return (
            f"; {path} is the hub cache's folder of a model, whose files are in snapshots/<revision>: point {key} "
            f"at {snapshots[-1]}"
        )
    if (path / "snapshots").is_dir() and (path / "refs").is_dir():  # that folder, its download not finished
        return (
            f"; {path} is the hub cache's folder of a model, but no snapshots/<revision> in it holds config.json "
            f"(a download that did not finish): download the model again (huggingface-cli download), then point "
            f"{key} at {path}/snapshots/<revision>"
        )
    hf = path / "huggingface"
    if (hf / "config.json").is_file() and ((path / "metadata.json").is_file() or any(path.glob("*.distcp"))):
        if any(hf.glob("*.safetensors")):
            return f"; {path} is a Megatron checkpoint whose HF copy is in {hf}: point {key} at {hf}"
        return (
            f"; {path} is a Megatron checkpoint (its HF config and tokenizer in {hf}, no HF weights): start from "
            f"it with {key}={hf} actor_rollout_ref.actor.megatron.use_dist_checkpointing=true "
            f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={path}"
        )
    steps = sorted(p.parent for p in path.glob("global_step_*/dagrl_checkpoint.json") if p.parent.name[12:].isdigit())
    newest = max(steps, key=lambda p: int(p.name[12:])) if steps else path  # a run directory: its newest step
    actor = newest / "actor" if (newest / "dagrl_checkpoint.json").is_file() else path
    if (actor / "metadata.json").is_file() and any(actor.glob("*.distcp")):  # a dagrl actor checkpoint: no HF files
        return (
            f"; {path} holds a Megatron checkpoint, not an HF model: turn it into one with python3 "
            f"scripts/model_merger.py merge --backend megatron --local_dir {actor} --target_dir <out>, then point "
            f"{key} at <out> (to continue that run instead, resume it in its trainer.default_local_dir)"
        )
    inside = sorted(p.parent for p in path.glob("*/config.json"))
    if inside:
        return f"; {inside[0]} has one: point {key} at it"
    return ""
