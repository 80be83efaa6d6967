"""A LoRA checkpoint loads only where its adapters fit: the same adapter shapes, over the same base model (a base
moved, or a checkpoint taken to another machine, is the same base at a new path)."""

from types import SimpleNamespace

import pytest

pytest.importorskip("megatron.core")

from dagrl.engine.lora import LoraSpec  # noqa: E402
from dagrl.engine.megatron.lora import check_lora_checkpoint, lora_record  # noqa: E402
from dagrl.utils.paths import another_model  # noqa: E402


def _engine(model_path, lora, role="actor"):
    return SimpleNamespace(role=role, spec=SimpleNamespace(lora=lora, model_path=str(model_path)))


def test_another_model_is_a_saved_directory_still_here_and_not_the_same(tmp_path):
    saved, other = tmp_path / "saved", tmp_path / "other"
    saved.mkdir()
    other.mkdir()
    (tmp_path / "link").symlink_to(saved)
    assert another_model(str(saved), str(other))
    assert not another_model(str(saved), str(tmp_path / "link"))  # the same directory by another name
    assert not another_model(str(tmp_path / "gone"), str(other))  # moved: the saved directory is gone
    assert not another_model(None, str(other)) and not another_model(str(saved), None)


def test_adapters_load_over_their_own_base_only(tmp_path):
    base, other = tmp_path / "base", tmp_path / "other"
    base.mkdir()
    other.mkdir()
    spec = LoraSpec(rank=4, alpha=8.0, targets=("linear_qkv",))
    info = {"lora": lora_record(spec), "model_path": str(base)}
    check_lora_checkpoint(_engine(base, spec), "ckpt", info)  # the same base: loads
    check_lora_checkpoint(_engine(other, spec), "ckpt", {**info, "model_path": str(tmp_path / "moved")})
    with pytest.raises(ValueError, match=rf"over the base model {base}.*set actor_rollout_ref.model.path={base}$"):
        check_lora_checkpoint(_engine(other, spec), "ckpt", info)
    with pytest.raises(ValueError, match=r"set critic.model.path="):
        check_lora_checkpoint(_engine(other, spec, role="critic"), "ckpt", info)


def test_adapter_shapes_and_a_full_checkpoint_are_refused_naming_the_keys(tmp_path):
    spec = LoraSpec(rank=4, alpha=8.0, targets=("linear_qkv",))
    info = {"lora": lora_record(spec), "model_path": str(tmp_path)}
    fix = "set actor_rollout_ref.model.lora.rank/alpha/target_modules to the saved run's"
    with pytest.raises(ValueError, match=f"built with LoRA None: {fix}"):
        check_lora_checkpoint(_engine(tmp_path, None), "ckpt", info)
    with pytest.raises(ValueError, match=f"holds LoRA None.*{fix}"):
        check_lora_checkpoint(_engine(tmp_path, spec), "ckpt", {"lora": None, "model_path": str(tmp_path)})
    wider = LoraSpec(rank=8, alpha=8.0, targets=("linear_qkv",))
    with pytest.raises(ValueError, match="'rank': 4.*'rank': 8"):
        check_lora_checkpoint(_engine(tmp_path, wider), "ckpt", info)
    check_lora_checkpoint(_engine(tmp_path, None), "ckpt", {"lora": None, "model_path": str(tmp_path)})
