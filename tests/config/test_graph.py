"""Graph building: order, validation errors, custom pipelines, execution."""

import dataclasses
import re

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
    assert order == [
        "weight_sync",
        "rollout",
        "score",
        "to_actor_layout",
        "old_log_prob",
        "ref_log_prob",
        "reward",
        "advantage",
        "actor_update",
    ]


def test_topological_order_independent_of_listing():
    graph = build_graph([spec("update", "actor", ["adv"]), spec("adv", "advantage", ["gen"]), spec("gen", "rollout")])
    assert [n.id for n in graph.nodes] == ["gen", "adv", "update"]


@pytest.mark.parametrize(
    "nodes,message",
    [
        ([spec("a", "rollout", ["b"]), spec("b", "advantage", ["a"]), spec("c", "actor")], "cycle"),
        ([spec("a", "rollout"), spec("b", "advantage", ["zz"]), spec("c", "actor")], "unknown node 'zz'"),
        ([spec("a", "rollout"), spec("b", "advantage")], "no node with role actor"),
        ([spec("a", "rollout"), spec("a", "advantage"), spec("c", "actor")], "appears twice"),
        ([spec("a", "rollouts"), spec("b", "advantage"), spec("c", "actor")], "valid roles"),
        (
            [spec("a", "rollout", fn="tests.dag_test_nodes:nope"), spec("b", "advantage"), spec("c", "actor")],
            "has no function 'nope'",
        ),
        (
            [spec("a", "rollout", fn="no_such_module_x:f"), spec("b", "advantage"), spec("c", "actor")],
            "cannot import module",
        ),
        ([spec("a", "rollout", colour="red"), spec("b", "advantage"), spec("c", "actor")], "unknown fields"),
        ([], "is empty"),
    ],
)
def test_graph_errors_are_one_line_config_errors(nodes, message):
    with pytest.raises(ConfigError, match=message) as info:
        build_graph(nodes)
    assert "\n" not in str(info.value)


def test_custom_pipeline_fn_replaces_nodes():
    cfg = Cfg(compose(["dag.custom_pipeline_fn=tests.dag_test_nodes:custom_pipeline"]))
    assert [n.id for n in graph_from_config(cfg.dag).nodes] == ["sync", "rollout", "advantage", "update"]


def test_the_pipeline_is_called_once_for_all_of_preflight_and_the_trainer():
    from dagrl.config.preflight import graph as graph_rules
    from dagrl.dag.graph import preflight_graph
    from tests import dag_test_nodes

    cfg = Cfg(compose(["dag.custom_pipeline_fn=tests.dag_test_nodes:counted_pipeline"]))
    dag_test_nodes.CALLS.clear()
    graph_rules.check_graph_nodes(cfg, 1)
    assert graph_rules.graph_roles(cfg) == {"weight_sync", "rollout", "advantage", "actor"}
    preflight_graph(cfg.dag)
    graph = graph_from_config(cfg.dag)
    graph.nodes[0].config["mutated"] = True  # a caller's change does not reach the next caller
    assert [n.id for n in graph_from_config(cfg.dag).nodes] == ["sync", "rollout", "advantage", "update"]
    assert "mutated" not in graph_from_config(cfg.dag).nodes[0].config
    assert len(dag_test_nodes.CALLS) == 1


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

    graph = build_graph(
        [
            spec("gen", "rollout", fn=gen, config={"k": 1}),
            spec("adv", "advantage", ["gen"]),
            spec("upd", "actor", ["adv"], fn=update),
        ]
    )
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
    with pytest.raises(
        ConfigError,
        match=r"dag.nodes\[a\].fn=batch_only: batch_only\(batch\) cannot take the "
        r"trainer's call fn\(ctx, batch\)",
    ):
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
        preflight_graph(Cfg(compose(["dag.nodes.score.fn=tests.reliability.user_code:node_without_ctx"])).dag)
    with pytest.raises(ConfigError, match=r"pipeline_that_exits' called sys.exit\(0\)"):
        preflight_graph(Cfg(compose(["dag.custom_pipeline_fn=tests.reliability.user_code:pipeline_that_exits"])).dag)


# ---- background nodes (reward_model.launch_reward_fn_async) ------------------------------------------------------
def rows_batch():
    import torch

    from dagrl.data.batch import Batch

    return Batch({"responses": torch.arange(8).view(4, 2)}, {"uid": ["a", "a", "b", "b"]})


def recording_timer(timed):
    import contextlib
    import time

    @contextlib.contextmanager
    def timer(name):
        start = time.perf_counter()
        yield
        timed[name] = time.perf_counter() - start

    return timer


@dataclasses.dataclass
class NodeCtx:
    node_config: dict


def sleeper(column, seconds, check=None, meet=None):
    """A node that sleeps `seconds` (after waiting at the barrier `meet` for the other node there, if given)."""
    import time

    import torch

    def node(ctx, batch):
        if check:
            assert check in batch, f"{column}'s node ran before {check} joined"
        if meet:
            meet.wait()
        time.sleep(seconds)
        batch[column] = torch.ones(len(batch))
        return batch, {column: seconds}

    return node


def test_a_background_node_runs_beside_the_nodes_that_do_not_need_it_and_joins_its_columns():
    import threading

    # score and logp meet at a barrier, which only nodes running at the same time pass (one after the other, the
    # first would wait there until the barrier broke); then score takes 0.3 s and logp 0.6 s, however loaded the
    # machine: the step finds the scores ready, having waited for them less than they took.
    both = threading.Barrier(2, timeout=30)
    graph = build_graph(
        [
            spec("gen", "rollout"),
            spec("score", "reward", ["gen"], fn=sleeper("scores", 0.3, meet=both), background=True),
            spec("logp", "actor", ["gen"], fn=sleeper("logp", 0.6, meet=both)),
            spec("adv", "advantage", ["logp", "score"], fn=sleeper("adv", 0.0, check="scores")),
            spec("upd", "actor", ["adv"]),
        ]
    )
    assert [node.id for node in graph.nodes] == ["gen", "score", "logp", "adv", "upd"]  # started before logp
    timed = {}
    batch, metrics = run_graph(graph, NodeCtx({}), rows_batch(), recording_timer(timed))
    assert {"scores", "logp", "adv"} <= set(batch.keys()) and metrics == {"scores": 0.3, "logp": 0.6, "adv": 0.0}
    assert timed["score_background"] >= 0.3 and timed["score"] < timed["score_background"] - 0.2  # its own seconds


def test_a_background_node_without_dependents_is_joined_at_the_end():
    graph = build_graph(
        [
            spec("gen", "rollout"),
            spec("extra", "custom", ["gen"], fn=sleeper("extra", 0.1), background=True),
            spec("adv", "advantage", ["gen"]),
            spec("upd", "actor", ["adv"]),
        ]
    )
    batch, metrics = run_graph(graph, NodeCtx({}), rows_batch(), recording_timer({}))
    assert "extra" in batch and metrics == {"extra": 0.1}


def failing(ctx, batch):
    raise ValueError("scorer broke")


def test_a_background_node_error_is_raised_by_the_node_that_waits_for_it():
    graph = build_graph(
        [
            spec("gen", "rollout"),
            spec("score", "reward", ["gen"], fn=failing, background=True),
            spec("adv", "advantage", ["score"]),
            spec("upd", "actor", ["adv"]),
        ]
    )
    with pytest.raises(ValueError, match="scorer broke"):
        run_graph(graph, NodeCtx({}), rows_batch(), recording_timer({}))


def test_a_main_thread_error_waits_for_the_background_node_and_goes_up(caplog):
    finished = []

    def slow_failing(ctx, batch):
        import time

        time.sleep(0.3)
        finished.append(True)
        raise ValueError("scorer broke too")

    graph = build_graph(
        [
            spec("gen", "rollout"),
            spec("score", "reward", ["gen"], fn=slow_failing, background=True),
            spec("logp", "actor", ["gen"], fn=failing),
            spec("adv", "advantage", ["score", "logp"]),
            spec("upd", "actor", ["adv"]),
        ]
    )
    with pytest.raises(ValueError, match="scorer broke$"):
        run_graph(graph, NodeCtx({}), rows_batch(), recording_timer({}))
    assert finished == [True]  # no scorer left running into the next step
    assert "background node 'score' also failed" in caplog.text


def test_a_node_that_changes_rows_under_a_background_node_is_named():
    def drop_row(ctx, batch):
        return batch.select([0, 1, 2]), {}

    graph = build_graph(
        [
            spec("gen", "rollout"),
            spec("score", "reward", ["gen"], fn=sleeper("scores", 0.1), background=True),
            spec("filter", "custom", ["gen"], fn=drop_row),
            spec("adv", "advantage", ["score", "filter"]),
            spec("upd", "actor", ["adv"]),
        ]
    )
    with pytest.raises(RuntimeError, match="changed the batch's rows while background node 'score'"):
        run_graph(graph, NodeCtx({}), rows_batch(), recording_timer({}))


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"role": "actor"}, "cannot run in the background"),
        ({"background": "yes"}, "background='yes'; write true or false"),
    ],
)
def test_background_flag_errors(extra, message):
    node = {**spec("score", "reward", ["gen"], background=True), **extra}
    with pytest.raises(ConfigError, match=message):
        build_graph([spec("gen", "rollout"), node, spec("adv", "advantage", ["score"]), spec("upd", "actor", ["adv"])])


def test_launch_reward_fn_async_scores_behind_the_layout_node_beside_the_log_prob_passes():
    """The switch grpo.yaml declares (dag.switches.background_scoring), inherited by ppo and opd: the graph the
    config composes is the graph that runs."""
    for dag, reader in (("grpo", "ref_log_prob"), ("ppo", "values"), ("opd", "teacher_log_prob")):
        cfg = Cfg(compose([f"dag={dag}", "reward_model.launch_reward_fn_async=true"]))
        switch = cfg.dag.switches.background_scoring
        assert switch.key == "reward_model.launch_reward_fn_async" and switch.on is True  # the value, interpolated
        graph = graph_from_config(cfg.dag)
        by_id = {node.id: node for node in graph.nodes}
        order = [node.id for node in graph.nodes]
        assert order[:5] == ["weight_sync", "rollout", "to_actor_layout", "score", "old_log_prob"]
        assert by_id["score"].background and by_id["score"].fn is by_id_of(dag)["score"].fn  # the same scorer
        assert by_id["score"].deps == ("to_actor_layout",) and by_id["to_actor_layout"].deps == ("rollout",)
        assert by_id["reward"].deps == (reader, "score")  # the KL-in-reward node waits for the scores
    assert not any(node.background for node in by_id_of("grpo").values())  # off: as declared in `nodes`


def by_id_of(dag):
    return {node.id: node for node in graph_from_config(Cfg(compose([f"dag={dag}"])).dag).nodes}


ASYNC = "reward_model.launch_reward_fn_async=true"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["dag=dapo", "algorithm.filter_groups.enable=false"], "node 'dynamic_sampling' reads the scores before the "),
        (
            ["dag.nodes.to_actor_layout=null", "dag.nodes.old_log_prob.deps=[score]"],
            r"no reshard node \(dagrl.nodes.layout:to_actor_layout\) to score behind",
        ),
        (["dag.nodes.reward.deps=[ref_log_prob]"], "no node after it depends on 'score' to wait for the scores"),
        (
            [
                "dag.nodes.score=null",
                "dag.nodes.to_actor_layout.deps=[rollout]",
                "dag.nodes.reward.deps=[ref_log_prob]",
            ],
            "changes node 'score', which the graph does not have",
        ),
    ],
)
def test_a_graph_that_cannot_score_in_the_background_is_named_in_one_line(overrides, message):
    from dagrl.dag.graph import preflight_graph

    cfg = Cfg(compose([*overrides, ASYNC]))
    with pytest.raises(ConfigError, match=message) as info:
        preflight_graph(cfg.dag)
    assert info.value.key == "reward_model.launch_reward_fn_async" and "\n" not in str(info.value)
    assert str(info.value).startswith("reward_model.launch_reward_fn_async=true ")
    assert str(info.value).endswith("; set reward_model.launch_reward_fn_async=false")
    graph_from_config(Cfg(compose(overrides)).dag)  # the same graph without the switch is fine


@pytest.mark.parametrize(
    "override,message",
    [
        ("dag.switches.background_scoring.on=maybe", "on='maybe' is not true or false: make it the key's value"),
        ("dag.switches.background_scoring.key=null", 'must be {key: <key>, "on": ${<key>}, nodes:'),
        ("dag.switches.background_scoring.nodes.score=1", "nodes must be a map of node id"),
    ],
)
def test_a_malformed_switch_is_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        graph_from_config(Cfg(compose([override])).dag)
    assert info.value.key == "dag.switches.background_scoring"


def test_a_bare_on_in_a_graph_file_is_named_with_the_quoting_fix(tmp_path):
    """YAML reads a bare `on:` as the key true: the switch says to quote it."""
    (tmp_path / "dag").mkdir()
    (tmp_path / "dag" / "mine.yaml").write_text(
        "defaults: [grpo, _self_]\nswitches:\n  mine: {key: trainer.val_before_train, on: true, nodes: {}}\n"
    )
    with pytest.raises(ConfigError, match=re.escape('quote it, "on": ${<key>}')) as info:
        graph_from_config(Cfg(compose(["dag=mine"], config_dirs=[str(tmp_path)])).dag)
    assert info.value.key == "dag.switches.mine" and "\n" not in str(info.value)


def test_a_switch_turned_off_or_removed_leaves_the_nodes_as_declared():
    declared = [(node.id, node.deps) for node in by_id_of("grpo").values()]
    removed = graph_from_config(Cfg(compose(["dag.switches.background_scoring=null", ASYNC])).dag)
    assert [(node.id, node.deps) for node in removed.nodes] == declared


def test_a_background_node_knows_it_runs_in_the_background():
    from dagrl.dag.graph import in_background

    def where(column):
        def node(ctx, batch):
            batch[column] = [in_background()] * len(batch)
            return batch, {}

        return node

    graph = build_graph(
        [
            spec("gen", "rollout", fn=where("main")),
            spec("score", "reward", ["gen"], fn=where("thread"), background=True),
            spec("adv", "advantage", ["score"]),
            spec("upd", "actor", ["adv"]),
        ]
    )
    batch, _ = run_graph(graph, NodeCtx({}), rows_batch(), recording_timer({}))
    assert list(batch["main"]) == [False] * 4 and list(batch["thread"]) == [True] * 4 and not in_background()


# ---- the weight sync before the rollout ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides,source",
    [
        (["dag.nodes.weight_sync=null", "dag.nodes.rollout.deps=[]"], "dag.nodes"),
        (["dag.nodes.weight_sync.role=custom"], "dag.nodes"),
        (["dag.custom_pipeline_fn=tests.dag_test_nodes:pipeline_without_weight_sync"], "dag.custom_pipeline_fn"),
    ],
)
def test_a_rollout_node_without_a_weight_sync_before_it_is_refused_in_preflight(overrides, source):
    from dagrl.dag.graph import preflight_graph

    with pytest.raises(ConfigError, match="has no node with role weight_sync before it") as info:
        preflight_graph(Cfg(compose(overrides)).dag)
    assert info.value.key == source and str(info.value).startswith(f"{source}: node 'rollout' (role rollout)")
    assert "add weight_sync: {role: weight_sync, fn: dagrl.nodes.rollout:weight_sync, deps: []}" in str(info.value)


def test_the_graph_describes_itself_as_it_runs_with_the_switches_applied():
    """The trainer logs `graph.describe()` at start-up: run order, the waits that are not the node before, and
    background nodes, so the background-scoring switch shows where it moved the score node."""
    plain = graph_from_config(Cfg(compose([])).dag).describe()
    assert plain.startswith("weight_sync -> rollout -> score -> to_actor_layout -> old_log_prob")
    assert "reward [after ref_log_prob, score]" in plain and "background" not in plain
    switched = graph_from_config(Cfg(compose(["reward_model.launch_reward_fn_async=true"])).dag).describe()
    assert "rollout -> to_actor_layout -> score [background] -> old_log_prob [after to_actor_layout]" in switched


def test_the_trainer_runs_the_graph_preflight_built(monkeypatch, tiny_model, tiny_data, tmp_path):
    """Pre-flight builds the step graph once (dagrl's node functions as stand-ins, no torch import); the trainer
    takes that graph with the functions themselves in their places and builds none of its own."""
    from dagrl.config.validate import preflight
    from dagrl.dag.functions import StandIn
    from dagrl.nodes.rollout import weight_sync
    from dagrl.trainer import loop
    from tests.conftest import cpu_run_overrides

    overrides = [*cpu_run_overrides(tiny_model, tiny_data, tmp_path), "reward_model.launch_reward_fn_async=true"]
    shape = preflight(Cfg(compose(overrides)))
    assert (
        isinstance(shape.graph.nodes[0].fn, StandIn)
        and shape.graph.nodes[0].fn.spec == "dagrl.nodes.rollout:weight_sync"
    )

    def built_again(*args, **kwargs):
        raise AssertionError("the trainer built the graph again")

    monkeypatch.setattr(loop, "graph_from_config", built_again)
    graph = loop.step_graph(Cfg(compose(overrides)), shape)
    assert graph.describe() == shape.graph.describe() and "score [background]" in graph.describe()
    assert graph.nodes[0].fn is weight_sync and not any(isinstance(node.fn, StandIn) for node in graph.nodes)
    assert [dataclasses.replace(n, fn=None) for n in graph.nodes] == [
        dataclasses.replace(n, fn=None) for n in shape.graph.nodes
    ]
