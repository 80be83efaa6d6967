"""Hydra's own surface: --config-dir adds group options wherever it stands among the overrides, and what Hydra or
OmegaConf refuses while composing (a graph file that does not parse, an unwritable hydra.run.dir, oc.env's text, an
interpolation cycle, ${hydra:...}) is one line naming the key or file and the fix."""

from __future__ import annotations

import re

import pytest

from dagrl.config.compose_errors import hydra_dir_problem
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.main_dag import early_override_check

MY_GRAPH = "defaults:\n  - grpo\n  - _self_\nnodes:\n  reward: {deps: [old_log_prob]}\n  ref_log_prob: null\n"


@pytest.fixture
def config_dir(tmp_path):
    (tmp_path / "dag").mkdir()
    (tmp_path / "dag" / "mine.yaml").write_text(MY_GRAPH)
    return tmp_path


@pytest.mark.parametrize("where", ["first", "last", "joined"])
def test_config_dir_adds_a_graph_wherever_it_stands(config_dir, where):
    """`key=value ... --config-dir D dag=mine`: Hydra's parser refuses overrides after a flag; the early composition
    is the whole job's instead, with D's graph chosen."""
    flag = [f"--config-dir={config_dir}"] if where == "joined" else ["--config-dir", str(config_dir)]
    overrides = ["data.train_batch_size=4", "dag=mine"]
    argv = [*flag, *overrides] if where == "first" else [overrides[0], *flag, overrides[1]]
    config = early_override_check(argv)
    assert config is not None and config["data"]["train_batch_size"] == 4
    assert config["dag"]["nodes"]["reward"]["deps"] == ["old_log_prob"]
    assert config["dag"]["nodes"]["ref_log_prob"] is None


def test_hydra_flags_still_go_to_hydra(config_dir):
    assert early_override_check(["--config-dir", str(config_dir), "dag=mine", "--cfg", "job"]) is None
    assert early_override_check(["dag=mine", f"--config-dir={config_dir}", "hydra.job.chdir=false"]) is None


def test_a_graph_file_that_does_not_parse_names_its_line(config_dir):
    (config_dir / "dag" / "broken.yaml").write_text("nodes:\n  rollout: {fn: a\n  reward: [b\n")
    with pytest.raises(ConfigError) as error:
        compose(["dag=broken"], [str(config_dir)])
    assert str(error.value).startswith(f"{config_dir}/dag/broken.yaml, line ")
    assert "is not valid YAML" in str(error.value) and "\n" not in str(error.value)


def test_hydra_run_dir_is_probed(tmp_path):
    (tmp_path / "file").write_text("x")
    assert hydra_dir_problem("hydra.run.dir", f"hydra.run.dir={tmp_path}/new/run") is None
    assert hydra_dir_problem("hydra.run.dir", f"hydra.run.dir={tmp_path}/" + "${now:%H}") is None
    assert not list(tmp_path.iterdir())[1:]  # the probe's folder is gone again
    assert hydra_dir_problem("hydra.job.name", "hydra.job.name=x") is None
    problem = hydra_dir_problem("hydra.sweep.dir", f"hydra.sweep.dir={tmp_path}/file/" + "${now:%H}")
    assert problem is not None and f"{tmp_path}/file is a file" in str(problem)
    assert "hydra.sweep.dir=outputs/run" in str(problem)


def test_oc_env_text_for_a_number(monkeypatch):
    monkeypatch.setenv("BS", "8")
    with pytest.raises(ConfigError, match=r"oc.env gives text \('8'\).*data.train_batch_size=\$BS") as error:
        compose(["data.train_batch_size=${oc.env:BS}"])
    assert error.value.key == "data.train_batch_size"
    # decoded, it is the number; a path from the environment stays text
    assert compose(["data.train_batch_size='${oc.decode:${oc.env:BS}}'"])["data"]["train_batch_size"] == 8
    assert compose(["trainer.experiment_name=run_${oc.env:BS}"])["trainer"]["experiment_name"] == "run_8"
    monkeypatch.delenv("BS")  # a default: the fix keeps it, in the shell's syntax and in OmegaConf's
    with pytest.raises(ConfigError, match=r"data.train_batch_size=\$\{BS:-8\}") as error:
        compose(["data.train_batch_size=${oc.env:BS,8}"])
    decoded = re.search(r"data.train_batch_size='([^']+)'", str(error.value))[0]
    assert compose([decoded])["data"]["train_batch_size"] == 8


def test_interpolation_cycle_names_its_keys():
    with pytest.raises(ConfigError) as error:
        compose(
            [
                "trainer.project_name=${trainer.experiment_name}",
                "trainer.experiment_name=x_${data.train_files}",
                "data.train_files=${trainer.project_name}",
            ]
        )
    circle = "data.train_files -> trainer.project_name -> trainer.experiment_name -> data.train_files"
    assert f"({circle}): give one of these keys a plain value" in str(error.value)


def test_hydra_resolver_names_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"\$\{hydra:runtime.output_dir\} reads Hydra's job settings") as error:
        compose(["trainer.default_local_dir=${hydra:runtime.output_dir}/ckpt"])
    assert error.value.key == "trainer.default_local_dir"


def test_a_graph_without_defaults_names_its_file(config_dir):
    (config_dir / "dag" / "bare.yaml").write_text("nodes:\n  rollout: {fn: my_nodes:rollout, deps: []}\n")
    with pytest.raises(ConfigError, match=r"dag=bare \(.*/dag/bare.yaml\) lacks custom_pipeline_fn, switches"):
        compose(["dag=bare"], [str(config_dir)])
