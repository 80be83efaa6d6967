"""Megatron-Core's MoE token dispatchers, as the engine holds them: found once when the model is built, and their
last forward's autograd graph let go after each schedule."""

from __future__ import annotations

from typing import Any

import torch


def moe_dispatchers(modules: list[torch.nn.Module]) -> list[Any]:
    """Every MoE layer's token dispatcher in the model chunks (none in a dense model)."""
    found = (getattr(layer, "token_dispatcher", None) for module in modules for layer in module.modules())
    return [dispatcher for dispatcher in found if dispatcher is not None]


def release_dispatch_graphs(dispatchers: list[Any]) -> None:
    """After a forward-backward schedule: Megatron's MoE token dispatchers keep the last forward's routing probs as
    attributes (`probs`, `local_probs`), autograd graph included. Through the router weight's gradient accumulator
    and the DDP hook on it, that graph holds the model: a reference cycle through C++ that Python's collector cannot
    see, so an MoE engine was never freed. The next forward sets them anew; none is read in between."""
    for dispatcher in dispatchers:
        for name, value in list(vars(dispatcher).items()):
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                setattr(dispatcher, name, None)
