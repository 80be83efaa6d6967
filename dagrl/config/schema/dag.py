"""The dag section: the graph a step runs. Its options are whole graphs (conf/dag/<name>.yaml: grpo, the default,
dapo, ppo, opd), written by hand, not from this declaration."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import Graph, Section, Switches, key


@dataclass(frozen=True)
class Dag(Section):
    """The node graph of one training step."""

    custom_pipeline_fn: str | None = key(
        None, "module:function returning a list of node dicts, used instead of `nodes`"
    )
    nodes: Graph = key({}, "id: {role, fn (module:function), deps, optional per-node config}")
    switches: Switches = key(
        {}, "name: {key, on: ${<key>}, nodes}: the node changes a key of another section makes while it is true"
    )
