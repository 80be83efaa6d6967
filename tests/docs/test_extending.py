"""docs/extending.md does what it says: its code blocks are written to files here and run as the page says (a node
inserted by dag.custom_pipeline_fn, an estimator, a loss and a KL estimator registered from the user's own module,
a reward function file), and the places it names for a model family and a rollout engine are the code's."""

from __future__ import annotations

import ast
import dataclasses
import contextlib
import importlib
import inspect
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dagrl.algo.catalog import KL_ESTIMATORS, REGISTRIES
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.schema.check import choices_of
from dagrl.config.tree import Cfg
from dagrl.config.validate import preflight
from dagrl.data.batch import Batch
from dagrl.engine.rollout.registry import ROLLOUT_ENGINES
from tests.conftest import cpu_run_overrides
from tests.helpers import node_context

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"


def section(number: int) -> str:
    """The text of the page's section `## <number>. ...`."""
    text = PAGE.read_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def page_files() -> dict[str, str]:
    """{file name: source} of the page's code blocks whose first line is `# <file>`, same-named blocks joined."""
    files: dict[str, str] = {}
    for body in re.findall(r"^```[a-z]*\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S):
        match = re.match(r"# (\S+\.py)\n", body)
        if match:
            files[match[1]] = files.get(match[1], "") + body + "\n"
    return files


def selections(*numbers: int) -> list[str]:
    """The `key=value` overrides of the "Select it with ..." sentences of these sections."""
    found = []
    for number in numbers:
        for sentence in re.findall(r"Select it with (.*?)\.\s", section(number), flags=re.S):
            found += re.findall(r"`(\+?[\w.]+=[^`]+)`", sentence)
    return found


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """The page's files in a directory on sys.path; registrations and imports undone afterwards."""
    root = tmp_path / "user"
    root.mkdir()
    files = page_files()
    for name, source in files.items():
        (root / name).write_text(source)
    monkeypatch.syspath_prepend(str(root))
    known = {registry: set(registry.names()) for registry in (*REGISTRIES, ROLLOUT_ENGINES)}
    yield root
    for registry, names in known.items():
        for entry in list(registry):
            if entry.name not in names:
                registry.unregister(entry.name)
    for name in files:
        sys.modules.pop(name.removesuffix(".py"), None)


def run_overrides(tiny_model, tiny_data, tmp_path, *extra: str) -> Cfg:
    return Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt") + list(extra)))


def test_page_has_the_files_the_recipes_name():
    assert set(page_files()) == {
        "my_nodes.py",
        "my_graphs.py",
        "my_algos.py",
        "train.py",
        "my_reward.py",
        "my_rollout.py",
    }
    assert [int(n) for n in re.findall(r"^## (\d)\. ", PAGE.read_text(), flags=re.M)] == list(range(1, 9))


# ---- 1. a node ---------------------------------------------------------------------------------------------------


def test_a_node_inserted_by_custom_pipeline_fn_passes_preflight_and_runs_where_the_page_says(
    user_code, tiny_model, tiny_data, tmp_path
):
    from dagrl.dag.graph import Graph, graph_from_config, run_graph
    from dagrl.nodes.layout import check_graph

    text = section(1)
    chosen = re.search(r"`(dag\.custom_pipeline_fn=[^`]+)`", text)[1]
    order = re.search(r"runs in the order\s+`([^`]+)`", text)[1].split(", ")
    cfg = run_overrides(tiny_model, tiny_data, tmp_path, chosen)
    preflight(cfg)  # accepted: the functions import, take (ctx, batch), the pipeline returns a graph
    graph = graph_from_config(cfg.dag)
    assert [node.id for node in graph.nodes] == order
    node = graph.nodes[order.index("length_penalty")]
    assert (node.role, node.config, node.fn.__module__) == ("reward", {"coef": 0.1}, "my_nodes")
    assert graph.nodes[graph.reshard].id == "to_actor_layout" and graph.reshard == order.index("length_penalty") + 1
    check_graph(graph, world_size=2)  # what the trainer checks at start: the reshard node's place

    # run as the graph runs it: its `config` arrives as ctx.node_config
    batch = Batch(
        {
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
            "response_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]),
        }
    )
    out, metrics = run_graph(Graph(nodes=(node,)), node_context(cfg), batch, lambda name: contextlib.nullcontext())
    torch.testing.assert_close(out["token_level_scores"].sum(-1), torch.tensor([1.0 - 0.1 * 3 / 4, -0.1]))
    assert metrics["reward/length_penalty"] == pytest.approx(0.1 * 3.5 / 4)


def test_a_node_swapped_in_by_id_replaces_that_nodes_function(user_code):
    from dagrl.dag.graph import graph_from_config

    text = section(1)
    swap = re.search(r"`(dag\.nodes\.\w+\.fn=[^`]+)`", text)[1]
    target = re.search(r"runs it as node `(\w+)`", text)[1]
    graph = graph_from_config(Cfg(compose([swap])).dag)
    import my_nodes

    assert next(node for node in graph.nodes if node.id == target).fn is my_nodes.length_penalty


# ---- 2-4. estimator, loss, KL ------------------------------------------------------------------------------------


def test_registered_estimator_loss_and_kl_pass_preflight_and_compute_what_the_page_wrote(
    user_code, tiny_model, tiny_data, tmp_path
):
    from dagrl.algo.kl import KLController
    from dagrl.algo.policy_loss import actor_loss, token_weights
    from dagrl.nodes.actor import policy_loss_spec
    from dagrl.nodes.advantage import compute_advantage
    from dagrl.nodes.reward import apply_kl_in_reward

    chosen = selections(2, 3, 4)
    assert {
        "algorithm.adv_estimator=group_sign",
        "actor_rollout_ref.actor.policy_loss.loss_mode=capped_ratio",
        "actor_rollout_ref.actor.kl_loss_type=chi2",
        "algorithm.kl_penalty=chi2",
    } <= set(chosen)
    assert "group_sign" not in choices_of("algorithm.adv_estimator")
    importlib.import_module("my_algos")  # what train.py's import does
    assert all("chi2" in choices_of(key) for key in KL_ESTIMATORS.keys)
    cfg = run_overrides(tiny_model, tiny_data, tmp_path, *chosen)
    preflight(cfg)

    # the estimator, through the advantage node: +1 / -1 around the group mean, 0 for a group of equal scores
    batch = Batch(
        {
            "token_level_rewards": torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [2.0, 0.0]]),
            "response_mask": torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]]),
        },
        {"uid": ["a", "a", "b", "b"]},
    )
    out, _ = compute_advantage(node_context(cfg), batch)
    torch.testing.assert_close(out["advantages"], torch.tensor([[1.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))

    # the loss and the KL loss, through the actor's loss function with the spec the actor node builds
    spec = policy_loss_spec(node_context(cfg, response_length=2))
    assert (spec.loss_mode, spec.kl_loss_type, spec.use_kl_loss) == ("capped_ratio", "chi2", True)
    log_prob, old, ref = torch.tensor([[-1.0, -0.5]]), torch.tensor([[-2.0, -0.5]]), torch.tensor([[-1.5, -1.0]])
    mask, advantages = torch.ones(1, 2), torch.tensor([[1.0, -2.0]])
    micro = {
        "token_weights": token_weights(mask, spec.loss_agg_mode, 2.0, 1.0),
        "advantages": advantages,
        "old_log_probs": old,
        "response_mask": mask,
        "ref_log_prob": ref,
    }
    loss, metrics = actor_loss(micro, log_prob, None, spec)
    pg = (-1.0 * min(math.e, spec.clip_ratio_c) + 2.0 * 1.0) / 2  # ratios e and 1, token-mean
    chi2 = 0.5 * math.expm1(-0.5) ** 2  # ref - log_prob = -0.5 on both tokens
    assert loss.item() == pytest.approx(pg + spec.kl_loss_coef * chi2)
    assert metrics["actor/kl_loss"].item() == pytest.approx(chi2)
    assert metrics["actor/ppo_kl"].item() == pytest.approx(-0.5)

    # the KL estimator in the reward: scores - beta x chi2 per token
    batch = Batch(
        {
            "token_level_scores": torch.tensor([[0.0, 1.0]]),
            "response_mask": torch.tensor([[1, 1]]),
            "old_log_probs": log_prob,
            "ref_log_prob": ref,
        }
    )
    out, _ = apply_kl_in_reward(node_context(cfg, kl_ctrl=KLController("fixed", 0.5, 0.1, 100)), batch)
    torch.testing.assert_close(out["token_level_rewards"], torch.tensor([[-0.5 * chi2, 1.0 - 0.5 * chi2]]))


def test_the_launcher_script_or_trainer_plugins_make_the_names_known(user_code, tmp_path):
    chosen = selections(2, 3, 4)
    names = [item for item in chosen if item.split("=")[1] in ("group_sign", "capped_ratio", "chi2")]
    args = [*chosen, f"actor_rollout_ref.model.path={tmp_path / 'no_model'}"]  # stops pre-flight after the names
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *command, *args], cwd=user_code, env=env, capture_output=True, text=True, timeout=60
        )

    plain, script = run("-m", "dagrl.main_dag"), run("train.py")
    plugin = run("-m", "dagrl.main_dag", "trainer.plugins=[my_algos]")
    assert plain.returncode == 2 and len(names) == 4
    for item in names:
        key, value = item.split("=")
        assert f"{key}='{value}' is not one of" in plain.stderr, plain.stderr
    for known in (script, plugin):  # the launcher script, or trainer.plugins in dagrl's own entry point
        assert known.returncode == 2, known.stderr
        assert "is not one of" not in known.stderr and "model directory" in known.stderr, known.stderr
    missing = run("-m", "dagrl.main_dag", "trainer.plugins=[my_algoz]")
    assert missing.returncode == 2 and missing.stderr.count("dagrl: error:") >= 1
    assert "trainer.plugins: importing 'my_algoz' failed (ModuleNotFoundError" in missing.stderr, missing.stderr


# ---- 5. a reward function ----------------------------------------------------------------------------------------


def test_reward_file_selected_by_path_scores_through_the_reward_manager(
    user_code, tiny_model, tiny_data, tmp_path, monkeypatch
):
    from transformers import AutoTokenizer

    from dagrl.trainer.build import build_reward_fn
    from tests.reward.test_manager import make_batch

    chosen = re.findall(r"`(\+?custom_reward_function\.[\w.]+=[^`]+)`", section(5))
    assert "custom_reward_function.path=my_reward.py" in chosen and len(chosen) == 3
    monkeypatch.chdir(user_code)  # the page's relative path, read from the working directory
    cfg = run_overrides(tiny_model, tiny_data, tmp_path, *chosen)
    manager = build_reward_fn(cfg, preflight(cfg))
    assert str(user_code / "my_reward.py") in manager.scorer
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    batch = make_batch(tokenizer, ["7", "It is 7", "8"], ["7", "7", "7"])
    scores, metrics = manager(batch, tokenizer)
    assert scores.sum(-1).tolist() == [1.0, 0.5, 0.0]  # partial=0.5 from reward_kwargs
    last = batch["response_mask"].sum(-1) - 1
    assert scores[0, last[0]] == 1.0  # on the last response token
    assert metrics["reward/acc/mean"] == pytest.approx(1 / 3)


# ---- 6. a model family -------------------------------------------------------------------------------------------


def test_model_family_places_are_the_codes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dagrl.config.model_dir import read_hf_config
    from dagrl.engine.megatron.preflight import unsupported_features
    from dagrl.models import families
    from dagrl.plan import presets
    from dagrl.plan.model import ModelShape

    text = section(6)
    listed = tuple(re.findall(r"`(\w+)`", re.search(r"Supported model types \(.*?\): (.*?)\. ", text)[1]))
    assert listed == tuple(families.FAMILIES) == presets.FAMILIES
    matrix = (ROOT / "tests" / "engine" / "test_family_matrix.py").read_text()
    groups = next(
        ast.literal_eval(node.value)
        for node in ast.parse(matrix).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "GROUPS"
    )
    assert sorted(family for members in groups.values() for family in members) == sorted(listed)
    switches = [field.name for field in dataclasses.fields(families.Family)][2:]
    assert re.findall(r"`(\w+)`", text.split("its switches (")[1].split(")")[0]) == switches

    rows = re.findall(r"^\| `([^`]+)` \| (.*) \|$", text, flags=re.M)
    assert len(rows) == 3
    for path, what in rows:
        source = (ROOT / path).read_text()
        for name in re.findall(r"`(\w+)`", what):
            assert re.search(rf"\b{name}\b", source), f"{path} has no {name}"
    # the family names are written in one module of dagrl
    quoted = re.compile(r"""["'](?:%s)["']""" % "|".join(listed))
    naming = {str(p.relative_to(ROOT)) for p in (ROOT / "dagrl").rglob("*.py") if quoted.search(p.read_text())}
    assert naming == {"dagrl/models/families.py"}

    # another model type is refused by pre-flight, which names the page's list ...
    (tmp_path / "config.json").write_text('{"model_type": "gemma"}')
    with pytest.raises(ConfigError, match=re.escape(f"supported: {', '.join(listed)}")):
        read_hf_config(str(tmp_path))
    # ... and one Family line is what makes it known, with its switches read where the page says
    monkeypatch.setitem(families.FAMILIES, "gemma", families.Family("gemma", "GemmaConfig", qk_norm=True))
    config = dict(
        model_type="gemma",
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=2,
        intermediate_size=96,
        vocab_size=128,
        tie_word_embeddings=False,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert read_hf_config(str(tmp_path))["model_type"] == "gemma"
    assert unsupported_features(SimpleNamespace(**config)) == []
    assert ModelShape.from_hf(config).qk_norm


# ---- 7. a rollout engine -----------------------------------------------------------------------------------------


def _methods(cls) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(cls).items()
        if inspect.isfunction(fn) and not name.startswith("_")
    }


def _params(signature: inspect.Signature) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in signature.parameters.values() if p.name != "self"]


def test_rollout_skeleton_is_the_protocol_and_the_engines_meet_it(user_code):
    from dagrl.engine.rollout.hf import HFRollout
    from dagrl.engine.rollout.interface import RolloutEngine
    from dagrl.engine.rollout.vllm import VLLMRollout

    skeleton = importlib.import_module("my_rollout").MyRollout
    protocol = _methods(RolloutEngine)
    assert set(protocol) == {
        "generate",
        "submit",
        "advance",
        "abort",
        "in_flight",
        "load_weights",
        "load_adapter",
        "wake_weights",
        "wake_cache",
        "sleep",
    }
    assert {name: _params(s) for name, s in _methods(skeleton).items()} == {
        name: _params(s) for name, s in protocol.items()
    }
    assert set(skeleton.__annotations__) == set(RolloutEngine.__annotations__)
    for engine_class in (HFRollout, VLLMRollout):
        methods = _methods(engine_class)
        for name, signature in protocol.items():
            assert _params(methods[name]) == _params(signature), (engine_class.__name__, name)


def test_a_registered_rollout_engine_passes_preflight_and_build_rollout_makes_it(
    user_code, tiny_model, tiny_data, tmp_path
):
    from transformers import AutoTokenizer

    from dagrl.engine.rollout.hf import HFRollout
    from dagrl.engine.rollout.interface import Request, RolloutEngine, SamplingSpec, run_to_completion
    from dagrl.trainer.build import build_rollout

    text = section(7)
    own = tuple(re.findall(r"`(\w+)`", re.search(r"dagrl's own engines, (.*?), are", text)[1]))
    assert (
        own == tuple(ROLLOUT_ENGINES.names()) == tuple(choices_of("actor_rollout_ref.rollout.name")) == ("hf", "vllm")
    )
    for name in own:  # each entry's builder is where the page says, named lazily
        assert ROLLOUT_ENGINES[name].target == f"dagrl.engine.rollout.{name}:build"
    assert "vllm_spec(setup)" in inspect.getsource(importlib.import_module("dagrl.engine.rollout.vllm").build)
    chosen = selections(7)
    assert chosen == ["actor_rollout_ref.rollout.name=my_engine", "trainer.plugins=[my_rollout]"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))

    # without the plugin the name is unknown to pre-flight: one line naming the key
    with pytest.raises(ConfigError) as info:
        preflight(run_overrides(tiny_model, tiny_data, tmp_path, chosen[0]))
    assert info.value.key == "actor_rollout_ref.rollout.name" and "'my_engine' is not one of" in str(info.value)
    assert "my_engine" not in ROLLOUT_ENGINES

    # with it, pre-flight imports the module (its register line runs) and build_rollout calls its builder
    cfg = run_overrides(tiny_model, tiny_data, tmp_path, *chosen)
    shape = preflight(cfg)
    assert "my_engine" in choices_of("actor_rollout_ref.rollout.name")
    engine = build_rollout(cfg, shape, tokenizer, torch.device("cpu"))
    assert type(engine).__module__ == "my_rollout" and type(engine).__name__ == "MyRollout"
    assert engine.model_path == str(tiny_model) and engine.pad_token_id == tokenizer.pad_token_id
    assert tokenizer.eos_token_id in engine.eos_token_ids
    assert all(hasattr(engine, name) for name in RolloutEngine.__annotations__)

    # the hf engine build_rollout makes carries the protocol's attributes and serves a request
    engine = build_rollout(run_overrides(tiny_model, tiny_data, tmp_path), None, tokenizer, torch.device("cpu"))
    assert isinstance(engine, HFRollout)
    assert all(hasattr(engine, name) for name in RolloutEngine.__annotations__)
    prompt = tuple(tokenizer("What is 1 + 2?")["input_ids"])
    done = run_to_completion(engine, [Request("r0", prompt, SamplingSpec(do_sample=False, response_length=2), 0)])
    assert len(done) == 1 and 1 <= len(done[0].token_ids) <= 2 and set(done[0].versions) == {engine.version}


def test_registering_the_rollout_engines_imports_neither_torch_nor_an_engine():
    code = (
        "import sys; from dagrl.config.schema.check import choices_of; "
        "print(list(choices_of('actor_rollout_ref.rollout.name'))); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm', 'transformers') "
        "or m.startswith('dagrl.engine.rollout.') and not m.endswith('.registry')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["['hf', 'vllm']", "[]"], out.stdout


# ---- 8. a config key ---------------------------------------------------------------------------------------------


def test_a_key_declared_as_the_page_writes_it_is_typed_ranged_and_written_to_the_yaml():
    import dataclasses
    import textwrap

    from dagrl.config.schema import spec
    from dagrl.config.schema.root import keys

    section_8 = PAGE.read_text().split("## 8. A config key")[1]
    snippet = re.search(r"```python\n(.*?)```", section_8, flags=re.S).group(1)
    namespace = dict(vars(spec))
    exec(
        "@dataclasses.dataclass\nclass Section:\n" + textwrap.indent(snippet, "    "),
        {"dataclasses": dataclasses, **namespace},
        namespace,
    )
    declared = spec.keys_of(namespace["Section"], "async_training")["async_training.max_staleness"]
    assert (declared.kind, declared.default, declared.range) == ("int", 1, spec.NON_NEGATIVE_INT)
    real = keys()["async_training.max_staleness"]
    assert (real.kind, real.default, real.range) == ("int", 1, spec.NON_NEGATIVE_INT)
    assert "max_staleness: 1 " in (ROOT / "conf" / "async_training" / "default.yaml").read_text()
    named = re.findall(r"`(dagrl/[\w/.<>]+)`", section_8)  # where the keys and the rules between them go
    assert "dagrl/config/preflight/<section>.py" in named
    assert all(list(ROOT.glob(re.sub(r"<\w+>", "*", path))) for path in named), named
