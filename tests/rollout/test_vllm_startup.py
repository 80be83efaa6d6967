"""How dagrl starts vLLM: with rollout.cache_dir set, its cache root (VLLM_CACHE_ROOT: compiled graphs, model info)
and Triton's kernel cache are there when the engine starts, otherwise vLLM's own; and the model class is inspected in
this process rather than in a fresh Python subprocess."""

import os
import sys
import types

import pytest
import torch

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.engine.rollout.vllm import vllm_cache_root


def cfg_of(*overrides: str) -> Cfg:
    return Cfg(compose(["actor_rollout_ref.rollout.name=vllm", *overrides]))


def test_default_is_vllms_own_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    assert vllm_cache_root(cfg_of(f"trainer.default_local_dir={tmp_path}/run")) is None  # the environment decides


def test_a_cache_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "machine"))
    monkeypatch.chdir(tmp_path)
    assert vllm_cache_root(cfg_of("actor_rollout_ref.rollout.cache_dir=run/vllm_cache")) == str(
        tmp_path / "run/vllm_cache"
    )
    # the documented choice for runs that resume on other machines: an interpolation of the checkpoint root
    assert (
        vllm_cache_root(
            cfg_of(
                "trainer.default_local_dir=/data/run",
                "actor_rollout_ref.rollout.cache_dir=${trainer.default_local_dir}/vllm_cache",
            )
        )
        == "/data/run/vllm_cache"
    )


class _Started(Exception):
    pass


def test_engine_starts_with_the_cache_root_set(tmp_path, monkeypatch):
    """The variable is set before vLLM's engine is built (vLLM reads it while starting), not after."""
    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            seen["root"] = os.environ.get("VLLM_CACHE_ROOT")
            seen["triton"] = os.environ.get("TRITON_CACHE_DIR")
            raise _Started

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec

    with pytest.raises(_Started):
        VLLMRollout(VLLMRolloutSpec(model_path=str(tmp_path), cache_root=str(tmp_path / "cache")), [2], 0)
    assert seen == {"root": str(tmp_path / "cache"), "triton": str(tmp_path / "cache" / "triton")}
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))  # a user's own Triton cache is kept
    with pytest.raises(_Started):
        VLLMRollout(VLLMRolloutSpec(model_path=str(tmp_path), cache_root=str(tmp_path / "cache")), [2], 0)
    assert seen == {"root": str(tmp_path / "cache"), "triton": str(tmp_path / "mine")}
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with pytest.raises(_Started):
        VLLMRollout(VLLMRolloutSpec(model_path=str(tmp_path)), [2], 0)
    assert seen == {"root": None, "triton": None}  # no cache_root: the environment is not touched


def test_model_inspection_runs_in_this_process_while_the_engine_starts(tmp_path, monkeypatch):
    """vLLM's registry inspects the model class through `_run_in_subprocess`: while dagrl builds the engine that
    call runs its function here; afterwards vLLM's own function is back."""

    def in_a_subprocess(fn):
        return "subprocess"

    registry = types.ModuleType("vllm.model_executor.models.registry")
    registry._run_in_subprocess = in_a_subprocess
    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            seen["inspected"] = registry._run_in_subprocess(lambda: "this process")
            raise _Started

    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    for name, module in {
        "vllm": vllm,
        "vllm.model_executor": types.ModuleType("vllm.model_executor"),
        "vllm.model_executor.models": types.ModuleType("vllm.model_executor.models"),
        "vllm.model_executor.models.registry": registry,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules["vllm.model_executor.models"].registry = registry
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec

    with pytest.raises(_Started):
        VLLMRollout(VLLMRolloutSpec(model_path=str(tmp_path)), [2], 0)
    assert seen["inspected"] == "this process"
    assert registry._run_in_subprocess is in_a_subprocess  # restored, also when the engine failed to start
