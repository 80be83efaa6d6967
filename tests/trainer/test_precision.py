"""The dtype chosen by the machine (`auto`), the start-up line and warning, explicit values, and a dtype change on
resume: refused in pre-flight when the optimizer state would be restored, weights alone converted."""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "engine"))

from dagrl.config.errors import ConfigError  # noqa: E402 - after the sys.path insert above
from dagrl.config.load import compose  # noqa: E402 - after the sys.path insert above
from dagrl.config.tree import Cfg  # noqa: E402 - after the sys.path insert above
from dagrl.placement import ParallelLayout  # noqa: E402 - after the sys.path insert above
from dagrl.trainer.resume_policy import check_changed_settings  # noqa: E402 - after the sys.path insert above
from dagrl.utils import precision  # noqa: E402 - after the sys.path insert above
from dagrl.utils.precision import PARAM_DTYPE, ROLLOUT_DTYPE, Machine  # noqa: E402 - after the sys.path insert above

AVX2 = Machine(gpu=False, bf16_native=False, isa="AVX2", slowdown=52.4)
BF16_CPU = Machine(gpu=False, bf16_native=True, isa="AVX512")
MACHINES = {"avx2": AVX2, "bf16_cpu": BF16_CPU, "gpu": precision.GPU}


@pytest.fixture
def machine(monkeypatch):
    """Pretend to run on one of MACHINES: precision.detect answers it, the start-up lines are logged afresh."""

    def use(name: str) -> Machine:
        monkeypatch.setattr(precision, "detect", lambda: MACHINES[name])
        precision.announce_once.cache_clear()
        return MACHINES[name]

    yield use
    precision.announce_once.cache_clear()


@pytest.mark.parametrize("name, auto", [("avx2", "float32"), ("bf16_cpu", "bfloat16"), ("gpu", "bfloat16")])
def test_auto_follows_the_machine_and_an_explicit_value_is_obeyed(name, auto):
    machine = MACHINES[name]
    assert precision.resolve("auto", machine) == auto
    for value, named in (("float32", "float32"), ("fp32", "float32"), ("bfloat16", "bfloat16"), ("bf16", "bfloat16")):
        assert precision.resolve(value, machine) == named


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the AVX2 emulation is x86's")
def test_detection_sees_a_cpu_without_bf16_instructions():
    """torch and oneDNN limited to AVX2 (as on most laptops): no bf16 instructions, and a measured slowdown."""
    code = "from dagrl.utils.precision import detect; m = detect(); print(m.gpu, m.bf16_native, m.isa, m.slowdown)"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=True
    ).stdout.split()
    assert out[:3] == ["False", "False", "AVX2"]
    assert float(out[3]) > 2  # tens of times slower where measured; 2 holds on a loaded machine


def test_the_start_up_line_says_what_auto_chose_on_a_cpu():
    both = {PARAM_DTYPE: "auto", ROLLOUT_DTYPE: "auto"}
    info, warnings = precision.startup_lines(both, AVX2)
    assert warnings == () and len(info) == 1
    assert info[0].startswith(
        "this CPU has no bf16 instructions (AVX2; a bf16 matmul runs 52x slower than float32 "
        "here): training and generating in float32 ("
    )
    assert f"{PARAM_DTYPE}=auto" in info[0] and f"{ROLLOUT_DTYPE}=auto" in info[0]
    info, warnings = precision.startup_lines(both, BF16_CPU)
    assert (
        info
        == (
            "this CPU has bf16 instructions (AVX512): training and generating in bfloat16 "
            f"({PARAM_DTYPE}=auto, {ROLLOUT_DTYPE}=auto)",
        )
        and warnings == ()
    )
    assert precision.startup_lines(both, precision.GPU) == ((), ())  # on a GPU auto is bf16: nothing to say


def test_explicit_bf16_on_a_cpu_without_bf16_instructions_warns_once_with_the_factor_and_the_key():
    values = {PARAM_DTYPE: "bfloat16", ROLLOUT_DTYPE: "auto"}
    info, warnings = precision.startup_lines(values, AVX2)
    assert len(info) == 1 and "generating in float32" in info[0] and "training" not in info[0]
    assert warnings == (
        f"this CPU has no bf16 instructions (AVX2; a bf16 matmul runs 52x slower than float32 here), "
        f"and {PARAM_DTYPE}=bfloat16 asks for bf16: set {PARAM_DTYPE}=auto (float32 here) for a "
        f"faster run",
    )
    for machine in (BF16_CPU, precision.GPU):
        assert precision.startup_lines(values, machine)[1] == ()
    assert precision.startup_lines({PARAM_DTYPE: "float32", ROLLOUT_DTYPE: "float32"}, AVX2) == ((), ())


def _config(*overrides: str) -> Cfg:
    return Cfg(compose(["actor_rollout_ref.model.path=/nonexistent", *overrides]))


@pytest.mark.parametrize("name, want", [("avx2", torch.float32), ("bf16_cpu", torch.bfloat16), ("gpu", torch.bfloat16)])
def test_the_engines_get_the_resolved_dtype_and_the_line_is_logged_once(machine, caplog, name, want):
    from dagrl.trainer.build import megatron_spec, run_dtype

    machine(name)
    cfg = _config(f"{PARAM_DTYPE}=auto", f"{ROLLOUT_DTYPE}=auto")
    shape = SimpleNamespace(parallel=ParallelLayout())
    with caplog.at_level(logging.INFO, logger="dagrl.utils.precision"):
        assert megatron_spec(cfg, shape, None).param_dtype == want
        assert megatron_spec(cfg, shape, None).param_dtype == want  # the reference's, the critic's
        assert run_dtype(cfg, ROLLOUT_DTYPE) == str(want).removeprefix("torch.")
    lines = [record.getMessage() for record in caplog.records if record.name == "dagrl.utils.precision"]
    assert len(lines) == (0 if name == "gpu" else 1)
    explicit = _config(f"{PARAM_DTYPE}=float32", f"{ROLLOUT_DTYPE}=bf16")
    assert megatron_spec(explicit, shape, None).param_dtype == torch.float32
    assert run_dtype(explicit, ROLLOUT_DTYPE) == "bfloat16"


def test_the_cpu_examples_choose_by_the_machine():
    scripts = sorted(ROOT.glob("examples/**/*cpu*.sh"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        runs_another = any(f"{other.parent.name}/{other.name}" in text for other in scripts if other != script)
        assert (f"{PARAM_DTYPE}=auto" in text or runs_another) and "bfloat16" not in text, script
    assert _config().actor_rollout_ref.rollout.dtype == "auto"


# ---- a dtype change on resume -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory) -> tuple[Path, Path, object]:
    """A trained bf16 actor's checkpoint, as global_step_1/actor, with a config.json saying `auto`."""
    from dagrl.engine.base import MegatronEngineSpec, OptimSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from engine_helpers import make_batch, sum_loss
    from tiny_models import make_model_dir

    root = tmp_path_factory.mktemp("bf16_run")
    model = make_model_dir(root / "model", "qwen3", seed=5)
    actor = MegatronActorEngine(
        MegatronEngineSpec(
            model_path=str(model),
            param_dtype=torch.bfloat16,
            optim=OptimSpec(lr=1e-3, clip_grad=1e9, total_training_steps=4),
        )
    )
    actor.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    step = root / "global_step_1"
    actor.save_checkpoint(str(step / "actor"))
    saved = _config(f"{PARAM_DTYPE}=auto").snapshot()
    (step / "config.json").write_text(json.dumps(saved))
    return step, model, actor


def _resume_lines(step: Path, *overrides: str) -> list[str]:
    return check_changed_settings(step, "config.json", _config(*overrides).snapshot(), log=False)


def test_a_resume_compares_resolved_dtypes(bf16_checkpoint, machine):
    step, _, _ = bf16_checkpoint
    machine("bf16_cpu")  # auto saved bf16 and chooses bf16 here: no change
    assert not [line for line in _resume_lines(step, f"{PARAM_DTYPE}=auto") if "dtype" in line]
    assert not [line for line in _resume_lines(step, f"{PARAM_DTYPE}=bf16") if "dtype" in line]
    machine("avx2")  # the same config on a CPU without bf16 instructions: auto chooses float32
    with pytest.raises(ConfigError, match=f"{PARAM_DTYPE}=bfloat16") as refused:
        _resume_lines(step, f"{PARAM_DTYPE}=auto")
    assert refused.value.key == PARAM_DTYPE and "trainer.default_local_dir" in str(refused.value)
    assert f"changed {PARAM_DTYPE} (the checkpoint's bfloat16, now float32)" in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1
    with pytest.raises(ConfigError, match="optimizer state of bfloat16 parameters"):
        _resume_lines(step, f"{PARAM_DTYPE}=float32")


def test_a_dtype_change_that_restores_the_weights_alone_is_applied_and_converts_them(bf16_checkpoint, machine):
    from dagrl.engine.base import MegatronEngineSpec, OptimSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from engine_helpers import exported

    step, model, trained = bf16_checkpoint
    machine("avx2")
    contents = "actor_rollout_ref.actor.checkpoint.load_contents=[model,extra]"
    assert [line for line in _resume_lines(step, f"{PARAM_DTYPE}=auto", contents) if "dtype" in line] == [
        f"resume from {step.name}: {PARAM_DTYPE} changed 'bfloat16' -> 'float32': applied"
    ]

    def fp32_engine(**kwargs):
        return MegatronActorEngine(
            MegatronEngineSpec(
                model_path=str(model),
                param_dtype=torch.float32,
                **kwargs,
                optim=OptimSpec(lr=1e-3, clip_grad=1e9, total_training_steps=4),
            )
        )

    with pytest.raises(ValueError, match=f"{PARAM_DTYPE}=bfloat16"):  # the engine's own guard, past pre-flight
        fp32_engine().load_checkpoint(str(step / "actor"))
    resumed = fp32_engine(load_contents=("model", "extra"))
    resumed.load_checkpoint(str(step / "actor"))
    want, got = exported(trained), exported(resumed)
    assert all(
        got[name].dtype == torch.float32 and torch.equal(got[name], tensor.float()) for name, tensor in want.items()
    )
