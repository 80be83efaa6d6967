"""HF <-> Megatron weights, written once for every supported family (the Megatron -> HF stream: weight_export.py).

A Megatron parameter name is first made global (layer index from the layer's own `layer_number`, expert index
offset by the EP rank), then a `Rule` says which HF tensors it holds and how they are laid out:

  copy   replicated (norms, router)
  row    split on dim 0 over TP (column-parallel linears)          col  split on dim 1 (row-parallel linears)
  vocab  split on dim 0, padded to the Megatron vocab size         qkv  [q_g; k_g; v_g] for each KV group g, dim 0
  fc1    on TP rank r: [gate_r; up_r]  (not a split of [gate; up])

Names are the local spec's; the Transformer Engine spec fuses the two norms into `linear_qkv.layer_norm_weight`
and `linear_fc1.layer_norm_weight`, which the layer table already maps, and its grouped-GEMM experts name expert e
`mlp.experts.linear_fc1.weight{e}` where the local spec has `mlp.experts.local_experts.{e}.linear_fc1.weight`.
HF names are the checkpoint's: a family names its MoE block and expert projections (Family.moe_block,
Family.expert_names: Mixtral's `block_sparse_moe.experts.{e}.w1`), as vLLM's loaders and transformers' take them.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dagrl.engine.megatron.hf_config import head_dim, padded_vocab_size
from dagrl.models.families import Family, family

logger = logging.getLogger(__name__)

LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(.+)$")  # SequentialMLP
_GROUPED_EXPERT = re.compile(r"^mlp\.experts\.(linear_fc[12])\.weight(\d+)$")  # TEGroupedMLP

# Per-layer parameters: Megatron suffix -> (kind, HF suffixes under model.layers.{i}.)
_LAYER_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "input_layernorm.weight": ("copy", ("input_layernorm.weight",)),
    "self_attention.linear_qkv.layer_norm_weight": ("copy", ("input_layernorm.weight",)),  # TE
    "self_attention.linear_qkv.weight": (
        "qkv",
        ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    ),
    "self_attention.linear_qkv.bias": (
        "qkv",
        ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    ),
    "self_attention.q_layernorm.weight": ("copy", ("self_attn.q_norm.weight",)),
    "self_attention.k_layernorm.weight": ("copy", ("self_attn.k_norm.weight",)),
    "self_attention.linear_proj.weight": ("col", ("self_attn.o_proj.weight",)),
    "pre_mlp_layernorm.weight": ("copy", ("post_attention_layernorm.weight",)),
    "mlp.linear_fc1.layer_norm_weight": ("copy", ("post_attention_layernorm.weight",)),  # TE
    "mlp.linear_fc1.weight": ("fc1", ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
    "mlp.linear_fc2.weight": ("col", ("mlp.down_proj.weight",)),
    "mlp.router.weight": ("copy", ("{moe}.gate.weight",)),
}
# Expert parameters: Megatron suffix -> (kind, HF suffixes under model.layers.{i}.{moe}.experts.{e}.)
_EXPERT_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear_fc1.weight": ("fc1", ("{gate}.weight", "{up}.weight")),
    "linear_fc2.weight": ("col", ("{down}.weight",)),
}
# `{moe}`, `{gate}`, `{up}` and `{down}` are the family's checkpoint names (Family.moe_block, Family.expert_names)
_DEFAULT_NAMES = Family("", "")
# LoRA adapter parameters beside a linear's weight (engine/megatron/lora.py exports them in their own form)
ADAPTER_SUFFIXES = (".lora_A", ".lora_B")


@dataclass(frozen=True)
class Rule:
    kind: str  # copy | row | col | vocab | qkv | fc1
    hf_names: tuple[str, ...]
    expert: bool = False  # split over the expert-TP group instead of TP


def parallel_ranks(expert: bool) -> tuple[int, int, Any]:
    """(rank, size, group) of the tensor-parallel group a parameter is split over."""
    from megatron.core import parallel_state as ps

    if expert:
        return (
            ps.get_expert_tensor_parallel_rank(),
            ps.get_expert_tensor_parallel_world_size(),
            ps.get_expert_tensor_parallel_group(),
        )
    return (
        ps.get_tensor_model_parallel_rank(),
        ps.get_tensor_model_parallel_world_size(),
        ps.get_tensor_model_parallel_group(),
    )


def local_expert(suffix: str) -> tuple[int, str] | None:
    """(local expert index, suffix in _EXPERT_TABLE) of an expert parameter under either spec's naming."""
    match = _EXPERT.match(suffix)
    if match is not None:
        return int(match.group(1)), match.group(2)
    match = _GROUPED_EXPERT.match(suffix)
    if match is not None:
        return int(match.group(2)), f"{match.group(1)}.weight"
    return None


def rule_for(chunk: torch.nn.Module, name: str, tied: bool, model_type: str | None = None) -> Rule | None:
    """The HF tensors behind local parameter `name` of `chunk`, named as checkpoints of `model_type` name them;
    None for a tied output layer (not exported)."""
    from megatron.core import parallel_state as ps

    match = LAYER.match(name)
    if match is None:
        return model_rule(name, tied)
    layer = chunk.decoder.layers[int(match.group(1))]
    first_expert = 0
    if local_expert(match.group(2)) is not None:
        first_expert = ps.get_expert_model_parallel_rank() * layer.mlp.experts.num_local_experts
    # layer_number: global, 1-based
    return layer_rule(match.group(2), layer.layer_number - 1, first_expert, model_type)


def model_rule(name: str, tied: bool) -> Rule | None:
    """Rule of a parameter outside the decoder layers."""
    if name == "embedding.word_embeddings.weight":
        return Rule("vocab", ("model.embed_tokens.weight",))
    if name == "output_layer.weight":
        return None if tied else Rule("vocab", ("lm_head.weight",))
    if name == "decoder.final_layernorm.weight":
        return Rule("copy", ("model.norm.weight",))
    raise KeyError(f"no HF mapping for Megatron parameter {name!r}")


def layer_rule(suffix: str, layer: int, first_expert: int = 0, model_type: str | None = None) -> Rule:
    """Rule of parameter `suffix` of global decoder layer `layer` (0-based), whose local expert 0 is expert
    `first_expert` of the model (EP rank x experts per rank), in the checkpoint names of `model_type`."""
    names = family(model_type) or _DEFAULT_NAMES
    gate, up, down = names.expert_names
    prefix = f"model.layers.{layer}."
    expert = local_expert(suffix)
    if expert is not None:
        index, expert_suffix = expert
        kind, hf_suffixes = _EXPERT_TABLE[expert_suffix]
        experts = f"{prefix}{names.moe_block}.experts.{first_expert + index}."
        return Rule(kind, tuple(experts + s.format(gate=gate, up=up, down=down) for s in hf_suffixes), expert=True)
    if suffix not in _LAYER_TABLE:
        raise KeyError(f"no HF mapping for Megatron parameter decoder.layers.*.{suffix}")
    kind, hf_suffixes = _LAYER_TABLE[suffix]
    return Rule(kind, tuple(prefix + s.format(moe=names.moe_block) for s in hf_suffixes))


# ---- one tensor: HF tensors <-> this rank's shard -----------------------------------------------


def _qkv_groups(hf_config: Any) -> tuple[int, int, int]:
    heads = hf_config.num_attention_heads
    groups = getattr(hf_config, "num_key_value_heads", None) or heads
    return groups, heads // groups, head_dim(hf_config)


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hf_config: Any) -> torch.Tensor:
    """Full (all TP ranks) linear_qkv: for each KV group, its query heads then its key and value head."""
    groups, q_per_group, dim = _qkv_groups(hf_config)
    tail = q.shape[1:]
    fused = torch.cat(
        [q.reshape(groups, q_per_group * dim, *tail), k.reshape(groups, dim, *tail), v.reshape(groups, dim, *tail)],
        dim=1,
    )
    return fused.reshape(groups * (q_per_group + 2) * dim, *tail)


def split_qkv(fused: torch.Tensor, hf_config: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    groups, q_per_group, dim = _qkv_groups(hf_config)
    tail = fused.shape[1:]
    grouped = fused.reshape(groups, (q_per_group + 2) * dim, *tail)
    q, k, v = torch.split(grouped, [q_per_group * dim, dim, dim], dim=1)
    return (q.reshape(-1, *tail).contiguous(), k.reshape(-1, *tail).contiguous(), v.reshape(-1, *tail).contiguous())


def local_shard(rule: Rule, hf: list[torch.Tensor], hf_config: Any) -> torch.Tensor:
    """The slice of the HF tensors that this rank's Megatron parameter holds."""
    rank, size, _ = parallel_ranks(rule.expert)
    if rule.kind == "copy":
        return hf[0]
    if rule.kind == "row":
        return hf[0].chunk(size, dim=0)[rank]
    if rule.kind == "col":
        return hf[0].chunk(size, dim=1)[rank]
    if rule.kind == "vocab":
        rows = padded_vocab_size(hf_config.vocab_size, parallel_ranks(False)[1])
        padded = torch.zeros(rows, *hf[0].shape[1:], dtype=hf[0].dtype)
        padded[: hf[0].shape[0]] = hf[0]
        return padded.chunk(size, dim=0)[rank]
    if rule.kind == "qkv":
        return fuse_qkv(*hf, hf_config).chunk(size, dim=0)[rank]
    if rule.kind == "fc1":
        gate, up = hf
        return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], dim=0)
    raise ValueError(f"unknown rule kind {rule.kind!r}")


def full_hf_tensors(rule: Rule, parts: list[torch.Tensor], hf_config: Any) -> list[tuple[str, torch.Tensor]]:
    """The full HF tensors of one parameter, from its shards on every rank of its TP group (rank order)."""
    if rule.kind == "copy":
        return [(rule.hf_names[0], parts[0].clone())]
    if rule.kind == "col":
        return [(rule.hf_names[0], torch.cat(parts, dim=1))]
    if rule.kind == "row":
        return [(rule.hf_names[0], torch.cat(parts, dim=0))]
    if rule.kind == "vocab":
        return [(rule.hf_names[0], torch.cat(parts, dim=0)[: hf_config.vocab_size].contiguous())]
    if rule.kind == "qkv":
        return list(zip(rule.hf_names, split_qkv(torch.cat(parts, dim=0), hf_config)))
    if rule.kind == "fc1":
        halves = [part.chunk(2, dim=0) for part in parts]
        gate = torch.cat([h[0] for h in halves], dim=0)
        up = torch.cat([h[1] for h in halves], dim=0)
        return [(rule.hf_names[0], gate), (rule.hf_names[1], up)]
    raise ValueError(f"unknown rule kind {rule.kind!r}")


# ---- HF -> Megatron ----------------------------------------------------------------------------


class SafetensorsDir:
    """Reads single tensors of an HF safetensors model dir on demand (sharded or not)."""

    def __init__(self, model_dir: str | Path) -> None:
        from safetensors import safe_open

        model_dir = Path(model_dir)
        index = model_dir / "model.safetensors.index.json"
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = [p.name for p in sorted(model_dir.glob("*.safetensors"))]
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {model_dir}")
        self._handles = [safe_open(str(model_dir / f), framework="pt") for f in files]
        self._where = {key: h for h in self._handles for key in h.keys()}

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str) -> torch.Tensor:
        if name not in self._where:
            raise KeyError(f"HF checkpoint has no tensor {name!r}")
        return self._where[name].get_tensor(name)


@torch.no_grad()
def import_hf_weights(chunks: list[torch.nn.Module], hf_config: Any, model_dir: str | Path) -> None:
    """Fill this rank's Megatron chunks from the HF safetensors in `model_dir`."""
    source = SafetensorsDir(model_dir)
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    for chunk in chunks:
        for name, param in chunk.named_parameters():
            rule = rule_for(chunk, name, tied, getattr(hf_config, "model_type", None))
            if rule is None:  # tied output layer: the same rows as the embedding
                rule = Rule("vocab", ("model.embed_tokens.weight",))
            shard = local_shard(rule, [source.get(n) for n in rule.hf_names], hf_config)
            if shard.shape != param.shape:
                raise ValueError(f"{name}: HF gives shape {tuple(shard.shape)}, Megatron has {tuple(param.shape)}")
            param.data.copy_(shard)
