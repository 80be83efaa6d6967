"""Tokens/s of dagrl's vLLM rollout vs bare `vllm.LLM.generate` on the same engine, prompts and sampling.

usage (GPU machine, vLLM installed): torchrun --nproc-per-node 1 benchmarks/rollout.py [--size 1.7b] [--prompts 256]
A random Qwen3-shaped model (config only; vLLM loads dummy weights) keeps the machine offline. Both paths use the
one engine dagrl builds, so the comparison isolates what dagrl adds: request building from a left-padded batch,
per-request seeds, and unpacking into the padded training layout. The baseline is vLLM without per-request seeds;
bare with them measures the seeds' cost alone (vLLM draws a seeded request's noise with its own kernel launch per
decode step; on one H200, 1.7B shape: 0.949 of unseeded, dagrl 0.924). Reseeding the process generator once per
call instead was measured too and dropped: vLLM did not sample a call alike twice that way. Median of --repeats
interleaved runs (each from an empty prefix cache) after a warm-up; prints a table, whether each dagrl path sampled
the same tokens in every repeat, and how dagrl's call splits between vLLM's generate and dagrl's own work around it.
With vLLM's model runner V2 (0.26's default) per-request seeds cost nothing (one H200: 1.002 of unseeded) and
dagrl was 0.953.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_profile
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import SamplingSpec


def random_prompts(rows: int, length: int, vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab - 100, (rows, length), generator=g)
    mask = torch.ones_like(ids)
    for row in range(rows):  # uneven prompt lengths, left-padded as the dataset makes them
        cut = int(torch.randint(0, length // 2, (1,), generator=g))
        mask[row, :cut] = 0
    return Batch({"input_ids": ids * mask, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)})


BARE = "bare vllm.LLM.generate, no seeds"


def timed(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1.7b")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also print the CPU time of dagrl's own steps")
    parser.add_argument(
        "--runner",
        choices=("default", "v1", "v2"),
        default="default",
        help="vLLM's model runner (VLLM_USE_V2_MODEL_RUNNER): v2 draws seeded requests' noise in one "
        "batched kernel, v1 one launch per seeded request and step",
    )
    args = parser.parse_args()
    if args.runner != "default":
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"

    from vllm import SamplingParams

    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
    from dagrl.engine.rollout.vllm_io import prompt_token_ids, request_params

    init_distributed()
    model_dir = Path(tempfile.mkdtemp()) / "model"
    subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "scripts" / "init_random_model.py"),
            "--family",
            "qwen3",
            "--size",
            args.size,
            "--out",
            str(model_dir),
            "--config-only",
        ],
        check=True,
    )
    import json

    config = json.loads((model_dir / "config.json").read_text())
    config["architectures"] = ["Qwen3ForCausalLM"]  # vLLM picks its runner from it
    (model_dir / "config.json").write_text(json.dumps(config))
    vocab = config["vocab_size"]
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=str(model_dir),
            gpu_memory_utilization=0.6,
            load_format="dummy",
            max_model_len=args.prompt_length + args.response_length,
            enforce_eager=False,
        ),
        eos_token_ids=[vocab - 1],
        pad_token_id=0,
    )
    rollout.weights_discarded = False  # benchmark on the dummy weights: no sync
    runner = "v2" if rollout.llm.llm_engine.vllm_config.use_v2_model_runner else "v1"
    prompts = random_prompts(args.prompts, args.prompt_length, vocab)
    sampling = SamplingSpec(n=args.n, temperature=1.0, response_length=args.response_length)
    requests = [{"prompt_token_ids": ids} for ids in prompt_token_ids(prompts)]
    seeded = [SamplingParams(**p.as_kwargs()) for p in request_params(sampling, len(prompts), 0, [vocab - 1], False)]
    unseeded = [
        SamplingParams(**{**p.as_kwargs(), "seed": None})
        for p in request_params(sampling, len(prompts), 0, [vocab - 1], False)
    ]

    def bare(params, prompts_in=None):
        outputs = rollout.llm.generate(prompts_in or requests, params, use_tqdm=False)
        return torch.tensor([len(c.token_ids) for o in outputs for c in o.outputs]), outputs

    def bare_built_per_call():  # requests and parameters built anew as dagrl does each call: vLLM's own share
        return bare(
            [SamplingParams(**p.as_kwargs()) for p in request_params(sampling, len(prompts), 0, [vocab - 1], False)],
            [{"prompt_token_ids": ids} for ids in prompt_token_ids(prompts)],
        )

    inner: list[float] = []  # vLLM's own generate inside each dagrl call: the rest is dagrl's building and unpacking
    vllm_generate = rollout.llm.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return vllm_generate(*args, **kwargs)
        finally:
            inner.append(time.perf_counter() - start)

    def dagrl():
        rollout.llm.generate = timed_generate  # an instance attribute over the method, for this call only
        try:
            batch = rollout.generate(prompts, sampling, seed=0)
        finally:
            del rollout.llm.generate
        return batch["response_mask"].sum(1), batch["responses"]

    paths = {  # every call starts from an empty prefix cache, as a training step's does (a weight sync clears it)
        BARE: lambda: bare(unseeded),
        "bare vllm.LLM.generate, per-request seeds": lambda: bare(seeded),
        "bare, seeds, requests built per call": bare_built_per_call,
        "dagrl VLLMRollout.generate (per-request seeds)": dagrl,
    }
    for fn in paths.values():  # warm-up (CUDA graphs, allocator)
        rollout.llm.reset_prefix_cache()
        fn()
    times: dict[str, list[float]] = {name: [] for name in paths}
    outside: list[float] = []  # per timed dagrl call: its seconds minus vLLM's generate inside it
    tokens: dict[str, int] = {}
    repeated: dict[str, bool] = {}  # the same samples in every repeat (dagrl's resume guarantee)
    first: dict[str, torch.Tensor] = {}
    names = list(paths)
    for repeat in range(args.repeats):  # interleaved, each repeat in a rotated order: drift hits every path alike
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            rollout.llm.reset_prefix_cache()
            seconds, (lengths, samples) = timed(paths[name])
            times[name].append(seconds)
            tokens[name] = int(lengths.sum())
            if name.startswith("dagrl"):
                outside.append(seconds - inner[-1])
                first.setdefault(name, samples)
                repeated[name] = repeated.get(name, True) and torch.equal(first[name], samples)
    if args.profile:  # dagrl's request building and unpacking, apart from vLLM's generate
        print(cpu_profile(dagrl, "cumulative", r"dagrl/(engine|data)", 12))
    rows = {
        name: (statistics.median(values), tokens[name], tokens[name] / statistics.median(values))
        for name, values in times.items()
    }
    base = rows[BARE][2]
    print(
        f"\nQwen3-{args.size} shape, {args.prompts} prompts x n={args.n}, prompt <= {args.prompt_length}, "
        f"response {args.response_length}, 1 GPU, bf16, CUDA graphs, vLLM model runner {runner}; median of "
        f"{args.repeats} rotated repeats"
    )
    print("| path | median s | min s | max s | generated tokens | tokens/s | vs bare | same samples every repeat |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (seconds, count, rate) in rows.items():
        print(
            f"| {name} | {seconds:.2f} | {min(times[name]):.2f} | {max(times[name]):.2f} | {count} | {rate:,.0f} | "
            f"{rate / base:.3f} | {repeated.get(name, '-')} |"
        )
    seeded = statistics.median(times["bare vllm.LLM.generate, per-request seeds"])
    within = statistics.median(inner[1 : 1 + args.repeats])  # inner[0] is the warm-up's
    print(
        f"dagrl's call split: vLLM's generate inside it {within:.2f} s (bare with seeds {seeded:.2f} s), dagrl's "
        f"request building and unpacking around it {statistics.median(outside):.3f} s (medians)"
    )


if __name__ == "__main__":
    main()
