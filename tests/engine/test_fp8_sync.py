"""The vLLM rollout's FP8 sync against a fake of vLLM's API and of its FP8 layers (CI has no vLLM): the engine is built
with FP8 layers of the resolved scale layout; each sync sends FP8 weights with their scales, loads them through the
model's loader once and replays the recorded copies after; each FP8 layer's post-load processing runs once per sync.
Block scales: its results land in the parameters the layer was built with (the recorded copies and vLLM's loaders
point at them). Per-tensor scales (vLLM 0.26's per-tensor method, mirrored below): the loaders write the loaded
parameters, and the kernel reads the transposed weight and the one scale it first got, refreshed in place."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from dagrl.utils.pins import PINS
from dagrl.engine.rollout import fp8, fp8_vllm
from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
from dagrl.engine.rollout.weight_manifest import WeightManifest
from dagrl.plan.presets import config_fields

FP8_MODULE = types.ModuleType(fp8_vllm.FP8_MODULE)
LINEAR = "model.layers.0.self_attn.o_proj"
SHAPE = (256, 200)


def replace_parameter(layer, name, new_data):  # vLLM's: a new plain Parameter, loader attributes lost
    setattr(layer, name, torch.nn.Parameter(new_data, requires_grad=False))


class Fp8LinearMethod:
    """vLLM's FP8 linear method as it treats a loaded layer. Block scales: the weight replaced through its module's
    replace_parameter, the scale replaced directly (as a kernel that imported the function itself does).
    Per-tensor (vLLM 0.26 without weight_block_size, here on a fused layer): each shard requantized in place to the
    largest shard scale (only while the scale is still per shard, and loaded: above e4m3's lowest), then the weight
    handed back transposed (a view of its storage) and the scale as one 0-d tensor, both through
    replace_parameter."""

    def __init__(self, per_tensor: bool = False):
        self.per_tensor = per_tensor

    def process_weights_after_loading(self, layer):
        layer.processed = getattr(layer, "processed", 0) + 1
        if not self.per_tensor:
            FP8_MODULE.replace_parameter(layer, "weight", layer.weight.data.clone())
            layer.weight_scale_inv = torch.nn.Parameter(layer.weight_scale_inv.data.clone(), requires_grad=False)
            return
        weight, scale = layer.weight, layer.weight_scale
        top = scale.max()
        if scale.ndim != 0 and scale[-1] > torch.finfo(torch.float8_e4m3fn).min:
            start = 0
            for index, width in enumerate(layer.logical_widths):
                shard = weight.data[start : start + width]
                shard.copy_((shard.float() * scale[index] / top).clamp(-448, 448).to(torch.float8_e4m3fn))
                start += width
        FP8_MODULE.replace_parameter(layer, "weight", weight.t().data)
        FP8_MODULE.replace_parameter(layer, "weight_scale", top.data)


FP8_MODULE.replace_parameter = replace_parameter
FP8_MODULE.Fp8LinearMethod = Fp8LinearMethod
FP8_MODULE.Fp8MoEMethod = type("Fp8MoEMethod", (Fp8LinearMethod,), {})


def fp8_linear(shape: tuple[int, int]) -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.zeros(shape, dtype=torch.float8_e4m3fn), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(torch.zeros(fp8.scale_shape(shape)), requires_grad=False)
    layer.weight.weight_loader = layer.weight_scale_inv.weight_loader = "the loader vLLM dispatches on"
    layer.quant_method = Fp8LinearMethod()
    return layer


class FakeFp8Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([torch.nn.Module()])
        self.model.layers[0].self_attn = torch.nn.Module()
        self.model.layers[0].self_attn.o_proj = fp8_linear(SHAPE)
        self.model.norm = torch.nn.Module()
        self.model.norm.weight = torch.nn.Parameter(torch.zeros(200), requires_grad=False)
        self.calls = 0

    def load_weights(self, weights):  # vLLM's loader: a copy into each named parameter
        self.calls += 1
        params = dict(self.named_parameters())
        for name, tensor in weights:
            params[name].data.copy_(tensor)
        return {name for name, _ in weights}


QKV = "model.layers.0.self_attn.qkv_proj"
SHARDS = {"q": (0, 128), "k": (128, 64), "v": (192, 64)}  # SmolLM2-like: q, k, v not on whole 128-blocks
HIDDEN = 96


class FakePerTensorModel(torch.nn.Module):
    """A fused qkv layer as vLLM builds it per-tensor: weight [q+k+v, hidden] and one scale slot per shard."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([torch.nn.Module()])
        self.model.layers[0].self_attn = torch.nn.Module()
        layer = self.model.layers[0].self_attn.qkv_proj = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.zeros(256, HIDDEN, dtype=torch.float8_e4m3fn), requires_grad=False)
        layer.weight_scale = torch.nn.Parameter(torch.full((3,), torch.finfo(torch.float32).min), requires_grad=False)
        layer.weight.weight_loader = layer.weight_scale.weight_loader = "the loader vLLM dispatches on"
        layer.logical_widths = [width for _, width in SHARDS.values()]
        layer.quant_method = Fp8LinearMethod(per_tensor=True)
        self.calls = 0

    def load_weights(self, weights):  # vLLM's stacked loading: q/k/v into qkv_proj's rows and scale slots
        self.calls += 1
        params = dict(self.named_parameters())
        for name, tensor in weights:
            shard = name.split(".")[-2].removesuffix("_proj")
            param = params[name.replace(f"{shard}_proj", "qkv_proj")]
            assert getattr(param, "weight_loader", None), f"{name}: loaded into the kernel's form"
            start, width = SHARDS[shard]
            if name.endswith("weight"):
                param.data[start : start + width].copy_(tensor)
            else:
                param.data[list(SHARDS).index(shard)].copy_(tensor[0])
        return {name.replace(f"{name.split('.')[-2]}", "qkv_proj") for name, _ in weights}


class FakeLLM:
    def __init__(self, **kwargs):
        per_tensor = "weight_block_size" not in kwargs.get("hf_overrides", {}).get("quantization_config", {"x": 0})
        self.kwargs, self.model = kwargs, FakePerTensorModel() if per_tensor else FakeFp8Model()
        for module in self.model.modules():  # the engine's own first processing, after its (dummy) load
            if hasattr(module, "quant_method"):
                module.quant_method.process_weights_after_loading(module)
        worker = types.SimpleNamespace(get_model=lambda: self.model)
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))
        self.llm_engine.model_executor.driver_worker.worker = worker


@pytest.fixture
def fake_fp8_module(monkeypatch):
    monkeypatch.setitem(sys.modules, fp8_vllm.FP8_MODULE, FP8_MODULE)


@pytest.fixture
def fake_vllm(monkeypatch, fake_fp8_module):
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def actor_weights(seed: int) -> list[list[tuple[str, torch.Tensor]]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        [(f"{LINEAR}.weight", torch.randn(SHAPE, generator=generator).to(torch.bfloat16))],
        [("model.norm.weight", torch.randn(200, generator=generator).to(torch.bfloat16))],
    ]


@pytest.fixture
def model_path(tmp_path) -> str:
    """A model directory of config.json alone (the FP8 engine reads which routers to leave unquantized from it):
    two Qwen3-MoE layers."""
    config = {"model_type": "qwen3_moe", **config_fields("qwen3_moe", "tiny", num_layers=2)}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def engine(model_path: str, **spec) -> VLLMRollout:
    manifest = WeightManifest(model_path, {f"{LINEAR}.weight": SHAPE, "model.norm.weight": (200,)})
    return VLLMRollout(VLLMRolloutSpec(model_path=model_path, **spec), [2], 0, manifest=manifest)


def test_each_per_tensor_sync_refreshes_the_kernels_transposed_weight_and_one_scale(fake_vllm, model_path):
    names = {shard: f"model.layers.0.self_attn.{shard}_proj.weight" for shard in SHARDS}
    manifest = WeightManifest(model_path, {names[s]: (width, HIDDEN) for s, (_, width) in SHARDS.items()})
    spec = VLLMRolloutSpec(model_path=model_path, quantization="fp8", fp8_scales="tensor", bucket_bytes=1 << 20)
    rollout = VLLMRollout(spec, [2], 0, manifest=manifest)
    assert "weight_block_size" not in rollout.llm.kwargs["hf_overrides"]["quantization_config"]
    layer = rollout.model.model.layers[0].self_attn.qkv_proj
    loaded = getattr(layer, fp8_vllm.LOADED)
    kernel_weight, kernel_scale = layer.weight, layer.weight_scale  # the engine's first processing handed these
    assert kernel_weight.shape == (HIDDEN, 256) and kernel_scale.shape == ()
    assert kernel_weight.data_ptr() == loaded["weight"].data_ptr()  # a transposed view of the loaded storage
    for version in (1, 2):
        generator = torch.Generator().manual_seed(version)
        sent = {
            s: torch.randn(width, HIDDEN, generator=generator) * (s == "k" and 4 or 1)
            for s, (_, width) in SHARDS.items()
        }
        metrics = rollout.load_weights(iter([[(names[s], t.to(torch.bfloat16)) for s, t in sent.items()]]), version)
        # what vLLM's per-tensor method leaves: each shard's FP8 weight requantized to the largest shard scale
        quantized = {s: fp8.quantize(t.to(torch.bfloat16), "tensor") for s, t in sent.items()}
        top = max(scale for _, scale in quantized.values())
        want = torch.cat(
            [(q.float() * scale / top).clamp(-448, 448).to(torch.float8_e4m3fn) for q, scale in quantized.values()]
        )
        assert layer.weight is kernel_weight and layer.weight_scale is kernel_scale  # what the kernel first read
        assert torch.equal(layer.weight.t().view(torch.uint8), want.view(torch.uint8))
        assert torch.equal(layer.weight_scale, top.reshape(())) and top == quantized["k"][1]  # k's 4x outlier scale
        assert layer.processed == 1 + version
        assert metrics["perf/weight_sync_gb"] == (256 * HIDDEN + 3 * 4) / 1e9  # FP8 weights and three 4-byte scales
    assert rollout.model.calls == 6  # each tensor through the loader once (recorded), then replayed
    assert rollout.load_plan.stats == {"replayed": 6, "loader": 6} and not rollout.load_plan.unplannable


def test_the_engine_is_built_with_block_fp8_layers_and_keeps_their_parameters(fake_vllm, model_path):
    rollout = engine(model_path, quantization="fp8", kv_cache_dtype="fp8", fp32_lm_head=True)
    assert rollout.llm.kwargs["quantization"] == "fp8" and rollout.llm.kwargs["kv_cache_dtype"] == "fp8"
    overrides = rollout.llm.kwargs["hf_overrides"]
    assert overrides["head_dtype"] == "float32" and overrides["quantization_config"]["weight_block_size"] == [128, 128]
    # the model's routers stay bf16 in the engine, as the sync sends them
    assert overrides["quantization_config"]["ignored_layers"] == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    layer = rollout.model.model.layers[0].self_attn.o_proj
    # the engine's first processing replaced both parameters; they are back, loader attributes and all
    assert layer.processed == 1 and layer.weight.weight_loader == layer.weight_scale_inv.weight_loader
    assert FP8_MODULE.replace_parameter is replace_parameter  # vLLM's own function again once the engine is up
    plain = engine(model_path)
    assert not {"quantization", "kv_cache_dtype", "hf_overrides"} & set(plain.llm.kwargs) and plain.fp8 is None


def test_each_sync_sends_fp8_weights_and_processes_each_layer_once(fake_vllm, model_path):
    rollout = engine(model_path, quantization="fp8", bucket_bytes=1 << 20)
    layer = rollout.model.model.layers[0].self_attn.o_proj
    weight, scale = layer.weight, layer.weight_scale_inv
    for version in (1, 2, 3):
        sent = actor_weights(seed=version)
        metrics = rollout.load_weights(iter(sent), version=version)
        want_weight, want_scale = fp8.quantize(sent[0][0][1])
        assert torch.equal(layer.weight.view(torch.uint8), want_weight.view(torch.uint8))
        assert torch.equal(layer.weight_scale_inv, want_scale)
        assert torch.equal(rollout.model.model.norm.weight, sent[1][0][1].float())
        assert layer.weight is weight and layer.weight_scale_inv is scale  # the recorded copies' targets
        assert layer.processed == 1 + version  # the engine's start, then once per sync
        # one FP8 bucket (weight, scale, norm) where the actor sent two bf16 ones: its real bytes
        assert metrics["perf/weight_sync_gb"] == (256 * 200 + 2 * 2 * 4 + 200 * 2) / 1e9
    assert rollout.model.calls == 3  # each tensor through the loader once (recorded), then replayed
    assert rollout.load_plan.stats == {"replayed": 6, "loader": 3} and not rollout.load_plan.unplannable


def test_a_kernel_that_repacks_a_weight_is_refused_by_name(fake_vllm):
    layer = fp8_linear((128, 128))

    class Repacking:
        def process_weights_after_loading(self, layer):
            layer.weight_scale_inv = torch.nn.Parameter(torch.zeros(128, 1, dtype=torch.int32), requires_grad=False)

    layer.quant_method = Repacking()
    with pytest.raises(RuntimeError, match=r"rewrote model.layers.3.mlp.down_proj.weight_scale_inv as \(\(128, 1\)"):
        fp8_vllm.process_in_place(layer, "model.layers.3.mlp.down_proj")

    class Transposing:  # a square weight handed back as its transpose: the shape and dtype match, the strides not
        def process_weights_after_loading(self, layer):
            FP8_MODULE.replace_parameter(layer, "weight", layer.weight.data.t())

    layer = fp8_linear((128, 128))
    layer.quant_method = Transposing()
    with (
        fp8_vllm.in_place_replace(),
        pytest.raises(RuntimeError, match=r"o_proj.weight as \(\(128, 128\), .*\(1, 128\)\)"),
    ):
        fp8_vllm.process_in_place(layer, "o_proj")


def test_a_per_tensor_kernel_keeps_the_form_it_first_took(fake_fp8_module):
    layer = FakePerTensorModel().model.layers[0].self_attn.qkv_proj
    fp8_vllm.process_in_place(layer, "qkv_proj", reshapes=True)  # the engine's first: transposed weight, one scale
    first = layer.weight
    with fp8_vllm.in_place_replace():
        fp8_vllm.process_in_place(layer, "qkv_proj", reshapes=True)
    assert layer.weight is first and layer.processed == 2

    class Regrouping(Fp8LinearMethod):  # a later result of yet another form: the kernel's tensors could not follow
        def process_weights_after_loading(self, layer):
            layer.weight_scale = torch.nn.Parameter(torch.ones(2), requires_grad=False)

    layer.quant_method = Regrouping()
    with pytest.raises(RuntimeError, match=r"rewrote qkv_proj.weight_scale as \(\(2,\)"):
        fp8_vllm.process_in_place(layer, "qkv_proj", reshapes=True)


def test_a_method_guarded_to_run_once_runs_again_each_sync():
    layer = fp8_linear((128, 128))

    class Guarded(Fp8LinearMethod):
        def process_weights_after_loading(self, layer):
            if getattr(layer, fp8_vllm.ONCE_GUARD, False):
                return
            super().process_weights_after_loading(layer)
            setattr(layer, fp8_vllm.ONCE_GUARD, True)

    layer.quant_method = Guarded()
    fp8_vllm.process_in_place(layer)
    fp8_vllm.process_in_place(layer)
    assert layer.processed == 2


def test_a_vllm_without_the_hooked_names_is_refused_before_its_engine_is_built(monkeypatch):
    fix = rf'pip install "vllm=={PINS["GPU kit"]["vllm"]}" .*, or set actor_rollout_ref.rollout.quantization=null$'
    with pytest.raises(RuntimeError, match=rf"quantization=fp8 .* module no_such_vllm_fp8 does not import .*{fix}"):
        fp8_vllm.in_place_processing("fp8", module_name="no_such_vllm_fp8").__enter__()
    without = {"Fp8LinearMethod": ("Fp8MoEMethod", "replace_parameter"), "replace_parameter": ("Fp8LinearMethod",)}
    for missing, present in without.items():
        module = types.ModuleType(f"fake_fp8_without_{missing}")
        for name in present:
            setattr(module, name, getattr(FP8_MODULE, name))
        monkeypatch.setitem(sys.modules, module.__name__, module)
        with pytest.raises(RuntimeError, match=rf"{module.__name__}.{missing} was not found in .*{fix}"):
            with fp8_vllm.in_place_processing("fp8", module_name=module.__name__):
                pytest.fail("the engine would be built")
        assert module.__dict__.get("Fp8MoEMethod", Fp8LinearMethod).process_weights_after_loading is (
            Fp8LinearMethod.process_weights_after_loading
        )  # nothing left hooked


def test_without_fp8_moe_method_a_dense_model_runs_and_an_moe_layer_is_refused_by_name(monkeypatch):
    module = types.ModuleType("fake_fp8_dense_only")
    module.Fp8LinearMethod, module.replace_parameter = Fp8LinearMethod, replace_parameter
    monkeypatch.setitem(sys.modules, module.__name__, module)
    experts = torch.nn.Module()  # an MoE layer vLLM built with a method the module does not name
    experts.w13_weight = torch.nn.Parameter(torch.zeros(2, 256, 128, dtype=torch.float8_e4m3fn), requires_grad=False)
    experts.quant_method = type("Fp8MoEMethod", (), {"process_weights_after_loading": lambda self, layer: None})()
    model = FakeFp8Model()
    with fp8_vllm.in_place_processing("fp8", module_name=module.__name__):
        for layer in (model.model.layers[0].self_attn.o_proj, experts):  # the engine's first processing
            layer.quant_method.process_weights_after_loading(layer)
    layers = fp8_vllm.Fp8Layers(model, module_name=module.__name__)  # dense: every FP8 layer hooked
    assert [name for name, _ in layers.layers] == [LINEAR]
    model.model.layers[0].mlp = torch.nn.Module()
    model.model.layers[0].mlp.experts = experts
    with pytest.raises(RuntimeError, match=r"model.layers.0.mlp.experts was built with Fp8MoEMethod, which is not"):
        fp8_vllm.Fp8Layers(model, module_name=module.__name__)


def test_no_fp8_layer_is_an_error():
    with pytest.raises(RuntimeError, match="built no FP8 layer"):
        fp8_vllm.Fp8Layers(torch.nn.Linear(2, 2))


def test_the_keys_reach_the_engine(tmp_path):
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.engine.rollout.vllm import vllm_spec

    def model_dir(name, **sizes):  # config.json alone: the scale layout reads the widths from it
        sizes = {"model_type": "llama", "num_hidden_layers": 2, "vocab_size": 64, **sizes}
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(sizes))
        return str(tmp_path / name)

    smollm2 = model_dir(
        "smollm2", hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536
    )
    qwen3 = model_dir(
        "qwen3", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=12288
    )

    def spec(*overrides, path="/m"):
        cfg = Cfg(compose(list(overrides)))
        shape = types.SimpleNamespace(rollout_tp=1, max_model_len=64, pool="colocated")
        return vllm_spec(types.SimpleNamespace(cfg=cfg, shape=shape, model_path=path, dtype="bfloat16"))

    plain = spec()  # no FP8: config.json is not read
    assert (plain.quantization, plain.kv_cache_dtype, plain.bucket_bytes) == (None, "auto", 512 << 20)
    fp8_spec = spec(
        "actor_rollout_ref.rollout.quantization=fp8",
        "actor_rollout_ref.rollout.kv_cache_dtype=fp8_e4m3",
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=64",
        path=qwen3,
    )
    assert (fp8_spec.quantization, fp8_spec.kv_cache_dtype, fp8_spec.bucket_bytes) == ("fp8", "fp8_e4m3", 64 << 20)
    assert fp8_spec.fp8_scales == "block"  # auto, on widths in whole 128-blocks
    on = "actor_rollout_ref.rollout.quantization=fp8"
    assert spec(on, path=smollm2).fp8_scales == "tensor"  # auto, on q width 576
    assert spec(on, "actor_rollout_ref.rollout.fp8_scales=tensor", path=qwen3).fp8_scales == "tensor"
    assert spec(on, "actor_rollout_ref.rollout.fp8_scales=block").fp8_scales == "block"  # as set: nothing read
