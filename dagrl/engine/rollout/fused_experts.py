"""One MoE tensor, as the checkpoint and the weight sync name it, into transformers' parameters of that MoE layer.

transformers >= 5 keeps an MoE layer's experts in two 3-D parameters, `<layer>.mlp.experts.gate_up_proj`
[E, 2·I, H] (each expert's gate rows, then its up rows) and `<layer>.mlp.experts.down_proj` [E, H, I], while the
checkpoint, vLLM and the actor's export name one 2-D tensor per expert (`<layer>.mlp.experts.<e>.gate_proj.weight`,
...). A family may also name the block and the projections otherwise in its checkpoints (Mixtral:
`<layer>.block_sparse_moe.experts.<e>.w1.weight`, router `<layer>.block_sparse_moe.gate.weight`; its Family line's
moe_block and expert_names), which transformers renames to `mlp` on load. `slot` finds where such a tensor goes in
the model's parameters; `Filled` tells when every slot of a parameter has arrived.
"""

from __future__ import annotations

import re
from collections import defaultdict

import torch

from dagrl.models.families import FAMILIES

_PARTS = ("gate_proj", "up_proj", "down_proj")
# checkpoint name of a projection -> its part in transformers' terms, and the MoE block names of every family
_ROLE = {name: part for kind in FAMILIES.values() if kind.moe for name, part in zip(kind.expert_names, _PARTS)}
_BLOCKS = "|".join(sorted({re.escape(kind.moe_block) for kind in FAMILIES.values() if kind.moe}))
_EXPERT = re.compile(
    rf"^(?P<layer>.*)\.(?:{_BLOCKS})\.experts\.(?P<index>\d+)\.(?P<kind>{'|'.join(map(re.escape, _ROLE))})\.weight$"
)
_ROUTER = re.compile(rf"^(?P<layer>.*)\.(?:{_BLOCKS})\.gate\.weight$")
_FUSED = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}


def slot(params: dict[str, torch.Tensor], name: str) -> tuple[str, int, str, torch.Tensor] | None:
    """(model parameter name, expert, part, the view of that parameter that `name` fills), or None when `name` is
    neither one expert's tensor of a fused parameter the model has nor a router the model names otherwise."""
    router = _ROUTER.match(name)
    if router is not None:
        target = f"{router['layer']}.mlp.gate.weight"
        return (target, 0, "router", params[target]) if target in params else None
    match = _EXPERT.match(name)
    if match is None:
        return None
    part = _ROLE[match["kind"]]
    fused_name = f"{match['layer']}.mlp.experts.{_FUSED[part]}"
    fused = params.get(fused_name)
    index = int(match["index"])
    if fused is None or fused.dim() != 3 or index >= fused.shape[0]:
        return None
    expert = fused[index]
    if part != "down_proj":
        half = expert.shape[0] // 2
        expert = expert[:half] if part == "gate_proj" else expert[half:]
    return fused_name, index, part, expert


class Filled:
    """The slots a sync wrote: a parameter counts as loaded once each of its parts has arrived (a fused
    parameter's: every expert's gate and up, or down; a renamed router: the one tensor)."""

    def __init__(self) -> None:
        self.parts: dict[str, set[tuple[int, str]]] = defaultdict(set)

    def add(self, fused_name: str, index: int, kind: str) -> None:
        self.parts[fused_name].add((index, kind))

    def complete(self, params: dict[str, torch.Tensor]) -> set[str]:
        done = set()
        for fused_name, parts in self.parts.items():
            if fused_name.endswith(".gate_up_proj"):
                needed = params[fused_name].shape[0] * 2
            elif fused_name.endswith(".down_proj"):
                needed = params[fused_name].shape[0]
            else:
                needed = 1
            if len(parts) == needed:
                done.add(fused_name)
        return done
