"""What scoring in the background (reward_model.launch_reward_fn_async) takes off a step's critical path, on the CPU.

    python3 benchmarks/background_scoring.py [--tokenizer ~/models/SmolLM2-135M-Instruct] [--responses 256]
        [--length 1024] [--logprob-s 1.0] [--launch-share 0.1] [--repeats 5]

The graph is the GRPO graph's middle: rollout (a batch of random response tokens, the throughput job's shape) -> score
(dagrl's reward manager: decode and the arithmetic rule scorer) and a stand-in for the old log-prob pass, which on a GPU
is mostly waiting for kernels: `--logprob-s` seconds of which `--launch-share` is Python holding the GIL (launching
kernels) and the rest a sleep (the GPU's time, the GIL released) -> KL-in-reward, which needs both. In line, the graph
runs score then log-prob; in the background, the score node runs in a thread beside the log-prob pass (the layout
conf/dag/grpo.yaml's `background_scoring` switch declares: the score node behind the reshard, the KL-in-reward node
waiting for it). The table: median seconds of the middle of the step, the scorer's
own seconds, the log-prob stand-in's (slowed by sharing the GIL) and the wait at the join, both ways in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Any

import torch

from dagrl.dag.graph import build_graph, run_graph
from dagrl.data.batch import Batch
from dagrl.nodes.common import score_rows
from dagrl.reward.manager import RewardManager
from dagrl.trainer.timing import Timer


@dataclasses.dataclass
class Ctx:  # what the score node reads of a StepContext
    reward_fn: Any
    tokenizer: Any
    node_config: dict = dataclasses.field(default_factory=dict)


def make_batch(tokenizer, responses: int, length: int) -> Batch:
    ids = torch.randint(0, len(tokenizer), (responses, length), generator=torch.Generator().manual_seed(0))
    return Batch(
        {"responses": ids, "response_mask": torch.ones_like(ids)},
        {
            "uid": [str(row // 8) for row in range(responses)],
            "data_source": ["dagrl/arithmetic"] * responses,
            "reward_model": [{"ground_truth": "42"}] * responses,
            "extra_info": [{}] * responses,
        },
    )


def log_prob_stand_in(seconds: float, launch_share: float):
    """`seconds` in slices of 10 ms: `launch_share` of each spent in Python (holding the GIL), the rest asleep."""

    def node(ctx, batch):
        for _ in range(max(int(seconds / 0.01), 1)):
            busy_until = time.perf_counter() + 0.01 * launch_share
            while time.perf_counter() < busy_until:
                pass
            time.sleep(0.01 * (1 - launch_share))
        batch["old_log_probs"] = torch.zeros(batch["responses"].shape)
        return batch, {}

    return node


def join(ctx, batch):
    assert "token_level_scores" in batch and "old_log_probs" in batch
    return batch, {}


def graph(background: bool, logprob):
    noop = lambda ctx, batch: (batch, {})  # noqa: E731 - a short local helper
    nodes = [
        {"id": "rollout", "role": "rollout", "fn": noop, "deps": []},
        {"id": "score", "role": "reward", "fn": score_rows, "deps": ["rollout"], "background": background},
        {"id": "old_log_prob", "role": "actor", "fn": logprob, "deps": ["rollout"] + ([] if background else ["score"])},
        {"id": "reward", "role": "reward", "fn": join, "deps": ["score", "old_log_prob"]},
        {"id": "advantage", "role": "advantage", "fn": noop, "deps": ["reward"]},
        {"id": "actor_update", "role": "actor", "fn": noop, "deps": ["advantage"]},
    ]
    return build_graph(nodes)


def timed_step(graph_, ctx, batch) -> dict[str, float]:
    timer = Timer()
    start = time.perf_counter()
    run_graph(graph_, ctx, batch, timer)
    whole, seconds = time.perf_counter() - start, timer.seconds
    background = "reward_background" in seconds  # then `reward` is the wait at the join
    return {
        "step": whole,
        "scorer": seconds["reward_background" if background else "reward"],
        "log-prob": seconds["old_log_prob"],
        "waited for scores": seconds["reward"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=os.path.expanduser("~/models/SmolLM2-135M-Instruct"))
    parser.add_argument("--responses", type=int, default=256)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--logprob-s", type=float, default=1.0)
    parser.add_argument("--launch-share", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    ctx = Ctx(RewardManager(), tokenizer)
    logprob = log_prob_stand_in(args.logprob_s, args.launch_share)
    runs = {name: [] for name in ("in line", "background")}
    for _ in range(args.repeats + 1):  # the first of each warms the tokenizer and the scorer's imports
        for name in runs:
            runs[name].append(
                timed_step(
                    graph(name == "background", logprob), ctx, make_batch(tokenizer, args.responses, args.length)
                )
            )
    print(
        f"{args.responses} responses x {args.length} tokens, log-prob stand-in {args.logprob_s} s "
        f"({args.launch_share:.0%} holding the GIL), median of {args.repeats}; seconds"
    )
    print("| scoring | step (score + log-prob) | scorer | log-prob | waited for scores |")
    print("|---|---:|---:|---:|---:|")
    for name, rows in runs.items():
        median = {key: statistics.median(row[key] for row in rows[1:]) for key in rows[0]}
        print(
            f"| {name} | {median['step']:.3f} | {median['scorer']:.3f} | {median['log-prob']:.3f} | "
            f"{median['waited for scores']:.3f} |"
        )
    saved = [a["step"] - b["step"] for a, b in zip(runs["in line"][1:], runs["background"][1:])]
    print(f"background saves {statistics.median(saved):.3f} s a step (median of the pairs)")


if __name__ == "__main__":
    main()
