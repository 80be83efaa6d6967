"""vLLM's FP8 layers across weight syncs, in place.

vLLM runs each quantized layer's `quant_method.process_weights_after_loading` once, after the engine's first load:
it may hand back the weight and scale as new parameters (plain `Parameter`s, without the `weight_loader` and
sharding attributes the next `load_weights` dispatches on) and, for MoE, build kernels that hold those tensors. An
RL run loads new weights every step, so each layer's processing runs again once after every sync's last bucket, and
every tensor it hands back keeps the storage a kernel (and a captured CUDA graph) first saw.

With block scales the processed tensors have the loaded layout: each result goes back into the parameter the layer
was built with (the load plan's recorded copies and vLLM's loaders point at it). vLLM's own `replace_parameter`,
inside its fp8 module, is swapped for one that copies in place while the methods run, so that a kernel built inside
them sees the live parameters; what a kernel replaced through its own import is folded back after. A kernel that
rewrites a weight into another shape or dtype (a packed scale layout) is refused with the layer's name.

With per-tensor scales vLLM's method requantizes a fused layer's shards to their largest scale and hands back
another form: the weight transposed (a view of the loaded storage) and one scale for the layer (an expert's w13).
The layer then keeps two sets: the loaded parameters, put back on it before a sync loads, and the processed ones
the kernel reads, put back after; a later processing's results are copied into the first ones' storage.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from typing import Any, Callable, Iterable, Iterator

import torch

from dagrl.engine.rollout import fp8
from dagrl.engine.rollout.interface import WeightBucket
from dagrl.utils.pins import PINS

# the parameters a sync writes into an FP8 layer: Fp8LinearMethod's, then Fp8MoEMethod's, in either scale layout
FP8_PARAMS = (
    *("weight", "weight_scale_inv", "weight_scale"),
    *("w13_weight", "w2_weight", "w13_weight_scale_inv", "w2_weight_scale_inv", "w13_weight_scale", "w2_weight_scale"),
)
FP8_MODULE = "vllm.model_executor.layers.quantization.fp8"  # where vLLM's FP8 methods call replace_parameter
# set by a method that must run once per layer; cleared so each sync's weights are processed again
ONCE_GUARD = "_already_called_process_weights_after_loading"
LOADED = "_fp8_loaded"  # on a layer: {name: the parameter its loader writes}
PROCESSED = "_fp8_processed"  # on a per-tensor layer: {name: the tensor its kernel reads, where it is another}
KEY = "actor_rollout_ref.rollout.quantization"


def _unhooked(reason: str) -> RuntimeError:
    """The one line that refuses an FP8 rollout whose vLLM lacks what the in-place processing hooks (`reason`)."""
    tested = PINS["GPU kit"]["vllm"]
    try:
        installed = f"vLLM {importlib.metadata.version('vllm')}"
    except importlib.metadata.PackageNotFoundError:
        installed = "this install (no vllm distribution)"
    return RuntimeError(
        f"{KEY}=fp8 keeps vLLM's FP8 layers across weight syncs by hooking their processing, and {reason} in "
        f"{installed}: "
        f'pip install "vllm=={tested}" (the version dagrl\'s FP8 sync is tested with), or set {KEY}=null'
    )


def _fp8_module(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise _unhooked(f"the module {module_name} does not import ({err})") from err


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


def _target(layer: torch.nn.Module, name: str, data: torch.Tensor) -> torch.nn.Parameter | None:
    """Where a result `data` for `name` goes in place: the loaded parameter, else the processed tensor a kernel
    first read, whichever has its layout."""
    loaded = getattr(layer, LOADED, None)
    for param in (
        getattr(layer, name, None) if loaded is None else loaded.get(name),
        getattr(layer, PROCESSED, {}).get(name),
    ):
        if isinstance(param, torch.nn.Parameter) and _layout(data) == _layout(param):
            return param
    return None


def _fold(layer: torch.nn.Module, name: str, data: Any, where: str, reshapes: bool) -> None:
    """`data` into the storage of the tensor that keeps its layout, which goes back on the layer; with
    `reshapes` (per-tensor scales), a first result of another form becomes the processed tensor kept."""
    data = data.data if isinstance(data, torch.Tensor) else data
    target = _target(layer, name, data) if isinstance(data, torch.Tensor) else None
    if target is None and reshapes and isinstance(data, torch.Tensor) and name not in getattr(layer, PROCESSED):
        getattr(layer, PROCESSED)[name] = target = torch.nn.Parameter(data, requires_grad=False)
    if target is None:
        param = getattr(layer, LOADED)[name]
        got = f"{_layout(data)}" if isinstance(data, torch.Tensor) else repr(data)
        raise RuntimeError(
            f"vLLM's FP8 kernel rewrote {where}.{name} as {got} (shape, dtype, strides; loaded as "
            f"{_layout(param)}): "
            f"weight syncs load in place and cannot follow a repacked layout; run with a block-FP8 kernel that "
            f"keeps it (e.g. VLLM_USE_DEEP_GEMM=0) or actor_rollout_ref.rollout.quantization=null"
        )
    if data.data_ptr() != target.data_ptr():
        target.data.copy_(data)
    setattr(layer, name, target)


def loaded_form(layer: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Put the parameters vLLM's loaders write back on `layer` (recorded the first time); returns them."""
    if not hasattr(layer, LOADED):
        setattr(layer, LOADED, _live(layer))
        setattr(layer, PROCESSED, {})
    loaded = getattr(layer, LOADED)
    for name, param in loaded.items():
        setattr(layer, name, param)
    return loaded


def _keeping_params(layer: torch.nn.Module, where: str, run: Callable[[], None], reshapes: bool) -> None:
    """`run()` (a post-load processing of `layer`) on its loaded parameters, then every FP8 tensor it replaced
    folded back into the storage a kernel first saw."""
    loaded = loaded_form(layer)
    run()
    for name, param in loaded.items():
        got = getattr(layer, name, None)
        if got is not param and got is not getattr(layer, PROCESSED).get(name):
            _fold(layer, name, got, where, reshapes)


def process_in_place(layer: torch.nn.Module, where: str = "layer", reshapes: bool = False) -> None:
    """Run the layer's process_weights_after_loading again and keep its tensors (objects and storage)."""
    if hasattr(layer, ONCE_GUARD):
        delattr(layer, ONCE_GUARD)
    _keeping_params(layer, where, lambda: layer.quant_method.process_weights_after_loading(layer), reshapes)


def _in_place_replace(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's `replace_parameter(layer, name, new_data)`, copying into the loaded parameter or the processed tensor
    kept where the new data has its layout (anything else is left to `original`, and to the fold after)."""

    def replace(layer: torch.nn.Module, name: str, new_data: Any, *args: Any, **kwargs: Any) -> Any:
        data = new_data.data if isinstance(new_data, torch.Tensor) else None
        target = None if data is None else _target(layer, name, data)
        if target is not None:
            if data.data_ptr() != target.data_ptr():
                target.data.copy_(data)
            setattr(layer, name, target)
            return None
        return original(layer, name, new_data, *args, **kwargs)

    return replace


@contextlib.contextmanager
def in_place_replace(module_name: str = FP8_MODULE) -> Iterator[None]:
    """While open, `module_name`'s replace_parameter copies in place. A module without one is refused: its FP8
    methods would hand a kernel they build new tensors, which later syncs never write."""
    module = _fp8_module(module_name)
    original = getattr(module, "replace_parameter", None)
    if original is None:
        raise _unhooked(f"{module_name}.replace_parameter was not found")
    module.replace_parameter = _in_place_replace(original)
    try:
        yield
    finally:
        module.replace_parameter = original


@contextlib.contextmanager
def in_place_processing(
    quantization: str | None, layout: str = "block", module_name: str = FP8_MODULE
) -> Iterator[None]:
    """While the engine is built: each FP8 method's first processing keeps the parameters it was loaded into
    (and, with per-tensor scales, the processed tensors it hands back). Nothing changes without `quantization`.
    Refused before the engine is built where `module_name` lacks what is hooked."""
    if not quantization:
        yield
        return
    module = _fp8_module(module_name)
    if getattr(module, "Fp8LinearMethod", None) is None:
        raise _unhooked(f"{module_name}.Fp8LinearMethod was not found")
    # Fp8MoEMethod absent alone is left to the model: a dense one builds no MoE layer, and an MoE layer processed
    # unhooked has no loaded parameters recorded, which Fp8Layers refuses by the layer's name once the engine is up.
    methods = [m for n in ("Fp8LinearMethod", "Fp8MoEMethod") if (m := getattr(module, n, None)) is not None]
    originals = [method.process_weights_after_loading for method in methods]
    reshapes = layout == "tensor"

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def process(self: Any, layer: torch.nn.Module) -> None:
            _keeping_params(layer, getattr(layer, "prefix", "layer"), lambda: original(self, layer), reshapes)

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
    """A built engine's FP8 layers of one scale layout: a sync's tensors quantized on the way in and loaded into
    the loaded parameters; after its last bucket, each layer runs its post-load processing once."""

    def __init__(self, model: torch.nn.Module, layout: str = "block", module_name: str = FP8_MODULE) -> None:
        self.layers = fp8_layers(model)
        self.layout, self.module_name = layout, module_name
        if not self.layers:
            raise RuntimeError(
                "actor_rollout_ref.rollout.quantization=fp8 but vLLM built no FP8 layer: its quantization_config "
                "override did not take (vLLM's version?)"
            )
        for name, layer in self.layers:
            if _live(layer) and not hasattr(layer, LOADED):  # its first processing ran outside in_place_processing
                method = type(layer.quant_method).__name__
                raise _unhooked(
                    f"{name} was built with {method}, which is not hooked (only {module_name}'s Fp8LinearMethod "
                    f"and Fp8MoEMethod are, where found)"
                )

    def incoming(self, buckets: Iterable[WeightBucket], bucket_bytes: int) -> Iterator[WeightBucket]:
        """A sync's stream as FP8 weights and scales (fp8.quantized_buckets), each layer's loaded parameters put
        back first so that vLLM's loaders dispatch on them."""
        for _, layer in self.layers:
            loaded_form(layer)
        return fp8.quantized_buckets(buckets, bucket_bytes, self.layout)

    @torch.no_grad()
    def after_sync(self) -> None:
        with in_place_replace(self.module_name):
            for name, layer in self.layers:
                process_in_place(layer, name, self.layout == "tensor")
