"""A multi-turn trajectory (one sample's conversation and its tokens after the prompt, as the turn loop builds it),
its next request, and what a rollout's trajectories become: the trained batch and the multi_turn/* metrics."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import torch

from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Completion, Request, SamplingSpec
from dagrl.engine.rollout.sequences import assemble


@dataclass
class Trajectory:
    """One sample's conversation and its tokens after the prompt."""

    row: int
    sample: int
    seed: int
    prompt_ids: tuple[int, ...]
    messages: list[dict]
    limit: int  # tokens after the prompt, at most (the row's own limit)
    tools_kwargs: dict
    interaction: Any = None
    interaction_kwargs: dict = field(default_factory=dict)
    interaction_id: str = ""
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: sampled by the model
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the weight version of each sampled token, -1 elsewhere
    done: bool = False
    pending: Completion | None = None  # the turn in progress when it was aborted (partial rollout)
    assistant_turns: int = 0
    user_turns: int = 0
    tool_calls: int = 0
    valid_calls: int = 0  # calls that ran and answered (no error, no timeout)
    tool_errors: int = 0
    tool_timeouts: int = 0
    truncated: bool = False
    instances: dict[str, str] = field(default_factory=dict)  # tool name -> this trajectory's instance
    turn_scores: list[float] = field(default_factory=list)
    tool_rewards: dict[str, float] = field(default_factory=dict)
    last_text: str = ""
    last_eos: str = ""  # the text of the token that ended the last turn

    @property
    def finish_reason(self) -> str:
        """As a Completion's: "abort" while the trajectory goes on (partial rollout carries it)."""
        return "stop" if self.done else "abort"

    key: str = ""  # the request ids' prefix (the row's index when empty)

    def request(self, sampling: SamplingSpec) -> Request:
        if self.pending is not None:  # the aborted turn goes on from what it had sampled
            return self.pending.continuation()
        return self.turn_request(sampling)

    def turn_request(self, sampling: SamplingSpec) -> Request:
        """The request of the next turn from its start."""
        turn = self.assistant_turns
        seed = zlib.crc32(f"{self.seed}/{turn}".encode()) & 0x7FFFFFFF
        return Request(
            f"{self.key or self.row}/{self.sample}/{turn}",
            self.prompt_ids + tuple(self.ids),
            sampling.with_limit(self.limit - len(self.ids)),
            seed,
        )


def trajectory_batch(prompts: Batch, trajectories: list[Trajectory], n: int, response_length: int, pad: int) -> Batch:
    """The trained batch of `trajectories` (n per prompt row, rows grouped by prompt): every token after the prompt
    as the response, `response_mask` 1 on sampled tokens only, the conversation in `extra_info`."""
    rows = len(trajectories)
    responses = torch.full((rows, response_length), pad, dtype=torch.long)
    mask = torch.zeros((rows, response_length), dtype=torch.long)
    attention = torch.zeros((rows, response_length), dtype=torch.long)
    log_probs = torch.zeros((rows, response_length), dtype=torch.float32)
    for i, t in enumerate(trajectories):
        length = len(t.ids)
        responses[i, :length] = torch.tensor(t.ids, dtype=torch.long)
        mask[i, :length] = torch.tensor(t.mask, dtype=torch.long)
        attention[i, :length] = 1
        log_probs[i, :length] = torch.tensor(t.log_probs, dtype=torch.float32)
    batch = assemble(prompts.repeat_interleave(n) if n > 1 else prompts, responses, mask, attention)
    batch["rollout_log_probs"] = log_probs * mask
    batch["solution_str"] = [t.last_text for t in trajectories]
    extra = batch.get("extra_info")
    extra = [{}] * rows if extra is None else extra
    batch["extra_info"] = [
        {
            **(extra[i] or {}),
            "messages": t.messages,
            "num_turns": len(t.messages),
            "tool_rewards": t.tool_rewards,
            "turn_scores": t.turn_scores,
            "truncated": t.truncated,
        }
        for i, t in enumerate(trajectories)
    ]
    return batch


def trajectory_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """The multi_turn/* metrics of one rollout's trajectories."""
    count = max(len(trajectories), 1)
    turns = [t.assistant_turns + t.user_turns for t in trajectories] or [0]
    model_tokens = sum(sum(t.mask) for t in trajectories)
    other_tokens = sum(len(t.mask) - sum(t.mask) for t in trajectories)
    scored = [t.turn_scores for t in trajectories if t.interaction is not None]
    # the interaction's score of the first answer (the reward scores the last one)
    interaction = (
        {}
        if not scored
        else {"multi_turn/interaction/first_score": sum(s[0] if s else 0.0 for s in scored) / len(scored)}
    )
    return {
        **interaction,
        "multi_turn/num_turns/mean": sum(turns) / count,
        "multi_turn/num_turns/max": float(max(turns)),
        "multi_turn/assistant_turns/mean": sum(t.assistant_turns for t in trajectories) / count,
        "multi_turn/tool_calls/mean": sum(t.tool_calls for t in trajectories) / count,
        "multi_turn/valid_call_ratio": sum(t.valid_calls > 0 for t in trajectories) / count,
        "multi_turn/tool_errors": float(sum(t.tool_errors for t in trajectories)),
        "multi_turn/tool_timeouts": float(sum(t.tool_timeouts for t in trajectories)),
        "multi_turn/truncated_ratio": sum(t.truncated for t in trajectories) / count,
        "multi_turn/tokens/assistant/mean": model_tokens / count,
        "multi_turn/tokens/observation/mean": other_tokens / count,
    }
