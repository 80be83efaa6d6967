"""Pre-flight of `actor_rollout_ref.rollout.multi_turn` and the AgentLoop a run builds from it.

The tool and interaction files are loaded (their classes imported and constructed, their schemas checked) in
pre-flight, so a missing file, a class that does not import or an invalid schema stops the run in one line before
any model is built.
"""

from __future__ import annotations

from typing import Any

from dagrl.agent.prompting import FORMATS
from dagrl.config.checks import positive_int
from dagrl.config.errors import require
from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg

KEY = "actor_rollout_ref.rollout.multi_turn"
TRUNCATE_SIDES = ("left", "middle", "right")


def check_multi_turn(cfg: Cfg) -> None:
    options = cfg.actor_rollout_ref.rollout.multi_turn
    require(isinstance(options.enable, bool), f"{KEY}.enable", f"{KEY}.enable={options.enable!r} must be true or false")
    for name in ("max_assistant_turns", "max_user_turns", "max_parallel_calls", "max_tool_response_length"):
        positive_int(cfg, f"{KEY}.{name}")
    require(
        options.tool_response_truncate_side in TRUNCATE_SIDES,
        f"{KEY}.tool_response_truncate_side",
        f"{KEY}.tool_response_truncate_side={options.tool_response_truncate_side!r} is not one of: "
        f"{', '.join(TRUNCATE_SIDES)}",
    )
    require(
        options.format in FORMATS,
        f"{KEY}.format",
        f"{KEY}.format={options.format!r} is not one of: {', '.join(FORMATS)}",
    )
    timeout = options.tool_timeout_s
    require(
        isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0,
        f"{KEY}.tool_timeout_s",
        f"{KEY}.tool_timeout_s={timeout!r} must be a positive number of seconds",
    )
    lag = options.tool_overlap_steps
    require(
        isinstance(lag, int) and not isinstance(lag, bool) and lag >= 0,
        f"{KEY}.tool_overlap_steps",
        f"{KEY}.tool_overlap_steps={lag!r} must be an integer >= 0 (engine steps)",
    )
    paths = (options.tool_config_path, options.interaction_config_path)
    if not options.enable:  # a tool or interaction file alone would be ignored: the run would train single-turn
        given = next(
            (f"{KEY}.{name}" for name, path in zip(("tool_config_path", "interaction_config_path"), paths) if path),
            None,
        )
        require(
            given is None,
            str(given),
            f"{given} is set but {KEY}.enable=false, so it would be ignored (every "
            f"rollout single-turn): set {KEY}.enable=true, or drop {given}",
        )
        return
    # a turn ends at the model's eos: without it every assistant turn would run to the response budget
    require(
        cfg.actor_rollout_ref.rollout.ignore_eos is not True,
        "actor_rollout_ref.rollout.ignore_eos",
        f"actor_rollout_ref.rollout.ignore_eos=true with {KEY}.enable=true: a turn ends at eos, so every assistant "
        f"turn would run to the response limit; set ignore_eos=false (it is for fixed-length benchmarks)",
    )
    require(
        any(paths),
        f"{KEY}.tool_config_path",
        f"{KEY}.enable=true needs {KEY}.tool_config_path (tools) or {KEY}.interaction_config_path "
        f"(feedback turns); set one, or set {KEY}.enable=false",
    )
    for name, path in zip(("tool_config_path", "interaction_config_path"), paths):
        if path:
            check_utf8(f"{KEY}.{name}", path)
    _, interactions = load(cfg)
    check_interaction_names(cfg, interactions)


def check_interaction_names(cfg: Cfg, interactions: dict[str, Any]) -> None:
    """Every interaction a data row names (extra_info.interaction_kwargs.name) is in the interaction config: the
    agent loop would fail at the first step that draws such a row, once the models are built."""
    import os

    from dagrl.config.checks import as_list
    from dagrl.data.checks import nested_values

    for key in ("data.train_files", "data.val_files"):
        files = cfg.data.train_files if key == "data.train_files" else cfg.data.val_files
        for path in as_list(files) if files else []:
            if not isinstance(path, str) or not os.path.isfile(os.path.expanduser(path)):
                continue  # the data checks name a missing or unreadable file
            try:
                names = nested_values(path, "extra_info.interaction_kwargs.name")
            except ValueError:
                continue  # an unreadable file: the data checks name it
            unknown = next(((name, row) for name, row in names.items() if name not in interactions), None)
            require(
                unknown is None,
                key,
                f"data file {path!r} row {unknown[1] if unknown else 0} names the interaction "
                f"{unknown[0] if unknown else ''!r} (extra_info.interaction_kwargs.name), which "
                f"{KEY}.interaction_config_path does not define (it has {sorted(interactions) or 'none'}): add it "
                f"there, or fix the rows",
            )


def check_utf8(key: str, path: str) -> None:
    """A YAML file saved in another encoding (latin-1 from an old editor) would fail in the YAML reader."""
    import os

    try:
        with open(os.path.expanduser(str(path)), "rb") as handle:
            data = handle.read()
    except OSError:
        return  # missing or a directory: load() says so
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConfigError(
            key,
            f"{key}: {path} is not UTF-8 (byte {data[error.start]:#04x} on line {line}); save "
            f"it as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def load(cfg: Cfg) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's tools (by function name) and interactions (by name)."""
    from dagrl.agent.interaction import load_interactions
    from dagrl.agent.tools import load_tools

    options = cfg.actor_rollout_ref.rollout.multi_turn
    tools = load_tools(options.tool_config_path) if options.tool_config_path else {}
    interactions = load_interactions(options.interaction_config_path) if options.interaction_config_path else {}
    return tools, interactions


def build_agent_loop(cfg: Cfg, tokenizer: Any) -> Any:
    """The run's AgentLoop, or None when multi-turn is off."""
    from dagrl.agent.loop import AgentLoop
    from dagrl.agent.prompting import template_takes_tools

    options = cfg.actor_rollout_ref.rollout.multi_turn
    if not options.enable:
        return None
    tools, interactions = load(cfg)
    loop = AgentLoop(options, tokenizer, tools, interactions, template_takes_tools(tokenizer))
    probe = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
    try:
        loop.renderer.segment(probe, [{"role": "tool", "content": "3"}], tokenizer.eos_token or "")
    except Exception as error:
        raise ConfigError(
            f"{KEY}.enable",
            f"{KEY}.enable=true: the chat template of "
            f"{cfg.actor_rollout_ref.model.path} cannot render a tool turn after an "
            f"assistant turn ({error}); use a chat model whose template appends "
            f"turns (ChatML, Qwen, Llama 3)",
        ) from None
    return loop
