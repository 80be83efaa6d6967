"""Graph building: order, validation errors, custom pipelines, execution."""
import dataclasses

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.dag.graph import build_graph, graph_from_config, run_graph

NOOP = "tests.dag_test_nodes:noop"


def spec(node_id, role, deps=(), fn=NOOP, **extra):
    return {"id": node_id, "role": role, "fn": fn, "deps": list(deps), **extra}


def test_grpo_graph_order_scores_before_log_probs_and_kl_after_reference():
    graph = graph_from_config(Cfg(compose([])).dag)
    order = [node.id for node in graph.nodes]
    assert order == ["rollout", "score", "to_actor_layout", "old_log_prob", "ref_log_prob", "reward", "advantage",
                     "actor_update"]


def test_topological_order_independent_of_listing():
    graph = build_graph([spec("update", "actor", ["adv"]), spec("adv", "advantage", ["gen"]), spec("gen", "rollout")])
    assert [n.id for n in graph.nodes] == ["gen", "adv", "update"]


@pytest.mark.parametrize("nodes,message", [
    ([spec("a", "rollout", ["b"]), spec("b", "advantage", ["a"]), spec("c", "actor")], "cycle"),
    ([spec("a", "rollout"), spec("b", "advantage", ["zz"]), spec("c", "actor")], "unknown node 'zz'"),
    ([spec("a", "rollout"), spec("b", "advantage")], "no node with role actor"),
    ([spec("a", "rollout"), spec("a", "advantage"), spec("c", "actor")], "appears twice"),
    ([spec("a", "rollouts"), spec("b", "advantage"), spec("c", "actor")], "valid roles"),
    ([spec("a", "rollout", fn="tests.dag_test_nodes:nope"), spec("b", "advantage"), spec("c", "actor")],
     "has no function 'nope'"),
    ([spec("a", "rollout", fn="no_such_module_x:f"), spec("b", "advantage"), spec("c", "actor")],
     "cannot import module"),
    ([spec("a", "rollout", colour="red"), spec("b", "advantage"), spec("c", "actor")], "unknown fields"),
    ([], "is empty"),
])
def test_graph_errors_are_one_line_config_errors(nodes, message):
    with pytest.raises(ConfigError, match=message) as info:
        build_graph(nodes)
    assert "\n" not in str(info.value)


def test_custom_pipeline_fn_replaces_nodes():
    cfg = Cfg(compose(["dag.custom_pipeline_fn=tests.dag_test_nodes:custom_pipeline"]))
    assert [n.id for n in graph_from_config(cfg.dag).nodes] == ["rollout", "advantage", "update"]


def test_run_graph_passes_node_config_and_collects_metrics():
    seen = []

    def gen(ctx, batch):
        seen.append(ctx.node_config)
        return batch + ["gen"], {"a": 1.0}

    def update(ctx, batch):
        return batch + ["update"], {"b": 2.0}

    @dataclasses.dataclass
    class Ctx:
        node_config: dict

    graph = build_graph([spec("gen", "rollout", fn=gen, config={"k": 1}), spec("adv", "advantage", ["gen"]),
                         spec("upd", "actor", ["adv"], fn=update)])
    timed = []

    def timer(name):
        timed.append(name)
        import contextlib
        return contextlib.nullcontext()

    batch, metrics = run_graph(graph, Ctx(node_config={}), [], timer)
    assert batch == ["gen", "update"] and metrics == {"a": 1.0, "b": 2.0}
    assert seen == [{"k": 1}] and timed == ["gen", "adv", "upd"]


def batch_only(batch):
    return batch, {}


def test_a_node_function_that_cannot_take_ctx_and_batch_is_refused_before_the_first_step():
    with pytest.raises(ConfigError, match=r"dag.nodes\[a\].fn=batch_only: batch_only\(batch\) cannot take the "
                                          r"trainer's call fn\(ctx, batch\)"):
        build_graph([spec("a", "rollout", fn=batch_only), spec("b", "advantage"), spec("c", "actor")])


def test_preflight_checks_user_nodes_and_dry_calls_the_pipeline_without_importing_dagrl_nodes(monkeypatch):
    """preflight_graph imports the user's functions only: dagrl's own node modules import torch."""
    import importlib

    from dagrl.dag.graph import preflight_graph

    imported = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name) or real(name, *a))
    preflight_graph(Cfg(compose([])).dag)
    assert not [name for name in imported if name.startswith("dagrl.nodes")]
    with pytest.raises(ConfigError, match=r"node_without_ctx\(batch\) cannot take"):
        preflight_graph(Cfg(compose(["dag.nodes.1.fn=tests.reliability.user_code:node_without_ctx"])).dag)
    with pytest.raises(ConfigError, match=r"pipeline_that_exits' called sys.exit\(0\)"):
        preflight_graph(Cfg(compose(["dag.custom_pipeline_fn=tests.reliability.user_code:pipeline_that_exits"])).dag)
