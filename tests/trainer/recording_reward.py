"""A custom reward that scores like reward_by_length.py and, at its first call, writes to $DAGRL_TEST_RECORD what
the run's process holds: the determinism environment, torch's flag, and the TransformerConfig fields of every model
built (found among the live objects: the engine keeps no other handle a reward could reach)."""

import gc
import json
import os

import torch

from dagrl.config.launch_env import DETERMINISTIC_ENV
from dagrl.config.megatron_fields import DETERMINISTIC

_recorded = False


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global _recorded
    if not _recorded:
        _recorded = True
        configs = [item for item in gc.get_objects() if type(item).__name__ == "TransformerConfig"]
        record = {
            "env": {name: os.environ.get(name) for name in DETERMINISTIC_ENV},
            "torch": torch.are_deterministic_algorithms_enabled(),
            "configs": [{name: getattr(config, name) for name in DETERMINISTIC} for config in configs],
        }
        with open(os.environ["DAGRL_TEST_RECORD"], "w") as out:
            json.dump(record, out)
    return (len(solution_str) % 7) / 6.0
