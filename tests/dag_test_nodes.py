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
        {"id": "rollout", "role": "rollout", "fn": "tests.dag_test_nodes:noop", "deps": []},
        {"id": "advantage", "role": "advantage", "fn": "tests.dag_test_nodes:noop", "deps": ["rollout"]},
        {"id": "update", "role": "actor", "fn": "tests.dag_test_nodes:noop", "deps": ["advantage"]},
    ]
