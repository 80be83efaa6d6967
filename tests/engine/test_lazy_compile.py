"""megatron-core's jit_fuser as dagrl imports it: torch.compile's wrapper made at a fused function's first call, so
a process that never calls one does not import torch's compiler (dagrl/engine/megatron/lazy_compile.py)."""

from __future__ import annotations

import subprocess
import sys

import torch

from dagrl.engine.megatron.lazy_compile import lazy_compile

PROBE = """
import sys
from dagrl.engine.megatron import compat
from dagrl.engine.megatron.lazy_compile import lazy_compile, _DeferJitFuser
compat.import_megatron(keep_wandb=False)
import megatron.core.jit
from megatron.core.fusions import fused_bias_swiglu
print(megatron.core.jit.jit_fuser is lazy_compile, "torch._inductor.compile_fx" in sys.modules)
print(fused_bias_swiglu.swiglu.__wrapped__.__module__, any(isinstance(f, _DeferJitFuser) for f in sys.meta_path))
"""


def test_megatron_is_imported_with_its_fusions_compiled_at_their_first_call():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # jit_fuser is lazy_compile, the compiler (inductor) is not imported, a fusion is wrapped, the hook is gone
    assert done.stdout.split() == ["True", "False", "megatron.core.fusions.fused_bias_swiglu", "False"]


def test_the_wrapper_is_torch_compile_of_the_function_made_at_the_first_call(monkeypatch):
    made = []

    def compile_(fn):  # what torch.compile returns: a callable running fn
        made.append(fn)
        return lambda *args, **kwargs: ("compiled", fn(*args, **kwargs))

    monkeypatch.setattr(torch, "compile", compile_)

    @lazy_compile
    def double(x, scale=2):
        return x * scale

    class Norm:
        @lazy_compile
        def _norm(self, x):
            return x + 1

    assert made == [] and double.__name__ == "double" and double.__wrapped__.__name__ == "double"
    assert double(3) == ("compiled", 6) and double(3, scale=3) == ("compiled", 9)
    assert made == [double.__wrapped__]  # once, of the function itself
    assert Norm()._norm(1) == ("compiled", 2) and Norm()._norm(2) == ("compiled", 3)  # a method, bound as before
    assert made == [double.__wrapped__, Norm._norm.__wrapped__]
