"""Nothing saved is lost: dagrl never deletes or overwrites what it did not write, never marks a non-finite
checkpoint complete, never overwrites a newer checkpoint when resuming from an older one, and says at start what
a resume changes (applied) or cannot change (refused)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import pytest

from dagrl.config.errors import ConfigError, RunError
from dagrl.trainer.checkpoint import MARKER, PARTIAL_MARKER, CheckpointManager
from dagrl.trainer.resume_policy import changed_keys, check_changed_settings
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session
from tests.reliability.test_bad_inputs import digest


def launch(args: list[str]) -> tuple[int, str]:
    return run_in_session([sys.executable, "-m", "dagrl.main_dag", *args])


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("dagrl: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def args(tiny_model, tiny_data):
    def make(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{"trainer.save_freq": 1, "trainer.test_freq": -1, "trainer.val_before_train": False, **extra},
        )

    return make


@pytest.fixture(scope="module")
def two_steps(args, tmp_path_factory) -> Path:
    """A finished 2-step run with global_step_1 and global_step_2 (copy it before changing anything)."""
    out = tmp_path_factory.mktemp("two_steps") / "run"
    code, stderr = launch(args(out))
    assert code == 0, stderr[-3000:]
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_1", "global_step_2"]
    return out


@pytest.mark.parametrize("name", ["global_step_1", ".tmp_global_step_1"])
@pytest.mark.parametrize("mode", ["auto", "disable"])
def test_a_directory_dagrl_did_not_write_stops_the_run_and_survives(args, tmp_path, name, mode):
    out = tmp_path / "run"
    (out / name).mkdir(parents=True)
    (out / name / "notes.txt").write_text("a user's files")
    before = digest(out)
    code, stderr = launch(args(out, **{"trainer.resume_mode": mode}))
    assert code == 2
    line = error_line(stderr)
    assert name in line and "trainer.default_local_dir" in line and "not written by dagrl" in line
    assert digest(out) == before


def test_a_save_never_replaces_an_existing_directory_and_clears_only_its_own_partials(tmp_path):
    root = tmp_path / "ckpt"
    manager = CheckpointManager(str(root), keep=None, rank=0, barrier=lambda: None)
    manager.save(1, lambda d: (d / "data.pt").write_text("one"))
    assert (root / "global_step_1" / MARKER).is_file() and not (root / "global_step_1" / PARTIAL_MARKER).exists()
    with pytest.raises(RunError, match="global_step_1 already exists"):  # appeared while a run was going on
        manager.save(1, lambda d: (d / "data.pt").write_text("two"))
    assert (root / "global_step_1" / "data.pt").read_text() == "one"
    (root / ".tmp_global_step_2").mkdir()  # someone else's, under dagrl's name
    with pytest.raises(RunError, match="tmp_global_step_2 already exists"):
        manager.save(2, lambda d: None)
    for name in (".tmp_global_step_3", ".tmp_global_step_4.new"):  # what a killed dagrl save leaves
        (root / name).mkdir()
        (root / name / PARTIAL_MARKER).touch()
    manager.clear_partial()
    assert sorted(p.name for p in root.iterdir()) == [
        ".tmp_global_step_2",
        "global_step_1",
        "latest_checkpointed_iteration.txt",
    ]


def test_a_save_is_logged_once_under_its_published_name(tmp_path, caplog):
    root = tmp_path / "ckpt"
    manager = CheckpointManager(str(root), keep=None, rank=0, barrier=lambda: None)
    with caplog.at_level(logging.INFO):
        manager.save(3, lambda d: ((d / "actor").mkdir(), (d / "config.json").write_text("{}")))
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [f"saved the checkpoint of step 3 to {root / 'global_step_3'} (actor, config.json)"]


def test_non_finite_config_numbers_are_refused_in_preflight(args, tmp_path):
    for key, value in (
        ("actor_rollout_ref.actor.optim.lr", "inf"),
        ("actor_rollout_ref.actor.entropy_coeff", "nan"),
        ("actor_rollout_ref.rollout.temperature", "-inf"),
        ("actor_rollout_ref.actor.optim.lr", "1e39"),
    ):
        code, stderr = launch(args(tmp_path / "run", **{key: value}))
        assert code == 2 and f"{key}=" in error_line(stderr) and "finite" in error_line(stderr)
    assert not (tmp_path / "run").exists()


def test_an_update_that_makes_the_weights_non_finite_is_never_saved(args, tmp_path):
    out = tmp_path / "run"  # NaN written into a weight after step 2's update (finite loss and gradients)
    code, stderr = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *args(out, **{"trainer.total_training_steps": 3})],
        {"DAGRL_INJECT_NAN_WEIGHTS": "2"},
    )
    assert code == 1
    line = error_line(stderr)
    assert "step 2" in line and "NaN/inf" in line and "last good checkpoint: " in line and "global_step_1" in line
    assert sorted(p.name for p in out.glob("*global_step_*")) == ["global_step_1"]
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "1"


def test_resuming_from_an_older_checkpoint_never_overwrites_a_newer_one(args, two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    before = digest(out, checkpoints_only=True)
    older = out / "global_step_1"
    code, stderr = launch(
        args(
            out,
            **{
                "trainer.resume_mode": "resume_path",
                "trainer.resume_from_path": older,
                "trainer.total_training_steps": 3,
            },
        )
    )
    assert code == 2
    line = error_line(stderr)
    assert "global_step_1" in line and "global_step_2" in line and "new directory" in line
    assert digest(out, checkpoints_only=True) == before

    branch = tmp_path / "branch"  # the fix the line names: the resumed run writes elsewhere
    code, stderr = launch(
        args(
            branch,
            **{
                "trainer.resume_mode": "resume_path",
                "trainer.resume_from_path": older,
                "trainer.total_training_steps": 3,
            },
        )
    )
    assert code == 0, stderr[-3000:]
    assert sorted(p.name for p in branch.glob("global_step_*")) == ["global_step_2", "global_step_3"]
    assert digest(out, checkpoints_only=True) == before


def test_a_finished_run_says_so_without_building_a_model(args, two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    before = digest(out)
    code, stderr = launch(args(out))
    assert code == 0, stderr[-3000:]
    assert "this run already finished: checkpoint at step 2 of 2" in stderr
    assert "resumed from" not in stderr  # the checkpoint (and so the model before it) was never loaded
    assert digest(out) == before


def test_a_resume_applies_a_new_lr_and_refuses_a_new_batch_size_saying_so(args, two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    before = digest(out, checkpoints_only=True)
    code, stderr = launch(
        args(
            out,
            **{"data.train_batch_size": 8, "actor_rollout_ref.actor.optim.lr": 5e-3, "trainer.total_training_steps": 3},
        )
    )
    assert code == 2
    line = error_line(stderr)
    assert "data.train_batch_size" in line and "another trainer.default_local_dir" in line
    assert "data.train_batch_size changed 4 -> 8: refused" in stderr
    assert "actor_rollout_ref.actor.optim.lr changed 0.001 -> 0.005: applied" in stderr
    assert digest(out, checkpoints_only=True) == before

    code, stderr = launch(args(out, **{"actor_rollout_ref.actor.optim.lr": 5e-3, "trainer.total_training_steps": 3}))
    assert code == 0, stderr[-3000:]
    assert "trainer.total_training_steps changed 2 -> 3: applied" in stderr
    records = metrics_by_step(out)
    assert records[2]["actor/lr"] == pytest.approx(1e-3) and records[3]["actor/lr"] == pytest.approx(5e-3)
    saved = json.loads((out / "global_step_3" / "config.json").read_text())
    assert saved["actor_rollout_ref"]["actor"]["optim"]["lr"] == 5e-3


def test_the_resume_policy_names_each_changed_key(tmp_path):
    saved = {
        "data": {"seed": 1, "max_prompt_length": 32, "filter_overlong_prompts": True},
        "trainer": {"resume_mode": "auto", "total_epochs": 1},
        "algorithm": {"kl_ctrl": {"type": "adaptive", "kl_coef": 0.1}},
    }
    current = json.loads(json.dumps(saved))
    current["trainer"].update(resume_mode="resume_path", total_epochs=2)
    assert changed_keys(saved, current) == [("trainer.total_epochs", 1, 2)]  # resume_mode is not a setting
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert check_changed_settings(tmp_path, "config.json", current, log=False) == [
        f"resume from {tmp_path.name}: trainer.total_epochs changed 1 -> 2: applied"
    ]
    for key, value in (("max_prompt_length", 64), ("seed", 2)):
        changed = json.loads(json.dumps(current))
        changed["data"][key] = value
        with pytest.raises(ConfigError, match=f"data.{key}"):
            check_changed_settings(tmp_path, "config.json", changed, log=False)
    changed["data"].update(seed=1, filter_overlong_prompts=False)  # refused too: the filter decides the rows
    with pytest.raises(ConfigError, match="filter_overlong_prompts"):
        check_changed_settings(tmp_path, "config.json", changed, log=False)
    changed = json.loads(json.dumps(current))
    changed["algorithm"]["kl_ctrl"]["kl_coef"] = 0.2  # the adaptive controller's value is state
    with pytest.raises(ConfigError, match="adaptive KL"):
        check_changed_settings(tmp_path, "config.json", changed, log=False)
    changed["algorithm"]["kl_ctrl"]["type"] = "fixed"
    assert [
        line.endswith("applied") for line in check_changed_settings(tmp_path, "config.json", changed, log=False)
    ] == [True, True, True]


def test_a_refused_resume_gives_the_saved_values_as_the_command_line_takes_them(tmp_path):
    """null and true/false, not None and True: `key=None` would set the text 'None'."""
    saved = {"data": {"filter_overlong_prompts": True}, "actor_rollout_ref": {"model": {"trainable_top_layers": None}}}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    changed = {"data": {"filter_overlong_prompts": False}, "actor_rollout_ref": {"model": {"trainable_top_layers": 1}}}
    with pytest.raises(ConfigError) as refused:
        check_changed_settings(tmp_path, "config.json", changed, log=False)
    message = str(refused.value)
    assert "actor_rollout_ref.model.trainable_top_layers (the checkpoint's null, now 1)" in message
    assert "data.filter_overlong_prompts=true" in message and "trainable_top_layers=null" in message
    assert "None" not in message and "True" not in message
    saved = {"data": {"train_files": ["/d/a.parquet", "/d/b.parquet"]}}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError) as refused:
        check_changed_settings(tmp_path, "config.json", {"data": {"train_files": ["/d/a.parquet"]}}, log=False)
    assert "(data.train_files='[/d/a.parquet,/d/b.parquet]')" in str(refused.value)  # one shell word


def test_extending_a_finished_run_validates_its_last_step_once(args, tmp_path):
    """A run validates its last step as its last; relaunched with more steps it resumes there and must not
    validate that step again (metrics.jsonl had two rows of it): the checkpoint records whether it was validated."""
    out = tmp_path / "run"
    for total in (1, 2):
        code, stderr = launch(
            args(
                out, **{"trainer.total_training_steps": total, "trainer.test_freq": 5, "trainer.val_before_train": True}
            )
        )
        assert code == 0, stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if any(k.startswith("val-core/") for k in r)] == [0, 1, 2]


def test_a_resume_that_switches_the_optimizer_kind_is_refused_unless_the_weights_load_alone():
    from dagrl.trainer.resume_policy import DISTRIBUTED_OPTIMIZER, refusal

    assert "plain or distributed" in refusal(DISTRIBUTED_OPTIMIZER, {})
    assert (
        refusal(DISTRIBUTED_OPTIMIZER, {"actor_rollout_ref.actor.checkpoint.load_contents": ["model", "extra"]}) is None
    )
