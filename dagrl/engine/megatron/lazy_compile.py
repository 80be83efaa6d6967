"""megatron-core's fusions are decorated with `megatron.core.jit.jit_fuser`, which is `torch.compile`, while
megatron-core is imported: the decorator imports torch._dynamo and inductor there, about 1.4 s of CPU in every process
that imports megatron-core, also where no decorated function ever runs (on CPU dagrl turns the fusions off).
torch.compile only wraps a function when it decorates it and compiles at the wrapper's first call; `lazy_compile`
makes the same wrapper at the first call instead, so the same function is compiled at the same moment, and the import
happens only in a process that calls one.

compat.import_megatron imports megatron-core inside `deferred_compile()`, whose import hook swaps jit_fuser for
lazy_compile as megatron.core.jit is loaded, before any fusion module reads it."""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import sys
import types
from typing import Any, Callable, Iterator

JIT = "megatron.core.jit"


def lazy_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.compile(fn)`, made at the first call."""
    compiled: Callable[..., Any] | None = None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal compiled
        if compiled is None:
            import torch

            compiled = torch.compile(fn)
        return compiled(*args, **kwargs)

    return call


class _DeferJitFuser(importlib.abc.MetaPathFinder):
    """Loads megatron.core.jit with the finder that would have found it (the next on sys.meta_path), then swaps its
    jit_fuser before any fusion module imports it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != JIT:
            return None
        finders = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else []
        spec = next(
            (s for f in finders if hasattr(f, "find_spec") and (s := f.find_spec(fullname, path, target))), None
        )
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_defer(module: types.ModuleType) -> None:
            exec_module(module)
            import torch

            if module.jit_fuser is torch.compile:
                module.jit_fuser = lazy_compile

        spec.loader.exec_module = exec_and_defer  # type: ignore[method-assign]
        return spec


@contextlib.contextmanager
def deferred_compile() -> Iterator[None]:
    """Import megatron-core inside: its jit_fuser is lazy_compile (nothing changes where megatron.core.jit is
    loaded already, or where jit_fuser is not torch.compile)."""
    finder = _DeferJitFuser()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
