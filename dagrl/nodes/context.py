"""What every node receives: engines, config and the step, plus the node's own config overrides."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagrl.config.tree import Cfg
from dagrl.config.validate import RunShape


@dataclass
class WeightVersions:
    """Counts actor updates and what the rollout last loaded, so weights are synced only when stale."""
    actor: int = 0
    rollout: int = -1


@dataclass
class StepContext:
    cfg: Cfg
    shape: RunShape
    actor: Any                  # ActorEngine
    rollout: Any                # RolloutEngine
    reference: Any | None       # ActorEngine without optimizer; None when no KL term needs it
    reward_fn: Any              # RewardManager
    tokenizer: Any
    kl_ctrl: Any                # KLController for KL-in-reward
    versions: WeightVersions
    rank: int = 0
    step: int = 0
    node_config: dict[str, Any] = field(default_factory=dict)
