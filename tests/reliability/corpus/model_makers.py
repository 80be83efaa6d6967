"""File makers for model directories: edited copies of the tiny model, teachers, critics, other tools' layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import Paths


def model_copy(
    patch: dict | None = None,
    remove: tuple[str, ...] = (),
    config_text: str | None = None,
    tokenizer_patch: dict | None = None,
) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with config.json patched or replaced, or files removed."""

    def make(ws: Path, paths: Paths) -> None:
        target = ws / "model"
        shutil.copytree(paths.model, target)
        config = json.loads((target / "config.json").read_text())
        config.update(patch or {})
        (target / "config.json").write_text(config_text if config_text is not None else json.dumps(config))
        if tokenizer_patch is not None:
            tokenizer = json.loads((target / "tokenizer_config.json").read_text())
            tokenizer.update(tokenizer_patch)
            (target / "tokenizer_config.json").write_text(json.dumps(tokenizer))
        for name in remove:
            (target / name).unlink()

    return make


def model_weights(kind: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with its weights cut to half their bytes ("truncated"), or split under an index
    that names a second shard the directory lacks ("missing_shard")."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        weights = ws / "model" / "model.safetensors"
        if kind == "truncated":
            with open(weights, "r+b") as handle:
                handle.truncate(weights.stat().st_size // 2)
            return
        header = json.loads(weights.read_bytes()[8 : 8 + int.from_bytes(weights.read_bytes()[:8], "little")])
        names = sorted(name for name in header if name != "__metadata__")
        weights.rename(ws / "model" / "model-00001-of-00002.safetensors")
        weight_map = {name: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, name in enumerate(names)}
        index = {"metadata": {}, "weight_map": weight_map}
        (ws / "model" / "model.safetensors.index.json").write_text(json.dumps(index))

    return make


def chat_template(text: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with chat_template.jinja replaced."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        (ws / "model" / "chat_template.jinja").write_text(text)

    return make


def _hf_cache_unfinished(ws: Path, paths: Paths) -> None:
    """{ws}/models--Qwen--Qwen3-0.6B: a hub cache folder whose download did not finish (an empty snapshot)."""
    for name in ("blobs", "refs", "snapshots/abc123"):
        (ws / "models--Qwen--Qwen3-0.6B" / name).mkdir(parents=True)


def tokenizer_only(ws: Path, paths: Paths) -> None:
    """{ws}/tok: the tiny model's tokenizer files alone (no config.json, no weights)."""
    (ws / "tok").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(paths.model / name, ws / "tok" / name)


def bin_weights_only(ws: Path, paths: Paths) -> None:
    """{ws}/model: the tiny model with pytorch_model.bin instead of model.safetensors."""
    model_copy(remove=("model.safetensors",))(ws, paths)
    (ws / "model" / "pytorch_model.bin").write_bytes(b"PK" + bytes(range(256)))


def config_key_removed(name: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with one config.json field removed."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        config = json.loads((ws / "model" / "config.json").read_text())
        config.pop(name)
        (ws / "model" / "config.json").write_text(json.dumps(config))

    return make


def model_file_text(name: str, text: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with one file's text replaced (None: cut to its first third)."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        target = ws / "model" / name
        target.write_text(text if text is not None else target.read_text()[: len(target.read_text()) // 3])

    return make


def teacher_with_swapped_tokens(ws: Path, paths: Paths) -> None:
    """{ws}/teacher: the tiny model whose tokenizer gives two tokens each other's ids."""
    shutil.copytree(paths.model, ws / "teacher")
    tokenizer = json.loads((ws / "teacher" / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (ws / "teacher" / "tokenizer.json").write_text(json.dumps(tokenizer))


def teacher_with_vocab(size: int) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        model_copy(patch={"vocab_size": size})(ws, paths)
        shutil.move(ws / "model", ws / "teacher")

    return make


def critic_with_other_vocab(ws: Path, paths: Paths) -> None:
    model_copy(patch={"vocab_size": 800})(ws, paths)
    shutil.move(ws / "model", ws / "critic")


def model_of_vocab(size: int) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model's tokenizer with a model whose embedding (config.json and weights alike) has `size`
    rows (another model's tokenizer, not an edited config.json: config_vocab_not_weights is that)."""

    def make(ws: Path, paths: Paths) -> None:
        from tests.engine.tiny_models import make_model_dir

        model_copy()(ws, paths)
        make_model_dir(ws / "model", num_layers=2, vocab_size=size)

    return make


def gguf_only_dir(ws: Path, paths: Paths) -> None:
    """{ws}/model: a directory holding only a llama.cpp GGUF file."""
    (ws / "model").mkdir()
    (ws / "model" / "model-q4_k_m.gguf").write_bytes(b"GGUF" + bytes(64))


def critic_with_positions(limit: int) -> Callable[[Path, Paths], None]:
    """{ws}/critic: the tiny model with max_position_embeddings=limit."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy(patch={"max_position_embeddings": limit})(ws, paths)
        shutil.move(ws / "model", ws / "critic")

    return make


def hub_cache_folder(ws: Path, paths: Paths) -> None:
    """{ws}/hub/models--org--tiny: the hub cache's layout (the model's files under snapshots/<revision>/)."""
    repo = ws / "hub" / "models--org--tiny"
    shutil.copytree(paths.model, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")


def megatron_actor_dir(ws: Path, paths: Paths) -> None:
    """{ws}/global_step_10/actor: verl's Megatron checkpoint, the HF config and tokenizer in huggingface/."""
    actor = ws / "global_step_10" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "metadata.json").write_text("{}")
    (actor / "__0_0.distcp").write_bytes(bytes(64))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(paths.model / name, actor / "huggingface" / name)


def without_tensor(name: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny (untied) model's weights saved without the tensor `name`."""

    def make(ws: Path, paths: Paths) -> None:
        from safetensors.numpy import load_file, save_file

        model_copy()(ws, paths)
        weights = load_file(str(paths.model / "model.safetensors"))
        weights.pop(name)
        save_file(weights, str(ws / "model" / "model.safetensors"), metadata={"format": "pt"})

    return make


without_lm_head = without_tensor("lm_head.weight")


def eos_beyond_vocab(ws: Path, paths: Paths) -> None:
    model_copy(patch={"eos_token_id": 50000})(ws, paths)


def qwen2_weights_as_qwen3(ws: Path, paths: Paths) -> None:
    """{ws}/model: weights with Qwen2's q/k/v biases under a config.json edited to model_type qwen3."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    model_copy(patch={"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})(ws, paths)
    weights = load_file(str(paths.model / "model.safetensors"))
    for name in [n for n in weights if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))]:
        weights[name.replace(".weight", ".bias")] = np.zeros(weights[name].shape[0], weights[name].dtype)
    save_file(weights, str(ws / "model" / "model.safetensors"), metadata={"format": "pt"})


def index_names_absent_tensor(ws: Path, paths: Paths) -> None:
    """{ws}/model: two complete shards under an index that places lm_head.weight in the shard without it."""
    from safetensors.numpy import load_file, save_file

    model_copy(remove=("model.safetensors",))(ws, paths)
    weights = load_file(str(paths.model / "model.safetensors"))
    names = sorted(weights)
    shards = {name: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, name in enumerate(names)}
    for shard in set(shards.values()):
        held = {name: weights[name] for name in names if shards[name] == shard}
        save_file(held, str(ws / "model" / shard), metadata={"format": "pt"})
    wrong = {"model-00001-of-00002.safetensors": "model-00002-of-00002.safetensors"}
    shards["lm_head.weight"] = wrong.get(shards["lm_head.weight"], "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": shards}
    (ws / "model" / "model.safetensors.index.json").write_text(json.dumps(index))
