"""One MoE expert's tensor, as the checkpoint and the weight sync name it, into transformers' fused expert tensors.

transformers >= 5 keeps an MoE layer's experts in two 3-D parameters, `<layer>.mlp.experts.gate_up_proj`
[E, 2·I, H] (each expert's gate rows, then its up rows) and `<layer>.mlp.experts.down_proj` [E, H, I], while the
checkpoint, vLLM and the actor's export name one 2-D tensor per expert (`<layer>.mlp.experts.<e>.gate_proj.weight`,
...). `slot` finds where such a tensor goes in the model's parameters; `Filled` tells when every slot of a fused
parameter has arrived.
"""

from __future__ import annotations

import re
from collections import defaultdict

import torch

_EXPERT = re.compile(r"^(?P<experts>.*\.experts)\.(?P<index>\d+)\.(?P<kind>gate_proj|up_proj|down_proj)\.weight$")
_FUSED = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}


def slot(params: dict[str, torch.Tensor], name: str) -> tuple[str, int, str, torch.Tensor] | None:
    """(fused parameter name, expert, part, the view of the fused parameter that `name` fills), or None when
    `name` is not one expert's tensor of a fused parameter the model has."""
    match = _EXPERT.match(name)
    if match is None:
        return None
    fused_name = f"{match['experts']}.{_FUSED[match['kind']]}"
    fused = params.get(fused_name)
    index = int(match["index"])
    if fused is None or fused.dim() != 3 or index >= fused.shape[0]:
        return None
    expert = fused[index]
    if match["kind"] != "down_proj":
        half = expert.shape[0] // 2
        expert = expert[:half] if match["kind"] == "gate_proj" else expert[half:]
    return fused_name, index, match["kind"], expert


class Filled:
    """The slots of fused parameters a sync wrote: a fused parameter counts as loaded once each of its experts'
    parts has arrived."""

    def __init__(self) -> None:
        self.parts: dict[str, set[tuple[int, str]]] = defaultdict(set)

    def add(self, fused_name: str, index: int, kind: str) -> None:
        self.parts[fused_name].add((index, kind))

    def complete(self, params: dict[str, torch.Tensor]) -> set[str]:
        done = set()
        for fused_name, parts in self.parts.items():
            kinds = 2 if fused_name.endswith("gate_up_proj") else 1
            if len(parts) == params[fused_name].shape[0] * kinds:
                done.add(fused_name)
        return done
