from __future__ import annotations

from tests.reliability.corpus.case import Case
from tests.reliability.corpus.file_makers import text_file


TOPIC = "The graph (dag.*)"
CASES: tuple[Case, ...] = (
    Case(
        "pipeline_fn_missing",
        "`dag.custom_pipeline_fn=no_such_pkg.graphs:build`",
        ("dag.custom_pipeline_fn=no_such_pkg.graphs:build",),
        ("dag.custom_pipeline_fn", "cannot import module"),
    ),
    Case(
        "builtin_node_fn_misspelt",
        "`dag.nodes.score.fn=dagrl.nodes.rollout:no_such_fn` (found in pre-flight, without importing the module)",
        ("dag.nodes.score.fn=dagrl.nodes.rollout:no_such_fn",),
        ("dag.nodes[score].fn", "has no function 'no_such_fn'", "generate"),
    ),
    Case(
        "dag_fn_with_dot",
        "`dag.nodes.old_log_prob.fn=dagrl.nodes.log_prob.old_log_prob` (a dot for the colon)",
        ("dag.nodes.old_log_prob.fn=dagrl.nodes.log_prob.old_log_prob",),
        ("dag.nodes[old_log_prob].fn", "must look like 'package.module:function'"),
    ),
    Case(
        "dag_dep_misspelt",
        "`dag.nodes.score.deps=[rolout]`",
        ("dag.nodes.score.deps=[rolout]",),
        ("depends on unknown node 'rolout'", "known: weight_sync, rollout"),
    ),
    Case(
        "dag_rollout_without_weight_sync",
        "`dag.nodes.weight_sync=null dag.nodes.rollout.deps=[]` (a graph whose rollout node has no weight sync)",
        ("dag.nodes.weight_sync=null", "dag.nodes.rollout.deps=[]"),
        (
            "dag.nodes: node 'rollout' (role rollout) has no node with role weight_sync before it",
            "add weight_sync: {role: weight_sync, fn: dagrl.nodes.rollout:weight_sync, deps: []}",
            "make 'rollout' depend on it",
        ),
    ),
    Case(
        "dag_deps_as_string",
        "`dag.nodes.old_log_prob.deps=rollout`",
        ("dag.nodes.old_log_prob.deps=rollout",),
        ("has deps='rollout', not a list of node ids", "[rollout]"),
    ),
    Case(
        "dag_role_unknown",
        "`dag.nodes.rollout.role=generator`",
        ("dag.nodes.rollout.role=generator",),
        ("role 'generator'", "valid roles"),
    ),
    Case(
        "dag_node_id_field",
        "`+dag.nodes.score.id=rollout` (a node's id is its key in the map)",
        ("+dag.nodes.score.id=rollout",),
        ("unknown config key 'dag.nodes.score.id'", "dag.nodes.score has: role"),
    ),
    Case(
        "dag_cycle",
        "`dag.nodes.score.deps=[actor_update]` (a cycle)",
        ("dag.nodes.score.deps=[actor_update]",),
        ("the graph has a cycle",),
    ),
    Case(
        "dag_node_as_string",
        "`dag.nodes.score=rollout`",
        ("dag.nodes.score=rollout",),
        ("dag.nodes[2] must be a mapping", "got 'rollout'"),
    ),
    Case("dag_nodes_empty", "`dag.nodes=[]`", ("dag.nodes=[]",), ("dag.nodes is a section", "dag.nodes.weight_sync=")),
    Case(
        "pipeline_fn_with_dot",
        "`dag.custom_pipeline_fn=my_graphs.build`",
        ("dag.custom_pipeline_fn=my_graphs.build",),
        ("dag.custom_pipeline_fn='my_graphs.build' must look like 'package.module:function'",),
    ),
    Case(
        "pipeline_fn_not_a_function",
        "`dag.custom_pipeline_fn` naming a dict",
        ("dag.custom_pipeline_fn=dagrl.config.schema.spec:NOUNS",),
        ("NOUNS", "is a dict, not a function"),
    ),
    Case(
        "pipeline_fn_returns_empty",
        "`dag.custom_pipeline_fn=builtins:list` (returns [])",
        ("dag.custom_pipeline_fn=builtins:list",),
        ("dag.custom_pipeline_fn is empty",),
    ),
    Case(
        "graph_nodes_as_string",
        "`dag.nodes=rollout`",
        ("dag.nodes=rollout",),
        ("dag.nodes='rollout'", "a map of node id to node"),
    ),
    Case(
        "dag_node_removed_with_readers",
        "`dag.nodes.rollout=null` (a node removed that others depend on)",
        ("dag.nodes.rollout=null",),
        ("depends on unknown node 'rollout'",),
    ),
    Case(
        "pipeline_fn_file_path",
        "`dag.custom_pipeline_fn=graphs.py:build` (a file path)",
        ("dag.custom_pipeline_fn={ws}/graphs.py:build",),
        ("not a file path", "PYTHONPATH", "graphs:build"),
        make=text_file("graphs.py", "def build():\n    return []\n"),
    ),
    Case(
        "dag_switch_on_not_a_bool",
        "`dag.switches.background_scoring.on=maybe` (a switch's `on` is its key's value)",
        ("dag.switches.background_scoring.on=maybe",),
        (
            "dag.switches.background_scoring.on='maybe' is not true or false",
            '"on": ${reward_model.launch_reward_fn_async}',
        ),
    ),
    Case(
        "dag_switch_without_key",
        "`dag.switches.background_scoring.key=null` (a switch that does not name its key)",
        ("dag.switches.background_scoring.key=null",),
        ('dag.switches.background_scoring must be {key: <key>, "on": ${<key>}, nodes: {id: changes}}',),
    ),
)
