"""vLLM's FP8 layers across weight syncs, in place.

vLLM runs each quantized layer's `quant_method.process_weights_after_loading` once, after the engine's first load:
it may hand back the weight and scale as new parameters (plain `Parameter`s, without the `weight_loader` and
sharding attributes the next `load_weights` dispatches on) and, for MoE, build kernels that hold those tensors. An
RL run loads new weights every step, so here each result goes back into the storage of the parameter the layer had
(same shape and dtype: the load plan's recorded copies, vLLM's loaders and captured CUDA graphs all point at it), at
the engine's start and again once after every sync's last bucket. vLLM's own `replace_parameter`, inside its fp8
module, is swapped for one that copies in place while the methods run, so that a kernel built inside them sees the
live parameters; what a kernel replaced through its own import is folded back after. A kernel that rewrites a
weight into another shape or dtype (a packed scale layout) is refused with the layer's name: a later sync could
not load into it.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator

import torch

# the parameters a sync writes into an FP8 layer: Fp8LinearMethod's, then Fp8MoEMethod's
FP8_PARAMS = ("weight", "weight_scale_inv", "w13_weight", "w2_weight", "w13_weight_scale_inv", "w2_weight_scale_inv")
FP8_MODULE = "vllm.model_executor.layers.quantization.fp8"  # where vLLM's FP8 methods call replace_parameter
# set by a method that must run once per layer; cleared so each sync's weights are processed again
ONCE_GUARD = "_already_called_process_weights_after_loading"


def fp8_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every layer vLLM built with an FP8 method (Fp8LinearMethod, Fp8MoEMethod)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(getattr(module, "quant_method", None)).__name__.startswith("Fp8")
    ]


def _live(layer: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name in FP8_PARAMS if isinstance(p := getattr(layer, name, None), torch.nn.Parameter)}


def _layout(tensor: torch.Tensor) -> tuple:
    """What must match for a copy into the live parameter to mean the same tensor to a kernel: a transposed or
    column-major view of a square weight has the shape but not the strides."""
    return tuple(tensor.shape), tensor.dtype, tensor.stride()


def _fold(layer: torch.nn.Module, name: str, param: torch.nn.Parameter, data: Any, where: str) -> None:
    """`data` into `param`'s storage; `param` back on the layer."""
    data = data.data if isinstance(data, torch.Tensor) else data
    if not isinstance(data, torch.Tensor) or _layout(data) != _layout(param):
        got = f"{_layout(data)}" if isinstance(data, torch.Tensor) else repr(data)
        raise RuntimeError(
            f"vLLM's FP8 kernel rewrote {where}.{name} as {got} (shape, dtype, strides; loaded as "
            f"{_layout(param)}): "
            f"weight syncs load in place and cannot follow a repacked layout; run with a block-FP8 kernel that "
            f"keeps it (e.g. VLLM_USE_DEEP_GEMM=0) or actor_rollout_ref.rollout.quantization=null"
        )
    if data.data_ptr() != param.data_ptr():
        param.data.copy_(data)
    setattr(layer, name, param)


def _keeping_params(layer: torch.nn.Module, where: str, run: Callable[[], None]) -> None:
    """`run()` (a post-load processing of `layer`), then every FP8 parameter it replaced folded back."""
    live = _live(layer)
    run()
    for name, param in live.items():
        if getattr(layer, name, None) is not param:
            _fold(layer, name, param, getattr(layer, name, None), where)


def process_in_place(layer: torch.nn.Module, where: str = "layer") -> None:
    """Run the layer's process_weights_after_loading again and keep its parameters (objects and storage)."""
    if hasattr(layer, ONCE_GUARD):
        delattr(layer, ONCE_GUARD)
    _keeping_params(layer, where, lambda: layer.quant_method.process_weights_after_loading(layer))


def _in_place_replace(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's `replace_parameter(layer, name, new_data)`, copying into the live parameter where the new data has
    its layout (anything else is left to `original`, and to the fold's refusal after)."""

    def replace(layer: torch.nn.Module, name: str, new_data: Any, *args: Any, **kwargs: Any) -> Any:
        param = getattr(layer, name, None)
        data = new_data.data if isinstance(new_data, torch.Tensor) else None
        if isinstance(param, torch.nn.Parameter) and data is not None and _layout(data) == _layout(param):
            if data.data_ptr() != param.data_ptr():
                param.data.copy_(data)
            return None
        return original(layer, name, new_data, *args, **kwargs)

    return replace


@contextlib.contextmanager
def in_place_replace(module_name: str = FP8_MODULE) -> Iterator[None]:
    """While open, `module_name`'s replace_parameter copies in place (nothing changes where it has none)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        module = None
    original = getattr(module, "replace_parameter", None)
    if original is None:
        yield
        return
    module.replace_parameter = _in_place_replace(original)
    try:
        yield
    finally:
        module.replace_parameter = original


@contextlib.contextmanager
def in_place_processing(quantization: str | None, module_name: str = FP8_MODULE) -> Iterator[None]:
    """While the engine is built: each FP8 method's first processing keeps the parameters it was loaded into.
    Nothing changes without `quantization`."""
    if not quantization:
        yield
        return
    try:
        methods = [getattr(importlib.import_module(module_name), n) for n in ("Fp8LinearMethod", "Fp8MoEMethod")]
    except (ImportError, AttributeError):
        methods = []
    originals = [method.process_weights_after_loading for method in methods]

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def process(self: Any, layer: torch.nn.Module) -> None:
            _keeping_params(layer, getattr(layer, "prefix", "layer"), lambda: original(self, layer))

        return process

    for method, original in zip(methods, originals):
        method.process_weights_after_loading = wrap(original)
    try:
        with in_place_replace(module_name):
            yield
    finally:
        for method, original in zip(methods, originals):
            method.process_weights_after_loading = original


class Fp8Layers:
    """A built engine's FP8 layers: after every sync's last bucket, each runs its post-load processing once."""

    def __init__(self, model: torch.nn.Module, module_name: str = FP8_MODULE) -> None:
        self.layers = fp8_layers(model)
        self.module_name = module_name
        if not self.layers:
            raise RuntimeError(
                "actor_rollout_ref.rollout.quantization=fp8 but vLLM built no FP8 layer: its quantization_config "
                "override did not take (vLLM's version?)"
            )

    @torch.no_grad()
    def after_sync(self) -> None:
        with in_place_replace(self.module_name):
            for name, layer in self.layers:
                process_in_place(layer, name)
