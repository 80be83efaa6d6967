"""The Megatron actor's hidden states per stage (embedding, each global decoder layer, the final norm), recorded
by forward hooks during one log-prob pass and collected from every rank, and the comparison that names the first
stage where two models part: its relative difference (max |a - b| / max |b|) against the floor measured at that
stage, both in one `StageGap` each."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from dagrl.doctor.probe import Probe, recording


OUTPUT_STAGE = "output layer"  # what no hidden state shows: the head (its logits are the log-probs themselves)


@dataclass(frozen=True)
class StageGap:
    stage: str
    gap: float  # relative difference of the side's hidden states from the reference's
    floor: float  # the same measured between HF at the side's dtype and the reference


def order(stage: str) -> int:
    """embedding < layer 0 < layer 1 < ... < final norm."""
    if stage == "embedding":
        return -1
    if stage == "final norm":
        return 1 << 30
    return int(stage.split()[1])


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def compare(side: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], floor: dict[str, torch.Tensor]):
    """A StageGap per stage the side recorded, in model order."""
    return [
        StageGap(name, relative(side[name], reference[name]), relative(floor[name], reference[name]))
        for name in sorted(side, key=order)
    ]


def first_divergent(gaps: list[StageGap], factor: float, resolution: float) -> StageGap | None:
    """The first stage whose gap exceeds `factor` x its floor (and `resolution`, the dtype's own rounding)."""
    return next((g for g in gaps if g.gap > factor * g.floor and g.gap > resolution), None)


def actor_modules(actor) -> dict[str, torch.nn.Module]:
    """This rank's stages of the Megatron actor, by the names probe.stage_modules gives HF's."""
    stages = {}
    for chunk in actor.modules:
        if getattr(chunk, "pre_process", False):
            stages["embedding"] = chunk.embedding
        for layer in chunk.decoder.layers:
            stages[f"layer {layer.layer_number - 1}"] = layer
        if getattr(chunk, "post_process", False) and getattr(chunk.decoder, "final_layernorm", None) is not None:
            stages["final norm"] = chunk.decoder.final_layernorm
    return stages


def _tp_gathered(hidden: torch.Tensor) -> torch.Tensor:
    """Under sequence parallelism each TP rank holds a slice of the sequence (dim 0): the whole of it."""
    from megatron.core import parallel_state as ps

    group = ps.get_tensor_model_parallel_group()
    parts = [torch.empty_like(hidden) for _ in range(ps.get_tensor_model_parallel_world_size())]
    dist.all_gather(parts, hidden.contiguous(), group=group)
    return torch.cat(parts, dim=0)


def actor_stages(actor, probe: Probe, row: int) -> dict[str, torch.Tensor]:
    """The actor's hidden states ([S, H], float32, host) at every stage for row `row`, from all pipeline stages
    (collective: every rank calls it with the same row)."""
    recorded: dict[str, torch.Tensor] = {}
    with recording(actor_modules(actor), recorded):
        actor.compute_log_prob(
            probe.batch(slice(row, row + 1)), micro_batch_size=1, temperature=1.0, with_entropy=False
        )
    sequence_parallel = actor.tf_config.sequence_parallel
    length = probe.input_ids.shape[1]
    local = {}
    for name in sorted(recorded, key=order):  # one order on every TP rank: the gathers pair up
        hidden = recorded[name]
        if sequence_parallel:
            hidden = _tp_gathered(hidden.to(actor.device)).cpu()
        local[name] = hidden.reshape(-1, hidden.shape[-1])[:length]  # [S(+packing pad), 1, H] -> [S, H]
    if not dist.is_initialized():
        return local
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    return {name: hidden for part in everyone for name, hidden in part.items()}


def stage_tensors(actor, stage: str) -> list[str]:
    """The Megatron parameters behind `stage` on this rank: name, shape, the HF tensors they map to and how they
    are sharded (`rule` kind, TP or expert-TP rank/size, EP rank)."""
    from megatron.core import parallel_state as ps

    from dagrl.engine.megatron.weights import Rule, parallel_ranks, rule_for

    tied = bool(getattr(actor.hf_config, "tie_word_embeddings", False))
    model_type = getattr(actor.hf_config, "model_type", None)
    out = []
    for chunk in actor.modules:
        for name, param in chunk.named_parameters():
            rule = rule_for(chunk, name, tied, model_type)
            if rule is None:  # a tied output layer: the embedding's rows
                rule = Rule("vocab", ("model.embed_tokens.weight (tied)",))
            if (OUTPUT_STAGE if name.startswith("output_layer.") else stage_of(rule.hf_names[0])) != stage:
                continue
            rank, size, _ = parallel_ranks(rule.expert)
            where = f"{'expert-' if rule.expert else ''}TP {rank}/{size}"
            if rule.expert:
                where += f", EP {ps.get_expert_model_parallel_rank()}/{ps.get_expert_model_parallel_world_size()}"
            hf = ", ".join(rule.hf_names)
            out.append(f"{name} {tuple(param.shape)} <- {hf} ({rule.kind}, {where})")
    return out


def stage_of(hf_name: str) -> str:
    """The stage an HF tensor belongs to."""
    if hf_name.startswith("model.layers."):
        return f"layer {hf_name.split('.')[2]}"
    if hf_name.startswith("model.embed_tokens"):
        return "embedding"
    if hf_name.startswith("model.norm"):
        return "final norm"
    return OUTPUT_STAGE
