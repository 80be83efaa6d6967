"""dagrl/config/schema/: a key is declared once (type, default, range, choices, doc) and conf/<group>/default.yaml
is written from the declarations, so the YAML, the schema and the reference cannot disagree. (No postponed
annotations here: get_type_hints must see the classes declared inside a test.)"""

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.config.schema.root import SECTIONS, keys
from dagrl.config.schema.spec import POSITIVE, Files, ModelDir, kind_of, key, keys_of, section

ROOT = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "scripts" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("group", [g for g in SECTIONS if g != "dag"])
def test_each_default_yaml_is_written_from_its_declaration(group):
    text = generator().conf_yaml(SECTIONS[group])
    assert (ROOT / "conf" / group / "default.yaml").read_text() == text, (
        f"conf/{group}/default.yaml is stale: run python3 scripts/gen_config_reference.py"
    )
    loaded = yaml.safe_load(text)
    for path, declared in keys().items():
        if path.startswith(group + "."):
            node = loaded
            for part in path.split(".")[1:]:
                node = node[part]
            assert node == declared.default, path
            assert f"# {declared.doc}" in text, path


def test_annotations_give_the_checker_its_kinds():
    assert kind_of(int) == "int" and kind_of(int | None) == "int?" and kind_of(float) == "float"
    assert kind_of(Files) == "files" and kind_of(ModelDir | None) == "model?" and kind_of(dict) == "dict"
    with pytest.raises(TypeError, match="cannot be declared"):
        kind_of(tuple)


def test_a_new_key_is_one_declaration():
    @dataclass
    class Inner:
        rate: float = key(1e-6, "a small rate", POSITIVE)
        name: str = key("grpo", "an estimator", choices=ADV_ESTIMATORS.choices)

    @dataclass
    class Outer:
        """A section."""

        inner: Inner = section(Inner, "nested")
        files: Files | None = key(None, "inputs")
        tags: list = key(["a: b", "plain"], "text that YAML must quote")

    found = keys_of(Outer, "outer")
    assert list(found) == ["outer.inner.rate", "outer.inner.name", "outer.files", "outer.tags"]
    assert found["outer.inner.rate"].range is POSITIVE and "grpo" in found["outer.inner.name"].choices
    assert found["outer.files"].kind == "files?"
    text = generator().conf_yaml(Outer)
    assert text.splitlines()[0] == "# A section." and "rate: 1.0e-6" in text
    assert OmegaConf.to_container(OmegaConf.create(text)) == {
        "inner": {"rate": 1e-6, "name": "grpo"},
        "files": None,
        "tags": ["a: b", "plain"],
    }
    assert dataclasses.asdict(Outer())["inner"]["rate"] == 1e-6


def test_the_typed_config_reads_as_cfg_does_and_records_each_read():
    from dagrl.config.load import compose
    from dagrl.config.schema.algorithm import Algorithm
    from dagrl.config.schema.root import typed
    from dagrl.config.tree import Cfg, recording

    composed = compose(["algorithm.gamma=0.5", "+custom_reward_function.reward_kwargs.scale=2"])
    config = typed(composed)
    with recording() as reads:
        assert isinstance(config.algorithm, Algorithm) and config.algorithm.gamma == 0.5
        assert config["algorithm"].get("lam") == 1.0 and "kl_ctrl" in config.algorithm
        kwargs = config.custom_reward_function.reward_kwargs
        assert isinstance(kwargs, Cfg) and kwargs.to_dict() == {"scale": 2}
    assert {"algorithm.gamma", "algorithm.lam", "custom_reward_function.reward_kwargs.scale"} <= reads
    assert "algorithm.kl_ctrl.kl_coef" not in reads and config.snapshot() == composed
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.algorithm.gamma = 0.9
    composed["algorithm"]["gama"] = 0.5
    with pytest.raises(KeyError, match="algorithm.gama"):
        typed(composed)
