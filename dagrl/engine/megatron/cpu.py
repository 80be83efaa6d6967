"""Run megatron-core on a CPU-only torch build (gloo), for tests and the CPU quickstart.

Installed by `install_cpu_shim()`, and only when CUDA is absent. Megatron assumes CUDA in a few hundred places
(`torch.cuda.current_device()`, literal `device='cuda'`, `torch.cuda.synchronize`, CUDA RNG states, CUDA streams).
Rather than rewriting torch globals, every `megatron.core` module gets its own `torch` name bound to a proxy
module: the proxy forwards everything to torch, except tensor factories (a CUDA device becomes the CPU) and
`torch.cuda` (current device = CPU, synchronize/streams/events are no-ops, the "CUDA" RNG is the CPU
generator). Modules imported later are covered by an import hook.

What cannot be scoped to megatron's modules are tensor methods: `Tensor.to/cuda` with a CUDA device and
`Tensor.pin_memory` (calls that would raise on this build anyway) become CPU no-ops, and `Tensor.type()`
without arguments answers 'torch.cuda.*' (megatron's optimizer asserts on that string). These are wrapped
directly, not through a TorchFunctionMode, because a mode is not active inside autograd backward
(activation recompute would escape it).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import sys
import types
from typing import Any, Callable

import torch

logger = logging.getLogger(__name__)

_CPU = torch.device("cpu")
_FACTORIES = (
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "rand",
    "randn",
    "randint",
    "randperm",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "linspace",
    "eye",
    "empty_strided",
    "normal",
)
_installed = False


def _is_cuda(device: Any) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):  # a bare int is a CUDA ordinal
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


def _cpu_factory(factory: Callable) -> Callable:
    def create(*args: Any, **kwargs: Any) -> Any:
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = _CPU
        return factory(*args, **kwargs)

    create.__wrapped__ = factory
    return create


class _NoopStream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: Any, **kwargs: Any) -> "_NoopEvent":
        return _NoopEvent()

    def query(self) -> bool:
        return True


class _NoopEvent(_NoopStream):
    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass


def _make_cuda_proxy() -> types.ModuleType:
    """`torch.cuda` as megatron sees it on CPU."""
    cuda = types.ModuleType("torch.cuda")
    cuda.__getattr__ = lambda name: getattr(torch.cuda, name)  # type: ignore[attr-defined]
    cuda.current_device = lambda: _CPU
    cuda.device_count = lambda: 1
    cuda.synchronize = lambda *a, **k: None
    cuda.empty_cache = lambda: None
    cuda.Stream = _NoopStream
    cuda.Event = _NoopEvent
    cuda.stream = lambda stream=None: contextlib.nullcontext()
    cuda.current_stream = lambda *a, **k: _NoopStream()
    cuda.default_stream = lambda *a, **k: _NoopStream()
    # The "CUDA" generator megatron seeds and forks is the CPU generator.
    cuda.manual_seed = lambda seed: torch.manual_seed(seed)
    cuda.manual_seed_all = lambda seed: torch.manual_seed(seed)
    cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    cuda.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    cuda.memory_allocated = lambda *a, **k: 0
    cuda.max_memory_allocated = lambda *a, **k: 0
    return cuda


def _make_torch_proxy() -> types.ModuleType:
    proxy = types.ModuleType("torch")
    proxy.__getattr__ = lambda name: getattr(torch, name)  # type: ignore[attr-defined]
    for name in _FACTORIES:
        setattr(proxy, name, _cpu_factory(getattr(torch, name)))
    proxy.cuda = _make_cuda_proxy()
    return proxy


_TORCH_PROXY: types.ModuleType | None = None


def _bind_proxy(module: types.ModuleType) -> None:
    if getattr(module, "torch", None) is torch:
        module.torch = _TORCH_PROXY


class _MegatronImportHook(importlib.abc.MetaPathFinder):
    """Binds the proxy into every megatron.core module imported after the shim is installed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith("megatron.core"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_bind(module: types.ModuleType) -> None:
            exec_module(module)
            _bind_proxy(module)

        spec.loader.exec_module = exec_and_bind  # type: ignore[method-assign]
        return spec


def _patch_tensor_methods() -> None:
    to = torch.Tensor.to

    def to_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = _CPU
        if args and _is_cuda(args[0]):
            args = (_CPU, *args[1:])
        return to(self, *args, **kwargs)

    type_ = torch.Tensor.type

    def type_as_cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        name = type_(self, *args, **kwargs)
        if not args and not kwargs and name.startswith("torch.") and not name.startswith("torch.cuda."):
            return "torch.cuda." + name[len("torch.") :]
        return name

    torch.Tensor.to = to_cpu
    torch.Tensor.type = type_as_cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.Tensor.pin_memory = lambda self, *a, **k: self


def _patch_megatron() -> None:
    from megatron.core.tensor_parallel import random as mp_random
    from megatron.core.transformer import torch_norm
    from megatron.core.transformer.moe import moe_utils

    # CUDA RNG state save/restore (RNG tracker fork, activation recompute) -> the CPU generator.
    mp_random._get_cuda_rng_state = lambda *a, clone=False, **k: (
        torch.get_rng_state().clone() if clone else torch.get_rng_state()
    )
    mp_random._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)

    # WrappedTorchNorm refuses sequence parallel (Apex/TE norms are expected there). A torch norm works if its
    # params are tagged, so finalize_model_grads all-reduces their grads over the TP group.
    def torch_norm_new(
        cls: type, config: Any, hidden_size: int, eps: float = 1e-5, *args: Any, **kwargs: Any
    ) -> torch.nn.Module:
        norm_cls = {"LayerNorm": torch.nn.LayerNorm, "RMSNorm": torch.nn.RMSNorm}[config.normalization]
        norm = norm_cls(normalized_shape=hidden_size, eps=eps)
        if config.sequence_parallel:
            for param in norm.parameters():
                param.sequence_parallel = True
        return norm

    torch_norm.WrappedTorchNorm.__new__ = torch_norm_new

    # The router's TE gemm name is only defined when TE imports; None selects the torch path.
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None

    _patch_distributed_optimizer_load()


def _patch_distributed_optimizer_load() -> None:
    """Loading a distributed-optimizer checkpoint on the torch-Adam fallback (no Apex/TE) copies every key of
    the torch Adam state, 'step' included, which the checkpoint does not hold. Copy only the keys it has."""
    from megatron.core.optimizer import distrib_optimizer

    original = distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states

    def set_states(self: Any, model_param: torch.Tensor, tensors: dict[str, torch.Tensor]) -> None:
        if self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
            return original(self, model_param, tensors)
        group_index, group_order = self.model_param_group_index_map[model_param]
        main_param = self.optimizer.param_groups[group_index]["params"][group_order]
        targets = {"param": main_param, **self.optimizer.state[main_param]}
        with torch.no_grad():
            for key, target in targets.items():
                if key in tensors:
                    target.copy_(tensors[key])

    distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states = set_states


def is_installed() -> bool:
    return _installed


def install_cpu_shim() -> bool:
    """Install the shim when CUDA is absent; idempotent. Returns whether the shim is active."""
    global _installed, _TORCH_PROXY
    if torch.cuda.is_available():
        return False
    if _installed:
        return True
    _TORCH_PROXY = _make_torch_proxy()
    sys.meta_path.insert(0, _MegatronImportHook())
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron.core") and module is not None:
            _bind_proxy(module)
    _patch_tensor_methods()
    _patch_megatron()
    _installed = True
    logger.info("CUDA is absent: megatron-core runs on the CPU through dagrl's shim")
    return True
