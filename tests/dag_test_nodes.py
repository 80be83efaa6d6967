"""Node functions used by the graph tests (importable as tests.dag_test_nodes:...)."""


def noop(ctx, batch):
    return batch, {}


CALLS = []


def counted_pipeline():
    """custom_pipeline, counting its calls."""
    CALLS.append(1)
    return custom_pipeline()


def custom_pipeline():
    return [
        {"id": "sync", "role": "weight_sync", "fn": "tests.dag_test_nodes:noop", "deps": []},
        {"id": "rollout", "role": "rollout", "fn": "tests.dag_test_nodes:noop", "deps": ["sync"]},
        {"id": "advantage", "role": "advantage", "fn": "tests.dag_test_nodes:noop", "deps": ["rollout"]},
        {"id": "update", "role": "actor", "fn": "tests.dag_test_nodes:noop", "deps": ["advantage"]},
    ]


def pipeline_without_weight_sync():
    """A graph written before the weight sync was a node of its own: the rollout node first."""
    nodes = custom_pipeline()[1:]
    nodes[0]["deps"] = []
    return nodes
