from __future__ import annotations

from tests.reliability.corpus.case import MT_TOOLS, MULTI_TURN, Case
from tests.reliability.corpus.data_makers import _interaction_judge, rows_changed
from tests.reliability.corpus.file_makers import latin1_file, text_file
from tests.reliability.corpus.texts import (
    CALC,
    INTERACTION_CONFIG,
    INTERACTION_NOT_ONE,
    TOOL_BAD_SCHEMA,
    TOOL_IS_A_FUNCTION,
    TOOL_NOT_IMPORTING,
    TOOL_YAML_WITH_TAB,
)

TOPIC = "Multi-turn (agentic) rollouts: tools and interactions"
CASES: tuple[Case, ...] = (
    Case(
        "multi_turn_without_tools_or_interactions",
        "`rollout.multi_turn.enable=true` with neither tools nor an interaction",
        (MULTI_TURN,),
        ("multi_turn.tool_config_path", "interaction_config_path"),
    ),
    Case(
        "multi_turn_with_ignore_eos",
        "`rollout.ignore_eos=true` with multi-turn rollouts (a turn ends at eos)",
        (MULTI_TURN, "actor_rollout_ref.rollout.ignore_eos=true"),
        ("ignore_eos=true", "set ignore_eos=false"),
    ),
    Case(
        "tool_config_missing",
        "`multi_turn.tool_config_path` names a file that does not exist",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("multi_turn.tool_config_path", "no such file"),
    ),
    Case(
        "tool_class_missing",
        "a tool config whose class_name does not import",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml", "tools[0]", "cannot import"),
        make=text_file("tools.yaml", TOOL_NOT_IMPORTING),
    ),
    Case(
        "tool_schema_invalid",
        "a tool schema whose `required` names a parameter it does not have",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml", "tools[0]", "required"),
        make=text_file("tools.yaml", TOOL_BAD_SCHEMA),
    ),
    Case(
        "interaction_class_missing",
        "an interaction config whose class has no generate_response",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/interactions.yaml"),
        ("interactions.yaml", "interaction[0]"),
        make=text_file("interactions.yaml", INTERACTION_NOT_ONE),
    ),
    Case(
        "multi_turn_truncate_side",
        "`multi_turn.tool_response_truncate_side=top`",
        ("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=top",),
        ("tool_response_truncate_side", "left, middle, right"),
    ),
    Case(
        "tool_config_without_multi_turn",
        "`multi_turn.tool_config_path` set but multi_turn.enable left false (the tools would be ignored)",
        ("actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml",),
        (
            "actor_rollout_ref.rollout.multi_turn.tool_config_path is set but "
            "actor_rollout_ref.rollout.multi_turn.enable=false",
            "set actor_rollout_ref.rollout.multi_turn.enable=true",
        ),
        make=text_file("tools.yaml", "tools: []\n"),
    ),
    Case(
        "tool_config_bare_list",
        "a tools.yaml that is a bare list, not `tools: [...]`",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("<tmp>/tools.yaml must hold a non-empty 'tools' list",),
        make=text_file("tools.yaml", "- class_name: dagrl.agent.calculator.CalculatorTool\n"),
    ),
    Case(
        "tool_config_as_list",
        "a tool's `config:` written as a list",
        MT_TOOLS,
        ("config must be a mapping, got list",),
        make=text_file(
            "tools.yaml", "tools:\n" + CALC.replace("    tool_schema", "    config: [type, native]\n    tool_schema")
        ),
    ),
    Case(
        "tool_yaml_latin1",
        "tools.yaml saved as latin-1",
        MT_TOOLS,
        ("<tmp>/tools.yaml is not UTF-8", "line 2", "save it as UTF-8"),
        make=latin1_file("tools.yaml", "tools:\n  # r\xe9sum\xe9 of the calculator\n" + CALC),
    ),
    Case(
        "tool_yaml_with_a_tab",
        "the tool YAML indented with a tab",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml is not valid YAML", "line 2", "never tabs"),
        make=text_file("tools.yaml", TOOL_YAML_WITH_TAB),
    ),
    Case(
        "tool_class_without_module",
        "`class_name: CalculatorTool` (no module)",
        MT_TOOLS,
        ("class_name 'CalculatorTool' must be package.module.ClassName",),
        make=text_file("tools.yaml", "tools:\n" + CALC.replace("dagrl.agent.calculator.", "")),
    ),
    Case(
        "tool_class_is_a_function",
        "a tool's class_name naming a function",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("dagrl.config.schema.spec.hinted is a function, not a class",),
        make=text_file("tools.yaml", TOOL_IS_A_FUNCTION),
    ),
    Case(
        "tool_without_name",
        "a tool_schema without function.name",
        MT_TOOLS,
        ("tool_schema.function.name",),
        make=text_file(
            "tools.yaml",
            "tools:\n  - class_name: dagrl.agent.calculator.CalculatorTool\n    tool_schema: "
            "{type: function, function: {description: calc, parameters: {type: object, "
            "properties: {}}}}\n",
        ),
    ),
    Case(
        "tool_schema_as_string",
        "`tool_schema: calculator`",
        MT_TOOLS,
        ("tool_schema must be a mapping",),
        make=text_file(
            "tools.yaml", "tools:\n  - class_name: dagrl.agent.calculator.CalculatorTool\n    tool_schema: calculator\n"
        ),
    ),
    Case(
        "tool_listed_twice",
        "the same tool twice in tools.yaml",
        MT_TOOLS,
        ("duplicate tool name 'calculator'",),
        make=text_file("tools.yaml", "tools:\n" + CALC + CALC),
    ),
    Case(
        "interaction_config_directory",
        "`multi_turn.interaction_config_path` names a directory",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}"),
        ("actor_rollout_ref.rollout.multi_turn.interaction_config_path='<tmp>' is a directory",),
    ),
    Case(
        "interaction_key_plural",
        "`interactions:` instead of verl's `interaction:`",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/inter.yaml"),
        ("<tmp>/inter.yaml must hold a non-empty 'interaction' list",),
        make=text_file(
            "inter.yaml",
            "interactions:\n  - name: judge\n    class_name: dagrl.agent.interaction.TryAgainInteraction\n",
        ),
    ),
    Case(
        "parallel_tool_calls_zero",
        "`multi_turn.max_parallel_calls=0`",
        ("actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0",),
        ("max_parallel_calls=0", "positive integer"),
    ),
    Case(
        "tool_overlap_negative",
        "`multi_turn.tool_overlap_steps=-1`",
        ("actor_rollout_ref.rollout.multi_turn.tool_overlap_steps=-1",),
        ("tool_overlap_steps=-1", ">= 0"),
    ),
    Case(
        "interaction_name_unknown",
        "rows name interaction 'judge' that the interaction config lacks",
        (
            "data.train_files={ws}/bad.parquet",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={INTERACTION_CONFIG}",
        ),
        ("names the interaction 'judge'", "['try_again']"),
        make=rows_changed(_interaction_judge),
    ),
)
