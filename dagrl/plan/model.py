"""Parameter counts of an HF decoder config (dense or MoE), whole and per rank of a Megatron layout.

Counted from config.json alone, so a 235B plan needs no weights. The per-rank split follows Megatron-Core:
attention, dense MLP and the vocabulary are sharded over TP; norms and the MoE router are replicated over TP;
experts are spread over EP and each expert's FFN over expert-TP; layers are split evenly over PP stages, the
embedding on the first stage and the final norm + output layer on the last (with tied embeddings and PP > 1
the last stage keeps its own copy of the embedding to project with). Megatron's vocabulary padding (at most
128 x TP rows) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from dagrl.engine.megatron.preflight import num_experts
from dagrl.models.families import FAMILIES


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    experts: int = 0  # routed experts per layer; 0 = dense
    moe_ffn: int = 0
    topk: int = 0

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> "ModelShape":
        heads = config["num_attention_heads"]
        experts = num_experts(SimpleNamespace(**config)) or 0
        return cls(
            model_type=config["model_type"],
            hidden=config["hidden_size"],
            ffn=config["intermediate_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            vocab=config["vocab_size"],
            tied=bool(config.get("tie_word_embeddings", False)),
            experts=experts,
            moe_ffn=config.get(FAMILIES[config["model_type"]].expert_ffn, 0) if experts else 0,
            topk=config.get("num_experts_per_tok", 0) if experts else 0,
        )

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qk_norm(self) -> bool:
        return FAMILIES[self.model_type].qk_norm

    # ---- one decoder layer, split by how Megatron shards it -------------------------------------
    def layer_tp_sharded(self) -> int:
        """Attention projections (+ Qwen2's QKV bias) and the dense MLP: divided over TP."""
        attention = self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden
        if FAMILIES[self.model_type].qkv_bias:
            attention += self.q_dim + 2 * self.kv_dim
        return attention + (0 if self.moe else 3 * self.hidden * self.ffn)

    def layer_replicated(self) -> int:
        """Two RMSNorms, Qwen3's per-head q/k norms and the MoE router: the same on every TP rank."""
        return 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0) + self.hidden * self.experts

    def layer_experts(self) -> int:
        """All routed experts of one layer (gate, up and down projections)."""
        return self.experts * 3 * self.hidden * self.moe_ffn

    def layer_params(self) -> int:
        return self.layer_tp_sharded() + self.layer_replicated() + self.layer_experts()

    def total_params(self) -> int:
        """Every distinct parameter, as `sum(p.numel() for p in hf_model.parameters())` counts them."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden

    def active_params(self) -> int:
        """Parameters one token passes through (MoE: only its top-k experts)."""
        if not self.moe:
            return self.total_params()
        return self.total_params() - self.layers * (self.experts - self.topk) * 3 * self.hidden * self.moe_ffn


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank of a pipeline stage holds, split by what the distributed optimizer shards them over."""

    dense: int  # sharded by the optimizer over DP x CP
    expert: int  # sharded by the optimizer over expert-DP
    trainable_dense: int
    trainable_expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert

    @property
    def trainable(self) -> int:
        return self.trainable_dense + self.trainable_expert


def stage_layers(shape: ModelShape, pp: int, stage: int, vpp: int = 1) -> list[range]:
    """Global layer ranges on pipeline stage `stage`: with VPP = v the model is cut into PP x v chunks and stage s
    holds chunks s, s + PP, s + 2 PP, ... (Megatron's interleaved assignment)."""
    per_chunk = shape.layers // (pp * vpp)
    return [range(c * per_chunk, (c + 1) * per_chunk) for c in range(stage, pp * vpp, pp)]


def rank_params(
    shape: ModelShape,
    *,
    tp: int,
    pp: int,
    ep: int,
    etp: int,
    stage: int,
    vpp: int = 1,
    trainable_top_layers: int | None = None,
) -> RankParams:
    """Parameters on one rank of PP stage `stage`; `trainable_top_layers` limits training to the top N layers
    and the final norm, as actor_rollout_ref.model.trainable_top_layers does."""
    layers = [layer for chunk in stage_layers(shape, pp, stage, vpp) for layer in chunk]
    first_trainable = shape.layers - trainable_top_layers if trainable_top_layers else 0
    trained_layers = sum(1 for layer in layers if layer >= first_trainable)
    per_layer_dense = shape.layer_tp_sharded() // tp + shape.layer_replicated()
    per_layer_expert = shape.layer_experts() // (ep * etp)
    vocab_shard = shape.vocab * shape.hidden // tp
    extra = vocab_shard if stage == 0 else 0
    last = stage == pp - 1
    if last:
        extra += shape.hidden + (vocab_shard if (not shape.tied or pp > 1) else 0)
    extra_trainable = 0 if trainable_top_layers else extra
    if last and trainable_top_layers:
        extra_trainable = shape.hidden  # the final norm trains with the top layers
    return RankParams(
        dense=len(layers) * per_layer_dense + extra,
        expert=len(layers) * per_layer_expert,
        trainable_dense=trained_layers * per_layer_dense + extra_trainable,
        trainable_expert=trained_layers * per_layer_expert,
    )


def _lora_linears(shape: ModelShape) -> dict[str, tuple[int, int, bool]]:
    """Each LoRA target's (in, out, column-parallel) on a dense decoder layer."""
    h, qkv = shape.hidden, shape.q_dim + 2 * shape.kv_dim
    return {
        "linear_qkv": (h, qkv, True),
        "linear_proj": (shape.q_dim, h, False),
        "linear_fc1": (h, 2 * shape.ffn, True),
        "linear_fc2": (shape.ffn, h, False),
    }


def lora_layer_params(shape: ModelShape, rank: int, targets: tuple[str, ...], tp: int) -> int:
    """One decoder layer's LoRA adapter parameters on one TP rank (engine/megatron/lora.py's layout: a
    column-parallel linear's B and a row-parallel one's A split over TP, the other factor whole); MoE experts
    take no adapter."""
    total, linears = 0, _lora_linears(shape)
    for name in targets:
        fan_in, fan_out, column = linears[name]
        total += rank * (fan_in + fan_out // tp) if column else rank * (fan_in // tp + fan_out)
    return total


def lora_merge_bytes(shape: ModelShape, targets: tuple[str, ...], tp: int, weight_bytes: int) -> int:
    """The merged-sync actor's transient per forward (engine/megatron/lora.py): the largest adapted linear's weight
    shard merged in fp32, then in the weight's dtype, alive for that linear's forward."""
    linears = _lora_linears(shape)
    return max((linears[name][0] * linears[name][1] // tp for name in targets), default=0) * (4 + weight_bytes)
