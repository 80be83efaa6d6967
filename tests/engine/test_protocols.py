"""The engine protocols are the contract between nodes and engines: every engine has every member of its protocol
with parameters the protocol's callers can pass, and the nodes use nothing of an engine beyond its protocol."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from dagrl.engine.base import ActorEngine, CriticEngine
from dagrl.engine.megatron.actor import MegatronActorEngine
from dagrl.engine.megatron.critic import MegatronCriticEngine
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import RolloutEngine
from dagrl.engine.rollout.vllm import VLLMRollout

NODES = Path(__file__).resolve().parents[2] / "dagrl" / "nodes"
# StepContext field -> its protocol
FIELDS = {
    "actor": ActorEngine,
    "reference": ActorEngine,
    "teacher": ActorEngine,
    "critic": CriticEngine,
    "rollout": RolloutEngine,
}
# what a node may touch beyond the protocol, and why
BEYOND = {("actor", "modules"): "DAGRL_INJECT_NAN_WEIGHTS writes NaN into a weight (fault injection for the tests)"}


def members(protocol) -> tuple[set[str], set[str]]:
    """(methods, attributes) a protocol declares."""
    methods = {name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")}
    return methods, set(typing.get_type_hints(protocol)) - methods


def assigned_attributes(cls) -> set[str]:
    """Attributes the class sets on self anywhere, or defines in its body (a value or a property)."""
    tree = ast.parse(inspect.getsource(cls))
    found = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    return found | {
        name
        for name, value in inspect.getmembers(cls)
        if isinstance(value, property) or (name in vars(cls) and not callable(value))
    }


@pytest.mark.parametrize(
    "protocol, engine",
    [
        (ActorEngine, MegatronActorEngine),
        (CriticEngine, MegatronCriticEngine),
        (RolloutEngine, HFRollout),
        (RolloutEngine, VLLMRollout),
    ],
    ids=["actor", "critic", "hf", "vllm"],
)
def test_every_engine_has_its_protocol_with_compatible_parameters(protocol, engine):
    methods, attributes = members(protocol)
    assert methods, protocol
    for name in methods:
        assert callable(getattr(engine, name, None)), f"{engine.__name__} lacks {protocol.__name__}.{name}"
        wanted = list(inspect.signature(getattr(protocol, name)).parameters)
        have = inspect.signature(getattr(engine, name)).parameters
        assert list(have)[: len(wanted)] == wanted, (
            f"{engine.__name__}.{name}{inspect.signature(getattr(engine, name))}"
        )
        extra = [p for p in list(have.values())[len(wanted) :] if p.default is inspect.Parameter.empty]
        assert not extra, f"{engine.__name__}.{name} needs {extra}, which {protocol.__name__} callers do not pass"
    missing = attributes - assigned_attributes(engine)
    assert not missing, f"{engine.__name__} never sets {sorted(missing)} ({protocol.__name__})"


def test_nodes_use_only_the_protocols_of_the_engines_they_are_given():
    used = set()
    for path in sorted(NODES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "ctx"
                and node.value.attr in FIELDS
            ):
                used.add((node.value.attr, node.attr, path.name))
    assert {(field, name) for field, name, _ in used} >= {("actor", "train_step"), ("rollout", "generate")}
    beyond = sorted(
        (
            f"{where}: ctx.{field}.{name}"
            for field, name, where in used
            if name not in set().union(*members(FIELDS[field])) and (field, name) not in BEYOND
        )
    )
    assert not beyond, f"nodes reach past the engine protocols (dagrl/engine/base.py, rollout/interface.py): {beyond}"
