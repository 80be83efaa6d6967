"""User code that does not fit what the trainer calls (the corpus's graph, tool and interaction cases): importable as
tests.reliability.user_code, without torch, so pre-flight stays fast."""

from __future__ import annotations

import sys


def node_without_ctx(batch):  # a node is called as fn(ctx, batch)
    return batch, {}


def pipeline_with_args(model_size):  # the trainer calls custom_pipeline_fn()
    return []


def pipeline_that_exits():
    sys.exit(0)


def pipeline_returning_none():
    nodes = [{"id": "rollout", "role": "rollout", "fn": "dagrl.nodes.rollout:generate"}]  # noqa: F841 - forgot return


class ToolWithoutParameters:
    """execute lacks the `parameters` argument the turn loop passes."""

    def __init__(self, config, tool_schema):
        self.tool_schema = tool_schema

    async def create(self, instance_id=None, **kwargs):
        return instance_id

    async def execute(self, instance_id):
        return "done", 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None


class InteractionWithoutMessages:
    """generate_response lacks the `messages` argument the turn loop passes."""

    def __init__(self, config):
        self.config = config

    async def start_interaction(self, instance_id=None, **kwargs):
        return instance_id

    async def generate_response(self, instance_id):
        return True, "", 0.0, {}

    async def finalize_interaction(self, instance_id, **kwargs):
        return None
