"""Pre-flight of the model directory's files beyond config.json: the tokenizer's ids against the embedding
(config.json vocab_size), and the safetensors weights (every shard the index names is there, no shard is cut short,
none holds a quantized checkpoint's tensors).

Cheap by design: JSON files and the safetensors headers only (the first 8 bytes give the header's length, the
header the end of the last tensor); no tensor data is read and transformers is not imported. A problem is filed
under the file (ConfigError's key), not under actor_rollout_ref.model.path: the checks that read that key from
config.json (the layout, the critic) still run and report their own problems. Quantized weights are the exception:
what the model is, filed under the key as the policy check files a quantization_config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dagrl.config.errors import ConfigError, require
from dagrl.config.model_dir import safetensors_header
from dagrl.config.model_shapes import tensor_shapes

KEY = "actor_rollout_ref.model.path"


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a broken tokenizer file is the tokenizer check's (or transformers') to name


def highest_token_id(model_dir: Path) -> tuple[int, str] | None:
    """The largest id the tokenizer files of `model_dir` can produce, and the file that holds it (None: no ids
    readable without loading the tokenizer, e.g. a sentencepiece tokenizer.model only)."""
    found: list[tuple[int, str]] = []
    tokenizer = _json(model_dir / "tokenizer.json")
    if isinstance(tokenizer, dict):
        vocab = (tokenizer.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and vocab:
            found.append((max(v for v in vocab.values() if isinstance(v, int)), "tokenizer.json"))
        elif isinstance(vocab, list) and vocab:  # Unigram: ids are positions
            found.append((len(vocab) - 1, "tokenizer.json"))
        added = [t.get("id") for t in tokenizer.get("added_tokens") or [] if isinstance(t, dict)]
        found += [(i, "tokenizer.json added_tokens") for i in added if isinstance(i, int)]
    else:
        vocab = _json(model_dir / "vocab.json")
        if isinstance(vocab, dict) and vocab:
            found.append((max(v for v in vocab.values() if isinstance(v, int)), "vocab.json"))
    settings = _json(model_dir / "tokenizer_config.json")
    decoder = settings.get("added_tokens_decoder") if isinstance(settings, dict) else None
    if isinstance(decoder, dict):
        found += [(int(i), "tokenizer_config.json added_tokens_decoder") for i in decoder if str(i).isdigit()]
    added = _json(model_dir / "added_tokens.json")
    if isinstance(added, dict):
        found += [(i, "added_tokens.json") for i in added.values() if isinstance(i, int)]
    return max(found) if found else None


def check_vocab(model_path: str, hf_config: dict) -> None:
    """Every token id the tokenizer produces has a row in the embedding (config.json vocab_size): a larger id would
    index past it in the first forward pass (on GPU, a device-side assert far from the cause)."""
    vocab_size = hf_config.get("vocab_size")
    model_dir = Path(os.path.expanduser(model_path))
    highest = highest_token_id(model_dir)
    if not isinstance(vocab_size, int) or highest is None:
        return
    embedding = tensor_shapes(model_dir).get("model.embed_tokens.weight")
    if embedding is not None and embedding[0][:1] != [vocab_size]:
        return  # config.json disagrees with its own weights: model_shapes.check_weight_shapes names that instead
    token_id, source = highest
    require(
        token_id < vocab_size,
        str(model_dir / source.split()[0]),
        f"the tokenizer in {model_dir} has token ids up to {token_id} ({source}) but config.json vocab_size="
        f"{vocab_size} (embedding rows 0..{vocab_size - 1}): the tokenizer and the weights are of different "
        f"models; copy the model's own tokenizer files into the directory {KEY} names",
    )


def check_special_ids(model_path: str, hf_config: dict) -> None:
    """The eos and bos ids of config.json and generation_config.json are rows of the embedding: generation stops at
    an eos id, which a model never samples beyond its vocab_size (every response would run to
    data.max_response_length). (pad_token_id is left alone: some configs hold -1 for none.)"""
    vocab_size = hf_config.get("vocab_size")
    if not isinstance(vocab_size, int):
        return
    model_dir = Path(os.path.expanduser(model_path))
    for name in ("config.json", "generation_config.json"):
        settings = hf_config if name == "config.json" else _json(model_dir / name)
        for field in ("eos_token_id", "bos_token_id"):
            value = settings.get(field) if isinstance(settings, dict) else None
            ids = value if isinstance(value, list) else [value]
            bad = [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and not 0 <= i < vocab_size]
            require(
                not bad,
                str(model_dir / name),
                f"{model_dir / name} has {field}={value} outside the vocabulary (vocab_size={vocab_size}, ids "
                f"0..{vocab_size - 1}): the file is of another model or edited by hand; restore the model's own "
                f"{name} in the directory {KEY} names",
            )


def _truncated(shard: Path) -> str | None:
    """Why the safetensors file `shard` is unusable (cut short, or no header), or None; reads its header only."""
    header, length, why = safetensors_header(shard)
    if header is None:
        return why
    size = shard.stat().st_size
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or ()) == 2
    ]
    needed = 8 + length + max(ends, default=0)
    return f"{size} bytes, but its header places tensors up to byte {needed}" if size < needed else None


def check_weight_files(model_path: str, key: str = KEY) -> None:
    """The HF weights the actor (critic, teacher) import: safetensors files, every shard that
    model.safetensors.index.json names present, none truncated (an interrupted download or copy)."""
    model_dir = Path(os.path.expanduser(model_path))
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        content = _json(index)
        require(
            content is not None,
            str(index),
            f"{index} is not valid JSON (cut short by an interrupted download?): "
            f"re-download it into the directory {key} names",
        )
        weight_map = content.get("weight_map") if isinstance(content, dict) else None
        require(
            isinstance(weight_map, dict) and weight_map,
            str(index),
            f"{index} has no weight_map: it is not a safetensors index; re-download the model {key} names",
        )
        shards = sorted(set(map(str, weight_map.values())))
        missing = [name for name in shards if not (model_dir / name).is_file()]
        require(
            not missing,
            str(index),
            f"{index} names {len(missing)} shard(s) missing from {model_dir} (first: "
            f"{missing[0] if missing else ''}): the download is incomplete; re-download the model {key} names",
        )
    else:
        shards = sorted(path.name for path in model_dir.glob("*.safetensors"))
        require(
            bool(shards),
            str(model_dir / "model.safetensors"),
            f"{model_dir} has no *.safetensors weights (dagrl imports the HF weights from safetensors): re-save "
            f"the model with save_pretrained(safe_serialization=True), or point {key} at a complete model",
        )
    for name in shards:
        shard = model_dir / name
        try:
            problem = _truncated(shard)
            if index.is_file() and problem is None:
                _index_matches(index, weight_map, shard, key)
        except OSError as error:
            raise ConfigError(
                str(shard), f"weight file {shard} cannot be read ({error}); fix the model {key} names"
            ) from None
        require(
            problem is None,
            str(shard),
            f"weight file {shard} is truncated ({problem}): an interrupted download "
            f"or copy; re-download the model {key} names",
        )
    check_quantized_tensors(model_dir, shards, key)


# Tensors only quantized checkpoints hold: FP8 block scales (DeepSeek/Qwen FP8, weight_scale_inv), compressed-tensors
# and ModelOpt FP8 (weight_scale, input_scale, kv k_scale/v_scale), GPTQ/AWQ packs (qweight, qzeros, scales, g_idx),
# bitsandbytes (absmax, quant_map, SCB)
QUANTIZED_SUFFIXES = (
    ".weight_scale_inv",
    ".weight_scale",
    ".input_scale",
    ".k_scale",
    ".v_scale",
    ".qweight",
    ".qzeros",
    ".scales",
    ".g_idx",
    ".absmax",
    ".quant_map",
    ".SCB",
)
LOW_BIT_DTYPES = ("F8_", "F6_", "F4")  # safetensors' names of the 8-, 6- and 4-bit floats


def _quantized_tensor(header: dict) -> tuple[str, str] | None:
    """(the first tensor of a quantized checkpoint in `header`, why it is one), or None."""
    for name in sorted(header):
        entry = header[name]
        dtype = entry.get("dtype", "") if isinstance(entry, dict) and name != "__metadata__" else ""
        if name.endswith(QUANTIZED_SUFFIXES):
            return name, f"dtype {dtype}, a tensor that only quantized checkpoints hold"
        if str(dtype).startswith(LOW_BIT_DTYPES):
            return name, f"dtype {dtype}, a low-bit float"
    return None


def check_quantized_tensors(model_dir: Path, shards: list[str], key: str = KEY) -> None:
    """No shard holds a quantized checkpoint's tensors (FP8 scales, GPTQ/AWQ packs) or low-bit float weights. A
    config.json that declares quantization_config is the policy check's to name (preflight/rollout.py); one stripped
    of it (a hand-made copy, a converter that dropped it) would otherwise build the model and fail in the import."""
    config = _json(model_dir / "config.json")
    if key == KEY and isinstance(config, dict) and config.get("quantization_config") is not None:
        return
    for name in shards:
        header = safetensors_header(model_dir / name)[0] or {}
        found = _quantized_tensor(header)
        if found is not None:
            raise ConfigError(  # under the model's key: its shape checks would only name the packed tensors
                key,
                f"{model_dir / name} holds {found[0]} ({found[1]}) while config.json has no quantization_config: "
                f"the weights are a quantized (FP8/GPTQ/AWQ) release, which dagrl does not train; point {key} at "
                f"the model's full-precision (bf16) checkpoint (e.g. Qwen/Qwen3-8B, not Qwen/Qwen3-8B-FP8)",
            )


def _index_matches(index: Path, weight_map: dict, shard: Path, key: str) -> None:
    """Every tensor the index places in `shard` is in its header: the index of another download (or revision)
    would fail the import once the model is built, naming the tensor only."""
    held = set(safetensors_header(shard)[0] or {})
    lacking = sorted(tensor for tensor, name in weight_map.items() if name == shard.name and tensor not in held)
    require(
        not lacking,
        str(index),
        f"{index} places {len(lacking)} tensor(s) in {shard.name}, whose header lacks them (first: "
        f"{lacking[0] if lacking else ''}): the index and the shards are of different downloads; re-download the "
        f"model {key} names",
    )


JSON_FILES = (
    "tokenizer.json",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "chat_template.json",
)


def check_json_files(model_path: str) -> None:
    """The model directory's JSON files that transformers reads when the tokenizer or the generation settings
    load (config.json and tokenizer_config.json have their own checks) parse: a file cut short by an interrupted
    download would otherwise fail only when the tokenizer is built."""
    model_dir = Path(os.path.expanduser(model_path))
    for name in JSON_FILES:
        path = model_dir / name
        if not path.is_file():
            continue
        try:
            json.loads(path.read_bytes())
        except ValueError as error:
            raise ConfigError(
                str(path),
                f"{path} is not valid JSON ({str(error).splitlines()[0]}): the file is "
                f"damaged or cut short; re-download it into the directory {KEY} names",
            ) from None


def chat_template_source(model_dir: Path) -> tuple[str, Path] | None:
    """(template text, the file it is in) as transformers picks it: chat_template.jinja, chat_template.json, else
    tokenizer_config.json's chat_template (a string, or named templates: the 'default' one or the first)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace"), jinja
    for name in ("chat_template.json", "tokenizer_config.json"):
        settings = _json(model_dir / name)
        template = settings.get("chat_template") if isinstance(settings, dict) else None
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        if isinstance(template, str) and template:
            return template, model_dir / name
    return None


def check_chat_template_syntax(model_path: str) -> None:
    """The chat template parses as Jinja (syntax only: rendering it on the prompts is the start-up check's)."""
    found = chat_template_source(Path(os.path.expanduser(model_path)))
    if found is None:
        return
    import jinja2

    template, source = found
    require(
        template.strip() != "",
        str(source),
        f"{source} is empty: transformers takes it over tokenizer_config.json's chat_template, so every prompt "
        f"would render as no text: delete it (to use tokenizer_config.json's template) or restore the model's "
        f"template there",
    )
    try:
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except jinja2.TemplateSyntaxError as error:
        raise ConfigError(
            str(source),
            f"the chat template in {source} has a Jinja syntax error (line {error.lineno}: "
            f"{error.message}): fix the template or re-download the model's tokenizer "
            f"files into the directory {KEY} names",
        ) from None
