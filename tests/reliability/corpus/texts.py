"""The texts of the files cases write: reward functions, tool and interaction configs, chat templates."""

from __future__ import annotations

from pathlib import Path


TEMPLATE_RAISES = "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
REWARD_RAISES = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1 / 0\n"
REWARD_HANGS = (
    "import time\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    time.sleep(600)\n    return 0.0\n"
)
REWARD_NAN = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float('nan')\n"
REWARD_OTHER_NAME = "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
TOOL_CONFIG = Path(__file__).resolve().parents[3] / "examples" / "agentic" / "tool_config.yaml"
TOOL_NOT_IMPORTING = """tools:
  - class_name: my_tools.calc.CalcTool
    tool_schema: {type: function, function: {name: calc, parameters: {type: object, properties: {}}}}
"""
TOOL_BAD_SCHEMA = """tools:
  - class_name: dagrl.agent.calculator.CalculatorTool
    tool_schema:
      type: function
      function: {name: calculator, parameters: {type: object, properties: {expression: {type: string}},
                 required: [expr]}}
"""
INTERACTION_NOT_ONE = """interaction:
  - name: judge
    class_name: collections.OrderedDict
"""
USER_CODE = "tests.reliability.user_code"  # functions and classes that do not fit the trainer's calls
TOOL_WRONG_ARITY = f"""tools:
  - class_name: {USER_CODE}.ToolWithoutParameters
    tool_schema: {{type: function, function: {{name: calc, parameters: {{type: object, properties: {{}}}}}}}}
"""
INTERACTION_WRONG_ARITY = f"""interaction:
  - name: judge
    class_name: {USER_CODE}.InteractionWithoutMessages
"""
# raises only on a prompt with the word "forbidden" (the corpus puts one in row 20): the row-0 check passes
TEMPLATE_RAISES_ON_A_WORD = (
    "{% for m in messages %}{% if 'forbidden' in m['content'] %}"
    "{{ raise_exception('this template refuses the word forbidden') }}{% endif %}"
    "<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
REWARD_EXITS = (
    "import sys\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    sys.exit(0)\n"
)
REWARD_RETURNS_NONE = (  # None from a lookup, which pre-flight cannot see (a missing `return` it refuses)
    "SCORES = {}  # filled by a loader that never ran\n\n"
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return SCORES.get(solution_str)\n"
)
REWARD_DICT_WITHOUT_SCORE = (  # built up, not written out in the return: only running it shows the missing key
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    result = {'reward': 1.0}\n"
    "    result['acc'] = 1.0\n"
    "    return result\n"
)
TOOL_IS_A_FUNCTION = """tools:
  - class_name: dagrl.config.schema.spec.hinted
    config: {type: native}
    tool_schema: {type: function, function: {name: calc, description: d, parameters: {type: object, properties: {}}}}
"""
TOOL_YAML_WITH_TAB = "tools:\n\t- class_name: dagrl.agent.calculator.CalculatorTool\n"
LONG_QUESTION = [{"role": "user", "content": "What is 3 + 4? Show every step of your working. " * 4}]
REWARD_TWO_ARGS = "def compute_score(solution_str, ground_truth):\n    return float(solution_str == ground_truth)\n"
REWARD_NO_EXTRA_INFO = (
    "def compute_score(data_source, solution_str, ground_truth):\n    return float(solution_str == ground_truth)\n"
)
REWARD_NO_KWARGS = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
SIG = "(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
CALC_SCHEMA = (
    "tool_schema: {type: function, function: {name: calculator, description: calc, parameters: "
    "{type: object, properties: {expression: {type: string}}, required: [expression]}}}"
)
CALC = "  - class_name: dagrl.agent.calculator.CalculatorTool\n    " + CALC_SCHEMA + "\n"
INTERACTION_CONFIG = TOOL_CONFIG.with_name("interaction_config.yaml")
RUN_YAML = "data:\n  train_batch_size: 8\ntrainer:\n  total_epochs: 2\n"
REWARD_OK = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"
