"""Pre-flight of FP8 (dagrl/config/preflight/fp8.py): the rollout's FP8 needs vLLM, a first load from the sync, an
importance-sampling correction, widths FP8 GEMMs take and, with block scales, widths vLLM's block layers can split
(`auto` takes per-tensor scales where they cannot); the actor's FP8 needs widths FP8 GEMMs take; both need an FP8
GPU, and the actor TransformerEngine (checked where the run trains). benchmarks/fp8_learn.py's arms pass the input
checks on SmolLM2's shape."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.preflight import fp8
from dagrl.config.tree import Cfg
from dagrl.placement import ParallelLayout

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fp8_learn  # noqa: E402 - after the sys.path insert above

FP8_ROLLOUT = (
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.quantization=fp8",
    "actor_rollout_ref.actor.tis_imp_ratio_cap=2",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
)
FP8_TRAINING = "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8=hybrid"
# Qwen3-8B's widths: every split lands on whole 128-blocks at TP 1, 2, 4 and 8
QWEN3_8B = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
}


def cfg_of(*overrides: str) -> Cfg:
    return Cfg(compose(list(overrides)))


def check(overrides, hf_config=QWEN3_8B, tp: int = 1, rollout_tp: int = 1) -> None:
    fp8.check_fp8(cfg_of(*overrides), hf_config, ParallelLayout(tensor_model_parallel_size=tp), rollout_tp)


def test_null_and_a_good_fp8_config_pass():
    check(())  # FP8 off: nothing read of the model
    check((), hf_config={})
    for tp in (1, 2, 4, 8):
        check(FP8_ROLLOUT, rollout_tp=tp)
        check((FP8_TRAINING,), tp=tp)
    check((*FP8_ROLLOUT[:2], "actor_rollout_ref.actor.mis_ratio_high=2"))  # MIS corrects too


@pytest.mark.parametrize(
    "overrides,key,says",
    [
        (("actor_rollout_ref.rollout.quantization=fp8",), fp8.ROLLOUT_KEY, "the hf rollout has none"),
        (
            (*FP8_ROLLOUT, "actor_rollout_ref.rollout.load_format=auto"),
            "actor_rollout_ref.rollout.load_format",
            "=dummy",
        ),
        (FP8_ROLLOUT[:2], "actor_rollout_ref.actor.tis_imp_ratio_cap", "tis_imp_ratio_cap=2 with"),
        # TIS without the rollout's log-probs corrects nothing
        (FP8_ROLLOUT[:3], "actor_rollout_ref.actor.tis_imp_ratio_cap", "calculate_log_probs=true"),
    ],
)
def test_rollout_refusals_name_the_key_and_the_fix(overrides, key, says):
    with pytest.raises(ConfigError, match=says) as caught:
        check(overrides)
    assert caught.value.key == key


BLOCK = "actor_rollout_ref.rollout.fp8_scales=block"
TENSOR = "actor_rollout_ref.rollout.fp8_scales=tensor"
# SmolLM2-135M's widths: on whole 16s, not on whole 128-blocks (q 576, k/v 192)
SMOLLM2_135M = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}


def test_auto_scales_are_blocks_where_every_width_takes_them_else_per_tensor():
    assert fp8.scale_layout("auto", SMOLLM2_135M, 1) == "tensor"
    assert [fp8.scale_layout("auto", QWEN3_8B, tp) for tp in (1, 2, 4, 8, 16)] == ["block"] * 5
    llama2_7b = dict(QWEN3_8B, num_key_value_heads=32, intermediate_size=11008)
    assert [fp8.scale_layout("auto", llama2_7b, tp) for tp in (2, 4)] == ["block", "tensor"]  # MLP 2752 at TP 4
    assert fp8.scale_layout("block", QWEN3_8B, 1) == "block" and fp8.scale_layout("tensor", QWEN3_8B, 1) == "tensor"
    assert fp8.scale_layout("auto", {}, 1) == "block"  # no sizes: config.json's own check names what is missing


def test_widths_fp8_gemms_or_vllms_blocks_cannot_take():
    check(FP8_ROLLOUT, hf_config=SMOLLM2_135M)  # auto: per-tensor scales
    check((*FP8_ROLLOUT, TENSOR), hf_config=SMOLLM2_135M)
    with pytest.raises(
        ConfigError, match=r"q width 576, k/v width 192 per rollout TP rank \(TP=1\): set actor_"
    ) as caught:
        check((*FP8_ROLLOUT, BLOCK), hf_config=SMOLLM2_135M)  # on whole 16s, not on whole 128-blocks
    assert caught.value.key == fp8.SCALES_KEY and "fp8_scales=tensor" in str(caught.value)
    odd = dict(QWEN3_8B, hidden_size=4100)
    edge = dict(QWEN3_8B, hidden_size=4096 + 16)  # the input's last 128-block is partial: its own scale, no split
    check((*FP8_ROLLOUT, BLOCK), hf_config=edge)
    check((FP8_TRAINING,), hf_config=edge)
    for scales in (BLOCK, TENSOR):  # FP8 GEMMs take whole 16s in either layout
        with pytest.raises(ConfigError, match="hidden_size 4100 per rollout TP rank") as caught:
            check((*FP8_ROLLOUT, scales), hf_config=odd)
        assert caught.value.key == fp8.ROLLOUT_KEY
    with pytest.raises(ConfigError, match=r"hidden_size 4100 per TP rank \(TP=1\): drop \+actor_rollout_ref"):
        check((FP8_TRAINING,), hf_config=odd)
    check((*FP8_ROLLOUT, BLOCK), rollout_tp=16)  # 2 heads a rank (q 256) and the 8 KV heads replicated: whole
    llama2_7b = dict(QWEN3_8B, num_key_value_heads=32, intermediate_size=11008)
    check((*FP8_ROLLOUT, BLOCK), hf_config=llama2_7b, rollout_tp=2)
    check(FP8_ROLLOUT, hf_config=llama2_7b, rollout_tp=4)  # auto: per-tensor there
    with pytest.raises(ConfigError, match=r"MLP width 2752 per rollout TP rank \(TP=4\): set actor_rollout"):
        check((*FP8_ROLLOUT, BLOCK), hf_config=llama2_7b, rollout_tp=4)
    moe = dict(QWEN3_8B, moe_intermediate_size=768)
    with pytest.raises(ConfigError, match=r"expert MLP width 96 per rollout TP rank \(TP=8\)"):
        check((*FP8_ROLLOUT, BLOCK), hf_config=moe, rollout_tp=8)


def test_devices(monkeypatch):
    rollout = cfg_of(*FP8_ROLLOUT)
    training = cfg_of(FP8_TRAINING)
    fp8.check_fp8_devices(cfg_of())  # FP8 off: no device read
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"rollout.quantization=fp8 .* \(a CPU run\): set actor_rollout_ref"):
        fp8.check_fp8_devices(rollout)
    with pytest.raises(ConfigError, match=r"fp8=hybrid .* \(a CPU run\): drop \+actor_rollout_ref"):
        fp8.check_fp8_devices(training)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (8, 0))
    with pytest.raises(ConfigError, match="A100-SXM4-80GB is compute capability 8.0"):
        fp8.check_fp8_devices(rollout)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (9, 0))
    fp8.check_fp8_devices(rollout)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="local layer spec, which has none: pip install transformer_engine"):
        fp8.check_fp8_devices(training)
    fp8.check_fp8_devices(rollout)  # the rollout half needs no TransformerEngine


def test_fp8_learn_arms_pass_the_input_checks_on_smollm2s_shape(tmp_path, tiny_data):
    """benchmarks/fp8_learn.py's arms, as its script composes them (DAGRL_DRY_RUN), pass pre-flight on a model of
    SmolLM2-135M's widths (one layer), its FP8 arms on per-tensor scales."""
    import transformers
    import yaml

    from dagrl.config.validate import preflight
    from tests.helpers import make_tiny_tokenizer

    model, data = tmp_path / "model", tmp_path / "data"
    vocab = len(make_tiny_tokenizer(str(model)))
    config = transformers.LlamaConfig(**SMOLLM2_135M, num_hidden_layers=1, vocab_size=vocab, tie_word_embeddings=True)
    transformers.LlamaForCausalLM(config).save_pretrained(model)
    data.mkdir()
    for split in ("train", "test"):
        shutil.copy(tiny_data[split], data / f"{split}.parquet")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **{"DAGRL_DRY_RUN": "1", "MODEL_PATH": str(model), "DATA_DIR": str(data), "NGPUS": "1"},
        "CKPT_DIR": str(tmp_path / "ckpt"),
    }
    arms = fp8_learn.arms(fp8_learn.parse(["--out", str(tmp_path)]))
    arms["fp8_tis_block"] = [*arms["fp8_tis"], BLOCK]  # the checks ran: block scales on these widths are refused
    for name, overrides in arms.items():
        command = ["bash", str(ROOT / fp8_learn.parse(["--out", "x"]).script), *overrides, "--resolve"]
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
        cfg = Cfg(yaml.safe_load(proc.stdout))
        if name == "fp8_tis_block":
            with pytest.raises(ConfigError, match=r"fp8_scales=block: .* q width 576, k/v width 192 per rollout"):
                preflight(cfg, world_size=1)
            continue
        preflight(cfg, world_size=1)  # the input checks a launch makes (world_size: not this machine's vLLM)
        rollout = cfg.actor_rollout_ref.rollout
        assert (rollout.quantization, rollout.fp8_scales) == ((None, "auto") if name == "bf16" else ("fp8", "auto"))
        if rollout.quantization:
            assert fp8.scale_layout(rollout.fp8_scales, json.loads((model / "config.json").read_text()), 1) == "tensor"
