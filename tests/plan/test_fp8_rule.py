"""dagrl.plan's FP8 rollout rule: the quantized weights a rollout GPU holds against the two measured shapes (slower at
or below the Qwen3-1.7B shape's, faster at or above the 8B's, interpolated and said so between), and its section in
the plan only when actor_rollout_ref.rollout.quantization=fp8."""

from __future__ import annotations

import pytest

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.plan import presets
from dagrl.plan.fp8 import break_even, expected_ratio, fp8_rollout_lines, measured_points, quantized_params
from dagrl.plan.model import ModelShape
from tests.conftest import make_arithmetic_rows
from tests.helpers import write_parquet


def shape(size: str, family: str = "qwen3") -> ModelShape:
    return ModelShape.from_hf({"model_type": family, **presets.config_fields(family, size)})


def test_quantized_weights_are_the_decoder_linears_over_the_rollout_tp():
    qwen17 = shape("1.7b")  # hidden 2048, 28 layers, FFN 6144, 16 heads / 8 KV heads of 128
    per_layer = 2048 * (2048 + 2 * 1024) + 2048 * 2048 + 3 * 2048 * 6144
    assert quantized_params(qwen17) == 28 * per_layer
    assert quantized_params(qwen17, rollout_tp=2) == 28 * per_layer / 2
    assert quantized_params(qwen17) < qwen17.total_params() - qwen17.vocab * qwen17.hidden  # no embeddings
    moe = shape("30b-a3b", "qwen3_moe")
    assert quantized_params(moe) > moe.layers * moe.layer_experts()  # the experts count, and attention beside them


def test_slower_at_or_below_the_small_measured_shape_faster_at_or_above_the_large_one():
    low, high = measured_points()
    assert (low.size, low.ratio, high.size, high.ratio) == ("1.7b", 0.96, "8b", 1.10)
    assert expected_ratio(quantized_params(shape("0.6b")))[0] == 0.96
    assert expected_ratio(low.params) == (0.96, expected_ratio(low.params)[1])
    assert "where FP8 measured 0.96x" in expected_ratio(low.params)[1]
    assert expected_ratio(quantized_params(shape("32b")))[0] == 1.10
    between, how = expected_ratio(quantized_params(shape("4b")))
    assert 0.96 < between < 1.10 and "interpolated" in how and "not a model" in how
    assert expected_ratio(break_even())[0] == pytest.approx(1.0)
    assert low.params < break_even() < high.params


def test_the_plan_lines_say_slower_or_faster_and_what_was_measured():
    small = fp8_rollout_lines(shape("1.7b"), 1)
    assert small[0] == "FP8 rollout (actor_rollout_ref.rollout.quantization=fp8)"
    assert "1.41B quantized linear weights per rollout GPU (rollout TP 1): expected SLOWER than bf16" in small[1]
    assert "1,024 tokens forced" in small[3]
    assert "expected faster than bf16" in fp8_rollout_lines(shape("8b"), 1)[1]
    assert "expected SLOWER" in fp8_rollout_lines(shape("8b"), 4)[1]  # a quarter of the 8B's weights per GPU


@pytest.mark.parametrize("quantization", [None, "fp8"])
def test_the_plan_prints_the_rule_only_for_fp8_rollout(quantization, tmp_path):
    from dagrl.config.validate import preflight
    from dagrl.plan import make_plan
    from dagrl.plan.report import render

    presets.hf_config("qwen3", "1.7b").save_pretrained(tmp_path / "model")
    prompts = write_parquet(str(tmp_path / "train.parquet"), make_arithmetic_rows(64, "train", seed=0))
    data = compose(
        [
            f"actor_rollout_ref.model.path={tmp_path / 'model'}",
            f"data.train_files={prompts}",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.n=4",
            "trainer.n_gpus_per_node=1",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ]
    )
    shape_of_run = preflight(Cfg(data), world_size=1)
    data["actor_rollout_ref"]["rollout"]["quantization"] = quantization  # the key, set or not, read with a default
    text = render(make_plan(Cfg(data), shape_of_run))
    if quantization is None:
        assert "FP8 rollout" not in text
    else:
        section = text[text.index("FP8 rollout (") :].splitlines()
        assert "1.41B quantized linear weights per rollout GPU (rollout TP 1): expected SLOWER" in section[1]
