"""benchmarks/actor_mfu.py's FP8 option: the TransformerConfig fields both steps get, and a run's steps against
another precision's run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import actor_mfu  # noqa: E402 - after the sys.path insert above


def test_fp8_sets_the_te_fields_and_bf16_none():
    assert actor_mfu.fp8_overrides(None, "blockwise") == {}
    assert actor_mfu.fp8_overrides("e4m3", "delayed") == {"fp8": "e4m3", "fp8_recipe": "delayed"}
    assert actor_mfu.FP8_RECIPES == ("delayed", "tensorwise", "blockwise")


def test_each_step_is_compared_with_the_same_step_of_the_other_run():
    bf16 = {"fp8": {}, "bare": {"step_s": 2.0}, "dagrl": {"step_s": 2.2}}
    fp8 = {"fp8": {"fp8": "e4m3", "fp8_recipe": "blockwise"}, "bare": {"step_s": 1.6}, "dagrl": {"step_s": 2.0}}
    assert actor_mfu.against_lines(fp8, bf16) == [
        "bare: FP8 e4m3 blockwise 1.600 s/step, bf16 2.000 s/step: FP8 e4m3 blockwise at 1.250x the speed of bf16",
        "dagrl: FP8 e4m3 blockwise 2.000 s/step, bf16 2.200 s/step: FP8 e4m3 blockwise at 1.100x the speed of bf16",
    ]
    assert actor_mfu.against_lines({"fp8": {}, "dagrl": {"step_s": 1.0}}, fp8) == [
        "dagrl: bf16 1.000 s/step, FP8 e4m3 blockwise 2.000 s/step: bf16 at 2.000x the speed of FP8 e4m3 blockwise"
    ]
