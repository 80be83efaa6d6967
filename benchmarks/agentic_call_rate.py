"""Step-0 tool-call rate of a model on the products task (3-digit x 3-digit, the calculator offered), before any
training: what the worked examples in the system prompt buy, against the same prompts without them.

usage: python3 benchmarks/agentic_call_rate.py --model DIR [--prompts 128] [--n 8] [--temperature 1.0]
           [--response-length 128] [--device cpu|cuda] [--seed 0]

Samples `--n` trajectories for each of `--prompts` test problems through the multi-turn loop (dagrl/agent/loop.py)
on the `hf` rollout and prints one table: the share of trajectories with at least one valid call (parsed, a known
tool, answered), calls per trajectory, turns, the final answer's accuracy (the products scorer) and seconds.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "data_preprocess")]


def variant_rows(system_prompt: str, problems: list[tuple[int, int]]) -> list[dict]:
    products = importlib.import_module("products")
    rows = []
    for index, problem in enumerate(problems):
        row = products.make_row(problem, "test", index)
        row["prompt"][0]["content"] = system_prompt
        rows.append(row)
    return rows


def measure(name: str, rows: list[dict], args: argparse.Namespace, tokenizer, engine, loop, tools) -> dict:
    import torch

    from dagrl.data.dataset import PromptDataset
    from dagrl.engine.rollout.interface import SamplingSpec
    from dagrl.reward.manager import RewardManager
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(tempfile.mkdtemp(), "rows.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    schemas = [tool.get_openai_tool_schema() for tool in tools.values()]
    data = PromptDataset([path], tokenizer, max_prompt_length=1024, tools=schemas)
    sampling = SamplingSpec(n=args.n, temperature=args.temperature, response_length=args.response_length)
    start = time.perf_counter()
    totals: dict[str, float] = {}
    scores = []
    for first in range(0, len(rows), 32):
        batch, metrics = loop.generate(engine, data.rows(list(range(first, min(first + 32, len(rows))))), sampling,
                                       seed=args.seed + first, response_length=args.response_length)
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + value * len(batch)
        scored, _ = RewardManager()(batch, tokenizer)
        scores.append(scored.sum(-1))
    seconds = time.perf_counter() - start
    count = len(rows) * args.n
    mean = {key: value / count for key, value in totals.items()}
    return {"variant": name, "trajectories": count, "valid_call": mean["multi_turn/valid_call_ratio"],
            "calls": mean["multi_turn/tool_calls/mean"], "turns": mean["multi_turn/num_turns/mean"],
            "acc": float(torch.cat(scores).mean()), "truncated": mean["multi_turn/truncated_ratio"],
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from dagrl.agent.loop import AgentLoop
    from dagrl.agent.prompting import template_takes_tools
    from dagrl.agent.tools import load_tools
    from dagrl.engine.rollout.hf import HFRollout
    from dagrl.trainer.build import eos_token_ids, pad_token_id

    products = importlib.import_module("products")
    problems = products.split_problems(3, train_size=1, test_size=args.prompts, seed=args.seed)["test"]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tools = load_tools(str(ROOT / "examples" / "agentic" / "tool_config.yaml"))
    cfg = type("C", (), {"actor_rollout_ref": type("A", (), {"model": type("M", (), {"path": args.model})})})
    engine = HFRollout(args.model, eos_token_ids(cfg, tokenizer), pad_token_id(tokenizer), torch.device(args.device),
                       dtype=torch.bfloat16 if args.device == "cuda" else torch.float32)
    options = argparse.Namespace(max_assistant_turns=3, max_user_turns=1, max_parallel_calls=1,
                                 max_tool_response_length=256, tool_response_truncate_side="middle", tool_timeout_s=10)
    loop = AgentLoop(options, tokenizer, tools, {}, template_takes_tools(tokenizer))
    results = [measure("two worked examples", variant_rows(products.SYSTEM_PROMPT, problems), args, tokenizer,
                       engine, loop, tools),
               measure("no examples (baseline)", variant_rows(
                   f"You can use a calculator tool. {products.CALCULATOR_HOWTO} Then answer with only the final "
                   f"number.", problems), args, tokenizer, engine, loop, tools)]
    print(f"\nproducts task, {args.prompts} prompts x {args.n}, T={args.temperature}, {args.device}, "
          f"{os.path.basename(args.model.rstrip('/'))}")
    print(f"{'variant':<26}{'trajectories':>13}{'valid call':>11}{'calls':>7}{'turns':>7}{'acc':>7}"
          f"{'truncated':>10}{'seconds':>9}")
    for r in results:
        print(f"{r['variant']:<26}{r['trajectories']:>13}{r['valid_call']:>11.3f}{r['calls']:>7.2f}{r['turns']:>7.2f}"
              f"{r['acc']:>7.3f}{r['truncated']:>10.3f}{r['seconds']:>9.1f}")


if __name__ == "__main__":
    main()
