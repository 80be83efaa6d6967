"""Pre-flight of a model's config.json against its own weights, and of the critic's model against the run.

config.json edited by hand, or copied from another model of the family, builds a Megatron model whose tensors do not
fit the safetensors weights: the import then fails once the models are built, in a traceback. The shapes come from
the safetensors headers alone (no tensor data is read, neither torch nor transformers is imported); only tensors
every supported family (dagrl/models/families.py) names alike are compared, and a checkpoint that
names none of them (another layout) is left to the engine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dagrl.config.errors import ConfigError, require
from dagrl.config.model_dir import read_hf_config, safetensors_header
from dagrl.models.families import FAMILIES, family


def tensor_shapes(model_dir: Path) -> dict[str, tuple[list[int], str]]:
    """{tensor name: (shape, shard file name)} of every *.safetensors file in `model_dir` (headers only); tensors
    of a header that cannot be read are left out (model_files.check_weight_files names such a file)."""
    found: dict[str, tuple[list[int], str]] = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        try:
            header = safetensors_header(shard)[0] or {}
        except OSError:
            continue
        for name, entry in header.items():
            if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
                found[name] = (entry["shape"], shard.name)
    return found


def expected_shapes(hf_config: dict) -> dict[str, tuple[list[int], str]]:
    """{tensor name: (shape, the config.json fields that give it)} of the tensors compared."""
    hidden, vocab = hf_config["hidden_size"], hf_config["vocab_size"]
    heads = hf_config["num_attention_heads"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    head_dim = hf_config.get("head_dim") or hidden // heads
    dim = "head_dim" if hf_config.get("head_dim") else "hidden_size/num_attention_heads"
    shapes = {
        "model.embed_tokens.weight": ([vocab, hidden], f"vocab_size={vocab}, hidden_size={hidden}"),
        "lm_head.weight": ([vocab, hidden], f"vocab_size={vocab}, hidden_size={hidden}"),
        "model.layers.0.self_attn.q_proj.weight": (
            [heads * head_dim, hidden],
            f"num_attention_heads={heads} x {dim}={head_dim}, hidden_size={hidden}",
        ),
        "model.layers.0.self_attn.k_proj.weight": (
            [kv_heads * head_dim, hidden],
            f"num_key_value_heads={kv_heads} x {dim}={head_dim}, hidden_size={hidden}",
        ),
    }
    if not getattr(family(hf_config.get("model_type")), "moe", False):  # experts: named and sized by the family
        intermediate = hf_config["intermediate_size"]
        shapes["model.layers.0.mlp.gate_proj.weight"] = (
            [intermediate, hidden],
            f"intermediate_size={intermediate}, hidden_size={hidden}",
        )
    return shapes


def check_weight_shapes(model_path: str, hf_config: dict, key: str = "actor_rollout_ref.model.path") -> None:
    """The weights' tensors have the shapes config.json gives them, and as many decoder layers."""
    model_dir = Path(os.path.expanduser(model_path))
    found = tensor_shapes(model_dir)
    fix = (
        f"config.json and the weights are of different models: restore the model's own config.json or "
        f"re-download the model {key} names"
    )
    for name, (shape, fields) in expected_shapes(hf_config).items():
        if name in found and found[name][0] != shape:
            raise ConfigError(
                key,
                f"{model_dir / found[name][1]} holds {name} of shape {found[name][0]}, but "
                f"{model_dir / 'config.json'} needs {shape} ({fields}): {fix}",
            )
    check_attention_names(model_dir, hf_config, found, key)
    # the actor's output layer: untied, it is its own tensor (a critic replaces it with a value head)
    untied = hf_config.get("tie_word_embeddings") is False or "tie_word_embeddings" not in hf_config
    require(
        key != "actor_rollout_ref.model.path"
        or not untied
        or "model.embed_tokens.weight" not in found
        or "lm_head.weight" in found,
        key,
        f"{model_dir} has no lm_head.weight in its weights while config.json has tie_word_embeddings="
        f"{str(hf_config.get('tie_word_embeddings', False)).lower()} (the output layer is its own tensor): the "
        f"weights were saved without the LM head (e.g. from a base AutoModel); re-download or re-save the model "
        f"with its head (AutoModelForCausalLM.save_pretrained)",
    )
    layers = {int(match[1]) for name in found if (match := re.match(r"model\.layers\.(\d+)\.", name))}
    configured = hf_config["num_hidden_layers"]
    require(
        not layers or max(layers) + 1 == configured,
        key,
        f"{model_dir} holds the weights of {max(layers, default=-1) + 1} decoder layers, but "
        f"{model_dir / 'config.json'} has num_hidden_layers={configured}: {fix}",
    )
    check_layer_tensors(model_dir, hf_config, found, key)


ATTENTION = "model.layers.0.self_attn."


def _attention_shape(family_, hf_config: dict) -> tuple[bool, bool]:
    """(a bias on q/k/v, a norm on each head's q/k) that a family's model built from `hf_config` has."""
    bias = family_.qkv_bias or (family_.attention_bias and hf_config.get("attention_bias") is True)
    return bias, family_.qk_norm


def check_attention_names(model_dir: Path, hf_config: dict, found: dict, key: str) -> None:
    """The attention tensors the weights name fit config.json's model_type: a qwen2 checkpoint (q/k/v biases)
    relabelled qwen3 (per-head q/k norms, no biases) would build a model whose import fails in a traceback, or
    leaves the norms at their initial values. Dense layer 0's names only; a checkpoint without them is left to
    the engine."""
    family_ = family(hf_config.get("model_type"))
    if family_ is None or ATTENTION + "q_proj.weight" not in found:
        return
    have = (ATTENTION + "q_proj.bias" in found, ATTENTION + "q_norm.weight" in found)
    wanted = _attention_shape(family_, hf_config)
    if have == wanted:
        return

    def words(bias: bool, norm: bool) -> str:
        return f"{'a' if bias else 'no'} q/k/v bias and {'a' if norm else 'no'} per-head q/k norm"

    fits = [name for name, other in FAMILIES.items() if not other.moe and _attention_shape(other, hf_config) == have]
    guess = f" (as {' or '.join(fits)} weights do)" if fits else ""
    raise ConfigError(
        str(model_dir / "config.json"),
        f"{model_dir / 'config.json'} has model_type={hf_config.get('model_type')}, whose attention has "
        f"{words(*wanted)}, but the weights have {words(*have)}{guess}: config.json is of another model family; "
        f"restore the model's own config.json (its model_type) in the directory {key} names",
    )


LAYER_TENSORS = tuple(f"self_attn.{name}_proj.weight" for name in "qkvo") + (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)
DENSE_MLP = tuple(f"mlp.{name}_proj.weight" for name in ("gate", "up", "down"))


def check_layer_tensors(model_dir: Path, hf_config: dict, found: dict, key: str) -> None:
    """Every decoder layer's attention, norms and (dense) MLP tensors, the final norm and the embedding are in the
    weights: a file re-saved without one would fail the import once the model is built, or leave the tensor at its
    random initial value. Checked where the weights use the families' names (layer 0's q_proj)."""
    family_ = family(hf_config.get("model_type"))
    if family_ is None or ATTENTION + "q_proj.weight" not in found:
        return
    names = LAYER_TENSORS + (() if family_.moe else DENSE_MLP)
    layers = range(hf_config["num_hidden_layers"])
    wanted = [f"model.layers.{i}.{name}" for i in layers for name in names]
    missing = [name for name in [*wanted, "model.norm.weight", "model.embed_tokens.weight"] if name not in found]
    require(
        not missing,
        key,
        f"the weights in {model_dir} lack {len(missing)} tensor(s) a {hf_config.get('model_type')} model of "
        f"{len(layers)} layers needs (first: {missing[0] if missing else ''}): the weights are incomplete (a "
        f"partial save, or shards of different downloads); re-download the model {key} names",
    )


def position_limit(hf_config: dict):
    """The positions a model takes: max_position_embeddings, times its rope scaling factor (None: not said)."""
    limit = hf_config.get("max_position_embeddings")
    scaling = hf_config.get("rope_scaling") or {}
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(limit, int) and isinstance(factor, (int, float)) and factor > 1:
        limit = int(limit * factor)
    return limit


def check_critic_model(critic_path: str | None, sequence_length: int, actor_config: dict) -> None:
    """critic.model.path, when set: a prompt + response fits its positions, and its weights fit its config.json
    (the actor's model is checked in validate.preflight; the critic's tokenizer is the actor's,
    preflight/critic.py's check_critic)."""
    if not critic_path:
        return

    key = "critic.model.path"
    critic_config = read_hf_config(critic_path, key=key)
    limit = position_limit(critic_config)
    require(
        not isinstance(limit, int) or sequence_length <= limit,
        key,
        f"data.max_prompt_length + data.max_response_length = {sequence_length} is longer than the critic's "
        f"max_position_embeddings={limit} ({critic_path}/config.json of critic.model.path, the actor's model "
        f"has {actor_config.get('max_position_embeddings')}): use a critic model with as many positions, or "
        f"lower data.max_prompt_length or data.max_response_length",
    )
    check_weight_shapes(critic_path, critic_config, key)
