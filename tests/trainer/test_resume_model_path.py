"""A resume over a checkpoint with another actor_rollout_ref.model.path: the checkpoint's weights would be loaded
and the new model's never trained, so pre-flight refuses it naming both models; the same model at a new path (moved,
or a resume on another machine) is applied."""

import json
import shutil

import pytest

from dagrl.config.errors import ConfigError
from dagrl.trainer.resume_policy import check_changed_settings

KEY = "actor_rollout_ref.model.path"


def configs(old: str, new: str) -> tuple[dict, dict]:
    saved = {"actor_rollout_ref": {"model": {"path": old}}, "data": {"seed": 1}}
    return saved, {"actor_rollout_ref": {"model": {"path": new}}, "data": {"seed": 1}}


def test_another_model_is_refused_naming_both(tiny_model, tmp_path):
    other = tmp_path / "other_model"
    shutil.copytree(tiny_model, other)  # the same files: a fine-tune of one architecture looks just like this
    saved, current = configs(str(tiny_model), str(other))
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError) as error:
        check_changed_settings(tmp_path, "config.json", current, log=False)
    message = str(error.value)
    assert error.value.key == KEY and "\n" not in message
    assert f"weights trained from {tiny_model}" in message and f"{other} would give only its config" in message
    assert f"set them back to the saved values ({KEY}={tiny_model})" in message
    assert "another trainer.default_local_dir" in message


def test_the_same_model_at_a_new_path_is_applied(tiny_model, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tiny_model)
    for old, new in ((str(tiny_model), str(link)), (str(tmp_path / "moved_away"), str(tiny_model))):
        saved, current = configs(old, new)
        (tmp_path / "config.json").write_text(json.dumps(saved))
        lines = check_changed_settings(tmp_path, "config.json", current, log=False)
        assert lines == [f"resume from {tmp_path.name}: {KEY} changed {old!r} -> {new!r}: applied"]
