from __future__ import annotations

from tests.reliability.corpus.case import MULTI_TURN, Case
from tests.reliability.corpus.file_makers import text_file
from tests.reliability.corpus.texts import INTERACTION_WRONG_ARITY, TOOL_WRONG_ARITY, USER_CODE

TOPIC = "User code: plugins, and functions and classes that do not fit the trainer's call"
CASES: tuple[Case, ...] = (
    Case(
        "plugin_file_name",
        "`trainer.plugins=[my_algos.py]` (a file name for a module)",
        ("trainer.plugins=[my_algos.py]",),
        ("trainer.plugins: 'my_algos.py' is not a module name", "trainer.plugins=[my_algos]"),
    ),
    Case(
        "plugin_missing",
        "`trainer.plugins=[no_such_plugin]`",
        ("trainer.plugins=[no_such_plugin]",),
        ("importing 'no_such_plugin' failed (ModuleNotFoundError", "PYTHONPATH"),
    ),
    Case(
        "node_fn_wrong_signature",
        "a node function `def node(batch)` in dag.nodes (the trainer calls fn(ctx, batch))",
        (f"dag.nodes.score.fn={USER_CODE}:node_without_ctx",),
        ("dag.nodes[score].fn", "node_without_ctx(batch)", "fn(ctx, batch)", "def fn(ctx, batch)"),
    ),
    Case(
        "pipeline_fn_needs_arguments",
        "a custom_pipeline_fn that takes an argument (the trainer calls it with none)",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_with_args",),
        ("dag.custom_pipeline_fn", "pipeline_with_args(model_size)", "no arguments", "list of node dicts"),
    ),
    Case(
        "pipeline_fn_exits",
        "a custom_pipeline_fn that calls `sys.exit(0)` (would end the run with exit 0)",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_that_exits",),
        ("dag.custom_pipeline_fn", "pipeline_that_exits", "sys.exit(0)", "not exit"),
    ),
    Case(
        "pipeline_fn_returns_none",
        "a custom_pipeline_fn that forgets its `return`",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_returning_none",),
        ("dag.custom_pipeline_fn", "pipeline_returning_none", "returned NoneType", "return one of them"),
    ),
    Case(
        "tool_execute_wrong_arity",
        "a tool class whose `execute(self, instance_id)` lacks the parameters argument",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        (
            "tools.yaml",
            "tools[0]",
            "ToolWithoutParameters.execute(instance_id)",
            "execute(instance_id, parameters)",
            "**kwargs",
        ),
        make=text_file("tools.yaml", TOOL_WRONG_ARITY),
    ),
    Case(
        "interaction_wrong_arity",
        "an interaction class whose `generate_response(self, instance_id)` lacks the messages argument",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/interactions.yaml"),
        ("interactions.yaml", "interaction[0]", "generate_response(instance_id, messages)", "BaseInteraction"),
        make=text_file("interactions.yaml", INTERACTION_WRONG_ARITY),
    ),
)
