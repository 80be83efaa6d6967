"""The vLLM rollout's adapter-only sync, against a fake of vLLM's API (CI has no vLLM): the engine is built once with
one LoRA slot of a rank vLLM accepts; each load_adapter writes the adapter as a PEFT directory and swaps it in under
a fresh id (the old one removed from the engine and from disk); every generate and request carries it; the engine
sleeps keeping its base weights."""

import dataclasses
import sys
import types
from pathlib import Path

import pytest
import torch
from lora_helpers import random_adapter
from tiny_models import load_hf, make_model_dir

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.engine.lora_peft import read_peft_dir
from dagrl.engine.rollout.interface import Request, SamplingSpec
from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
from dagrl.engine.rollout.vllm_lora import adapter_rank, base_layer_names


@dataclasses.dataclass
class LoRARequest:  # vllm.lora.request.LoRARequest's positional fields
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeEngine:
    """vLLM's LLMEngine as the rollout uses it; add_lora reads the directory as vLLM would."""

    def __init__(self, log):
        self.log = log
        self.model_executor = types.SimpleNamespace(
            driver_worker=types.SimpleNamespace(worker=types.SimpleNamespace(get_model=lambda: torch.nn.Linear(2, 2)))
        )

    def add_lora(self, request):
        self.log.append(("add", request.lora_int_id, read_peft_dir(request.lora_path)))
        return True

    def remove_lora(self, lora_id):
        self.log.append(("remove", lora_id))
        return True

    def add_request(self, request_id, prompt, params, lora_request=None):
        self.log.append(("request", request_id, lora_request))


class FakeLLM:
    def __init__(self, **kwargs):
        self.kwargs, self.log = kwargs, []
        self.llm_engine = FakeEngine(self.log)

    def generate(self, requests, params, use_tqdm=False, lora_request=None):
        self.log.append(("generate", lora_request))
        done = types.SimpleNamespace(index=0, token_ids=[3], stop_reason=None, logprobs=None)
        return [types.SimpleNamespace(outputs=[done]) for _ in requests]

    def sleep(self, level):
        self.log.append(("sleep", level))

    def wake_up(self, tags):
        pass

    def reset_prefix_cache(self):
        self.log.append(("reset",))


@pytest.fixture
def fake_vllm(monkeypatch):
    modules = {"vllm": types.ModuleType("vllm"), "vllm.lora": types.ModuleType("vllm.lora")}
    modules["vllm.lora.request"] = types.ModuleType("vllm.lora.request")
    modules["vllm.sampling_params"] = types.ModuleType("vllm.sampling_params")
    modules["vllm"].LLM = FakeLLM
    modules["vllm"].SamplingParams = lambda **kwargs: kwargs
    modules["vllm.lora.request"].LoRARequest = LoRARequest
    modules["vllm.sampling_params"].RequestOutputKind = types.SimpleNamespace(DELTA="delta")
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return load_hf(make_model_dir(tmp_path_factory.mktemp("base"), "llama"))


def engine(rank: int) -> VLLMRollout:
    return VLLMRollout(VLLMRolloutSpec(model_path="/models/base", lora_rank=rank, load_format="auto"), [2], 0)


def test_engine_is_built_once_with_one_slot_of_an_accepted_rank(fake_vllm):
    for rank, slot in ((1, 1), (4, 8), (32, 32), (33, 64), (512, 512)):
        kwargs = engine(rank).llm.kwargs
        assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"], kwargs["max_cpu_loras"]) == (
            True,
            slot,
            1,
            1,
        )
    plain = engine(0)
    assert "enable_lora" not in plain.llm.kwargs and plain.adapter is None
    with pytest.raises(RuntimeError, match="built without a LoRA slot"):
        plain.load_adapter(None)
    with pytest.raises(ValueError, match="lora.rank=513.*lora.merge=true"):
        engine(513)


def test_each_load_swaps_the_adapter_under_a_fresh_id(fake_vllm, base):
    rollout = engine(4)
    assert VLLMRollout.supports_adapter  # the engine kind, as pre-flight reads it
    first, second = random_adapter(base, seed=0), random_adapter(base, rank=4, targets=("q_proj",), seed=1)
    prompts = Batch({"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)})
    rollout.generate(prompts, SamplingSpec(response_length=2), seed=0)
    assert rollout.llm.log[-1] == ("generate", None)  # no adapter yet: the base
    metrics = rollout.load_adapter(first, version=1)
    assert metrics["perf/weight_sync_gb"] == sum(t.numel() * 4 for t in first.tensors.values()) / 1e9
    op, lora_id, loaded = rollout.llm.log[-2]
    assert (op, lora_id) == ("add", 1) and rollout.llm.log[-1] == ("reset",)  # KV cached under the base is stale
    assert all(torch.equal(loaded.tensors[k], first.tensors[k]) for k in first.tensors)
    first_dir = Path(rollout.adapter.request.lora_path)
    assert (first_dir / "adapter_config.json").is_file() and first_dir.parent == rollout.adapter.root
    rollout.generate(prompts, SamplingSpec(response_length=2), seed=0)
    assert rollout.llm.log[-1] == ("generate", LoRARequest("dagrl_adapter_1", 1, str(first_dir)))
    rollout.load_adapter(second, version=2)
    assert [entry[:2] for entry in rollout.llm.log[-3:]] == [("remove", 1), ("add", 2), ("reset",)]
    assert not first_dir.exists() and [p.name for p in rollout.adapter.root.iterdir()] == ["adapter_2"]
    assert rollout.llm.log[-2][2].target_modules == ("q_proj",) and rollout.version == 2
    rollout.submit([Request("r", (5, 6), SamplingSpec(response_length=2), seed=0)])
    assert rollout.llm.log[-1] == ("request", "r", rollout.adapter.request) and rollout.adapter.request.lora_int_id == 2
    with pytest.raises(RuntimeError, match="load_adapter with 1 requests in flight"):
        rollout.load_adapter(first)


def test_it_sleeps_keeping_the_base_and_needs_it_once(fake_vllm, base):
    rollout = VLLMRollout(VLLMRolloutSpec(model_path="/models/base", lora_rank=8), [2], 0)  # load_format=dummy
    assert rollout.needs_weights
    with pytest.raises(RuntimeError, match="no base weights"):
        rollout.load_adapter(random_adapter(base))
    rollout.weights_discarded = False  # as after the first (base) load_weights
    rollout.sleep()
    rollout.wake_weights()
    rollout.wake_cache()
    assert rollout.llm.log[-1] == ("sleep", 1) and not rollout.needs_weights
    plain = engine(0)
    plain.weights_discarded = False
    plain.sleep()
    assert plain.llm.log[-1] == ("sleep", 2) and plain.needs_weights  # without a slot: reloaded every wake


def test_the_slot_is_built_for_adapter_only_sync_only():
    def cfg(**lora):
        data = Cfg(compose([])).to_dict()
        if lora:
            data["actor_rollout_ref"]["model"]["lora"] = lora
        return Cfg(data)

    assert adapter_rank(cfg()) == 0  # no LoRA
    assert adapter_rank(cfg(rank=0, merge=False)) == 0
    assert adapter_rank(cfg(rank=16, merge=True)) == 0  # merged sync: full weights, no slot
    assert adapter_rank(cfg(rank=16, merge=False)) == 16


class WrappedModel(torch.nn.Module):
    """vLLM's model with LoRA on: every adaptable linear wrapped, its weight under `<module>.base_layer`."""

    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, prefix: str = "model", layers: int = 2, mapper=None):
        super().__init__()
        self.hf_to_vllm_mapper, self.loaded = mapper, []
        for i in range(layers):
            for module in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
                self._add(f"{prefix}.layers.{i}.{module}.base_layer", torch.nn.Linear(1, 1))
        self._add(f"{prefix}.embed_tokens", torch.nn.Embedding(1, 1))  # not wrapped

    def _add(self, path: str, leaf: torch.nn.Module) -> None:
        parent = self
        for part in path.split(".")[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(path.split(".")[-1], leaf)

    def load_weights(self, weights):
        names = [name for name, _ in weights]
        self.loaded += names
        return set(names)


def test_base_weights_load_into_the_wrapped_layers(fake_vllm, monkeypatch, tmp_path):
    """With LoRA on, a base sync's q/k/v/o/gate/up/down tensors arrive one level down (`base_layer`), the rest as
    they are: read off the live model, through its packed modules and its HF-to-vLLM renames."""
    base_dir = make_model_dir(tmp_path / "base", "llama")
    state = dict(load_hf(base_dir).state_dict())
    model = WrappedModel()
    monkeypatch.setattr(FakeEngine, "__init__", lambda self, log: setattr(self, "model_executor", executor(model)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    rollout = VLLMRollout(VLLMRolloutSpec(model_path=str(base_dir), lora_rank=8), [2], 0)
    rollout.load_plan = None  # vLLM's loader itself (the recorded plan replays what it does)
    projections = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    want = [
        name.replace(".weight", ".base_layer.weight") if name.split(".")[-2] in projections else name for name in state
    ]
    rollout._vllm_params = set(want)
    rollout.load_weights(iter([list(state.items())]))
    assert model.loaded == want and "model.embed_tokens.weight" in want and "model.norm.weight" in want
    assert sum(".base_layer." in name for name in want) == 7 * 2

    class PrefixMapper:  # a model whose vLLM names sit under language_model.
        def apply_list(self, names):
            return ["language_model." + name for name in names]

    rename = base_layer_names(WrappedModel(prefix="language_model.model", mapper=PrefixMapper()))
    assert rename("model.layers.1.mlp.up_proj.weight") == "model.layers.1.mlp.up_proj.base_layer.weight"
    assert rename("model.layers.1.input_layernorm.weight") == "model.layers.1.input_layernorm.weight"


def executor(model):
    return types.SimpleNamespace(
        driver_worker=types.SimpleNamespace(worker=types.SimpleNamespace(get_model=lambda: model))
    )


def test_adapters_go_to_tmpfs_only_where_two_fit():
    import shutil

    from dagrl.engine.rollout.vllm_lora import _tmpfs

    assert _tmpfs(1 << 50) is None  # 1 PiB: the temporary directory instead
    if Path("/dev/shm").is_dir() and shutil.disk_usage("/dev/shm").free > 64 << 20:
        assert _tmpfs(1 << 20) == "/dev/shm"
