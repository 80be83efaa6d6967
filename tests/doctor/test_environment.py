"""The environment check against dagrl/doctor/versions.py: this install passes, each known-bad combination of the
table is refused with its fix, and the table's GPU pins are setup.py's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dagrl.doctor import environment
from dagrl.doctor.versions import Env
from dagrl.utils.pins import PINS

ROOT = Path(__file__).resolve().parents[2]
KIT = PINS["GPU kit"]
GOOD_GPU = Env(
    versions={
        "torch": "2.11.0+cu130",
        "megatron-core": KIT["megatron-core"],
        "transformer-engine": KIT["transformer-engine"],
        "vllm": KIT["vllm"],
        "transformers": "5.17.0",
        "flash-attn": None,
    },
    python="3.12.3",
    cuda="13.0",
    driver="580.82.07",
    gpu="NVIDIA H100 80GB HBM3",
    capability=(9, 0),
)


def changed(env: Env, **fields) -> Env:
    versions = {**env.versions, **{k.replace("_", "-"): v for k, v in fields.pop("versions", {}).items()}}
    return Env(**{**env.__dict__, "versions": versions, **fields})


def test_this_install_and_the_gpu_kit_pass():
    assert environment.problems(environment.current(), {"hf"}) == []
    assert environment.problems(GOOD_GPU, {"vllm", "bf16"}) == []
    assert environment.untested(GOOD_GPU) == []


@pytest.mark.parametrize(
    ("env", "needs", "says"),
    [
        (changed(GOOD_GPU, versions={"torch": "2.13.0+cu130"}), {"vllm"}, "vLLM 0.26.0 is built against torch 2.11"),
        (changed(GOOD_GPU, versions={"transformers": "5.4.0"}), {"vllm"}, "vLLM 0.26.0 needs transformers>=5.5.3"),
        (changed(GOOD_GPU, versions={"megatron_core": "0.20.0"}), {"hf"}, "megatron-core 0.20.0 is outside"),
        (changed(GOOD_GPU, versions={"transformers": "4.57.1"}), {"hf"}, "transformers 4.57.1 predates 5.x"),
        (changed(GOOD_GPU, driver="570.124.06"), {"hf"}, "CUDA 13.0 runtime needs an NVIDIA driver >= 580"),
        (changed(GOOD_GPU, capability=(7, 0), gpu="Tesla V100"), {"bf16"}, "Tesla V100 (compute capability 7.0)"),
        (changed(GOOD_GPU, cuda=None), {"hf"}, "TransformerEngine 2.17.1 is installed beside a CPU build"),
        (changed(GOOD_GPU, python="3.10.14"), {"hf"}, "Python 3.10.14 is older than dagrl supports"),
    ],
)
def test_a_combination_from_the_table_is_refused_with_its_fix(env, needs, says):
    lines = environment.problems(env, needs)
    assert len(lines) == 1 and says in lines[0], lines
    assert lines[0].startswith("environment: ") and ": " in lines[0][len("environment: ") :]
    assert "\n" not in lines[0]


def test_a_rule_applies_only_to_what_the_run_uses():
    """vLLM's torch pin does not concern an hf-rollout run; bf16 tensor cores not an fp32 one."""
    assert environment.problems(changed(GOOD_GPU, versions={"torch": "2.13.0"}), {"hf"}) == []
    assert environment.problems(changed(GOOD_GPU, capability=(7, 0)), {"hf"}) == []


def test_an_extension_that_does_not_import_is_named():
    env = changed(GOOD_GPU, versions={"flash_attn": "2.8.3"}, broken={"flash-attn": "undefined symbol: _ZN3c10"})
    (line,) = environment.problems(env, {"hf"})
    assert "flash-attn 2.8.3 does not import (undefined symbol: _ZN3c10)" in line and "reinstall" in line


def test_untested_versions_are_notes_with_the_pins():
    (note,) = environment.untested(changed(GOOD_GPU, versions={"vllm": "0.27.1"}))
    assert note == "vllm 0.27.1 is untested here (tested: 0.26.0 (GPU kit))"


def test_the_gpu_pins_are_setup_pys():
    extra = re.search(r"\"gpu\": \[(.*?)\],\n", (ROOT / "setup.py").read_text()).group(1)
    pins = dict(re.findall(r'"([a-z-]+)(?:\[[a-z]+\])?==([0-9.]+)"', extra))
    assert pins == {name: KIT[name] for name in ("megatron-core", "transformer-engine", "vllm")}


def test_the_cli_checks_the_environment_only(tiny_model, tiny_data, tmp_path):
    from tests.conftest import cpu_run_overrides

    overrides = cpu_run_overrides(tiny_model, tiny_data, tmp_path / "out")
    done = subprocess.run(
        [sys.executable, "-m", "dagrl.doctor", "--env-only", *overrides], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("environment:\n  python ") and "megatron-core 0.16" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "dagrl.doctor", "--env-only", *overrides, "trainer.nope=1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("dagrl: error: ") and "trainer.nope" in bad.stderr


FP8_GPU = changed(GOOD_GPU, versions={"compressed_tensors": KIT["compressed-tensors"]})


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (GOOD_GPU, "imports compressed-tensors, and it is not installed"),
        (changed(FP8_GPU, capability=(8, 0), gpu="NVIDIA A100-SXM4-80GB"), "A100-SXM4-80GB (compute capability 8.0)"),
        (changed(FP8_GPU, capability=None, gpu=None), "on a GPU of compute capability >= 8.9 and this machine has"),
    ],
)
def test_an_fp8_rollout_names_what_it_lacks(env, says):
    lines = environment.problems(env, {"vllm", "bf16", "fp8"})
    assert len(lines) == 1 and says in lines[0], lines
    assert lines[0].startswith("environment: ") and "actor_rollout_ref.rollout.quantization=null" in lines[0]
    assert environment.problems(env, {"vllm", "bf16"}) == []  # a bf16 rollout needs none of it


def test_an_fp8_rollout_on_the_gpu_kit_passes():
    assert environment.problems(FP8_GPU, {"vllm", "bf16", "fp8"}) == []
    assert environment.problems(changed(FP8_GPU, capability=(8, 9), gpu="NVIDIA L40S"), {"fp8"}) == []
    assert environment.untested(FP8_GPU) == []


def test_the_run_says_it_needs_fp8():
    from dagrl.config.tree import Cfg
    from dagrl.doctor import needs

    def cfg(quantization):
        rollout = {"name": "vllm", "dtype": "bfloat16", "quantization": quantization}
        return Cfg({"actor_rollout_ref": {"rollout": rollout, "actor": {"megatron": {"param_dtype": "bfloat16"}}}})

    assert needs(cfg("fp8")) == {"vllm", "bf16", "fp8"} and needs(cfg(None)) == {"vllm", "bf16"}
