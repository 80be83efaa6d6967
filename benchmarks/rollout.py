"""Certifies the speed of dagrl's vLLM rollout against bare `vllm.LLM.generate` on the same engine, or says that
the difference is within noise.

usage (GPU machine, vLLM installed): python3 benchmarks/rollout.py [--size 1.7b] [--prompts 256] [--n 4]
    [--response-length 256] [--force-lengths] [--repeats 5] [--runner v2] [--quantization fp8]
    [--kv-cache-dtype fp8] [--gpu-memory-utilization 0.6] [--paths node,bare] [--json FILE]
    python3 benchmarks/rollout.py --compare bf16,fp8 [the options above]: one engine per arm, one after the other
A random Qwen3-shaped model (config only; vLLM loads dummy weights) keeps the machine offline. Both paths call
generate on the one engine dagrl builds, so every engine setting (dtype, FP8 weights or KV cache, CUDA graphs) is
the same by construction and the comparison isolates what dagrl adds: request building from a left-padded batch
and unpacking into the padded training layout. Both sample with the same per-request seeds (dagrl's), so both
generate the same tokens; --bare-unseeded drops them from the bare path (vLLM's V1 model runner paid a kernel
launch per seeded request and step; V2 draws them batched); --bare-fresh builds the bare path's requests and
SamplingParams anew each call, as the node does (else one list of each serves every call). --force-lengths makes
every response exactly --response-length tokens (ignore_eos), the same token count in every run of either path.

After one warm-up call of each path (CUDA graphs are captured when the engine is built), --repeats pairs of timed
calls run interleaved, the first of each pair alternating (node bare, bare node, ...), each from an empty prefix
cache (a training step's starts so: a weight sync clears it). The verdict: per pair the ratio of the node's
tokens/s to bare's; the median is certified only when those ratios spread (max - min) less than the median lies
from 1.0, else it is "within noise". Every run is printed with what was probed around it (benchmarks/rollout_probe.py:
generated tokens, GPU clock, temperature, power, allocator, host load and speed, garbage collections, prefix-cache
hits, time to first token) and a table of which of them moves with the time. --profile adds one profiled call of each
path after the timed ones and the functions whose own time differs most between them.
Why a verdict: on one H100 (V2 runner, 3 repeats) the node measured 0.925 of unseeded bare and 0.955 of seeded
while each path's repeats spread 8.5-12 s, and dagrl's own work around generate was 0.109 s of 11.99 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_profile  # noqa: E402 - after the sys.path insert above
from benchmarks.rollout_probe import FIELDS, Probe  # noqa: E402
from benchmarks.rollout_profile import function_diff, profile  # noqa: E402
from benchmarks.rollout_stats import (  # noqa: E402
    Run,
    compare_table,
    host_paired_ratios,
    movers,
    order,
    paired_ratios,
    path_summary,
    repeat_table,
    summary_table,
    verdict,
)
from dagrl.data.batch import Batch  # noqa: E402

NODE, BARE = "node", "bare"
# --compare arms: (--quantization, --kv-cache-dtype, --fp8-scales)
ARMS = {
    "bf16": ("none", "auto", "block"),
    "fp8": ("fp8", "auto", "block"),
    "fp8_tensor": ("fp8", "auto", "tensor"),
    "fp8_kv": ("fp8", "fp8", "block"),
    "bf16_fp8kv": ("none", "fp8", "block"),
}


def random_prompts(rows: int, length: int, vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab - 100, (rows, length), generator=g)
    mask = torch.ones_like(ids)
    for row in range(rows):  # uneven prompt lengths, left-padded as the dataset makes them
        cut = int(torch.randint(0, length // 2, (1,), generator=g))
        mask[row, :cut] = 0
    return Batch({"input_ids": ids * mask, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)})


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1.7b")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="timed pairs (each path once a pair)")
    parser.add_argument("--force-lengths", action="store_true", help="ignore_eos: every response is max length")
    parser.add_argument("--bare-unseeded", action="store_true", help="the bare path without per-request seeds")
    parser.add_argument(
        "--bare-fresh",
        action="store_true",
        help="the bare path builds its requests and SamplingParams anew each call, as the node does (an RL loop "
        "must: each step has new seeds); without it, one list of each is reused by every call",
    )
    parser.add_argument("--paths", default="node,bare", help="node, bare or both (the verdict needs both)")
    parser.add_argument("--quantization", choices=("none", "fp8"), default="none")
    parser.add_argument("--kv-cache-dtype", choices=("auto", "fp8"), default="auto")
    parser.add_argument(
        "--fp8-scales", choices=("block", "tensor"), default="block", help="FP8 weights' scales (rollout.fp8_scales)"
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    parser.add_argument("--compare", default=None, help=f"arms to run one after the other: {', '.join(ARMS)}")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, one profiled call of each path: dagrl's own steps, and the functions whose "
        "own time differs most between the paths",
    )
    parser.add_argument(
        "--runner",
        choices=("default", "v1", "v2"),
        default="default",
        help="vLLM's model runner (VLLM_USE_V2_MODEL_RUNNER): v2 draws seeded requests' noise in one "
        "batched kernel, v1 one launch per seeded request and step",
    )
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    if not paths or set(paths) - {NODE, BARE}:
        parser.error(f"--paths {args.paths}: node, bare or node,bare")
    if args.compare and set(args.compare.split(",")) - set(ARMS):
        parser.error(f"--compare {args.compare}: arms among {', '.join(ARMS)}")
    return args


def rollout_settings(
    spec_fields: set[str], quantization: str, kv_cache_dtype: str, scales: str = "block"
) -> tuple[dict, dict]:
    """(VLLMRolloutSpec fields, vLLM engine_kwargs) for the FP8 choices: the spec's own fields where dagrl has
    them (actor_rollout_ref.rollout.quantization / kv_cache_dtype: the engine then quantizes as a training run's
    does), else vLLM's own arguments passed through engine_kwargs (its online FP8 quantization)."""
    wanted = {}
    if quantization != "none":
        wanted["quantization"] = quantization
    if kv_cache_dtype != "auto":
        wanted["kv_cache_dtype"] = kv_cache_dtype
    spec = {k: v for k, v in wanted.items() if k in spec_fields}
    if "quantization" in spec and "fp8_scales" in spec_fields:  # vLLM's online FP8 has no choice of scales
        spec["fp8_scales"] = scales
    return spec, {k: v for k, v in wanted.items() if k not in spec_fields}


def child_argv(argv: list[str], arm: str, json_path: str) -> list[str]:
    """One --compare arm's own command line: the given options less --compare and --json, with the arm's
    engine settings (which win over any given)."""
    drop = ("--compare", "--json", "--quantization", "--kv-cache-dtype", "--fp8-scales")
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in drop:
            skip = True
        elif not word.startswith(tuple(f"{d}=" for d in drop)):
            kept.append(word)
    quantization, kv, scales = ARMS[arm]
    return [*kept, "--quantization", quantization, "--kv-cache-dtype", kv, "--fp8-scales", scales, "--json", json_path]


def compare(args: argparse.Namespace, argv: list[str]) -> None:
    """Each arm in a process of its own (an engine's memory is only given back whole at exit), then one table."""
    results, out = {}, Path(tempfile.mkdtemp(prefix="rollout_compare_"))
    for arm in args.compare.split(","):
        command = [sys.executable, str(Path(__file__).resolve()), *child_argv(argv, arm, str(out / f"{arm}.json"))]
        print(f"$ {shlex.join(command)}", flush=True)
        subprocess.run(command, check=True)
        results[arm] = json.loads((out / f"{arm}.json").read_text())
    path = args.paths.split(",")[0]
    table = compare_table(results, path)
    print(f"\n{results[next(iter(results))]['shape']}\n{table}")
    if args.json:
        Path(args.json).write_text(json.dumps({"arms": results, "table": table}, indent=1))


def engine_line(llm, runner: str) -> str:
    """What the engine runs with, read from vLLM's own config: weight and KV-cache dtypes, quantization, the
    KV cache's token capacity and the model runner."""
    config = llm.llm_engine.vllm_config
    quant = config.model_config.quantization or "none"
    block = getattr(getattr(config, "quant_config", None), "weight_block_size", None)
    cache = config.cache_config
    blocks = getattr(cache, "num_gpu_blocks", None)
    capacity = f", KV cache {blocks * cache.block_size:,} tokens" if blocks else ""
    return (
        f"{config.model_config.dtype}, quantization {quant}{f' blocks {block}' if block else ''}, KV cache dtype "
        f"{cache.cache_dtype}{capacity}, model runner {runner}"
    )


def measure(args: argparse.Namespace) -> dict:
    if args.runner != "default":
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    from vllm import SamplingParams

    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.interface import SamplingSpec
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
    from dagrl.engine.rollout.vllm_io import prompt_token_ids, request_params

    init_distributed()
    model_dir = Path(tempfile.mkdtemp()) / "model"
    script = ROOT / "scripts" / "init_random_model.py"
    command = [sys.executable, str(script), "--family", "qwen3", "--size", args.size, "--out", str(model_dir)]
    subprocess.run([*command, "--config-only"], check=True)
    config = json.loads((model_dir / "config.json").read_text())
    config["architectures"] = ["Qwen3ForCausalLM"]  # vLLM picks its runner from it
    (model_dir / "config.json").write_text(json.dumps(config))
    vocab = config["vocab_size"]
    spec_fields, engine_kwargs = rollout_settings(
        {f.name for f in fields(VLLMRolloutSpec)}, args.quantization, args.kv_cache_dtype, args.fp8_scales
    )
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=str(model_dir),
            gpu_memory_utilization=args.gpu_memory_utilization,
            load_format="dummy",
            max_model_len=args.prompt_length + args.response_length,
            enforce_eager=False,
            engine_kwargs=engine_kwargs,
            **spec_fields,
        ),
        eos_token_ids=[vocab - 1],
        pad_token_id=0,
    )
    rollout.weights_discarded = False  # benchmark on the dummy weights: no sync
    runner = "v2" if rollout.llm.llm_engine.vllm_config.use_v2_model_runner else "v1"
    prompts = random_prompts(args.prompts, args.prompt_length, vocab)
    sampling = SamplingSpec(
        n=args.n, temperature=1.0, response_length=args.response_length, ignore_eos=args.force_lengths
    )

    def bare_inputs() -> tuple[list, list]:  # what dagrl sends for seed 0: the same prompts, sampling and seeds
        requests = [{"prompt_token_ids": ids} for ids in prompt_token_ids(prompts)]
        params = [
            SamplingParams(**{**p.as_kwargs(), **({"seed": None} if args.bare_unseeded else {})})
            for p in request_params(sampling, len(prompts), 0, [vocab - 1], False)
        ]
        return requests, params

    reused = bare_inputs()
    # (seconds, outputs) of the latest vLLM generate inside a node call (the timed loop drops them before each call)
    last: list = [0.0, None]
    vllm_generate = rollout.llm.generate

    def timed_generate(*a, **k):
        start = time.perf_counter()
        outputs = vllm_generate(*a, **k)
        last[:] = time.perf_counter() - start, outputs
        return outputs

    def node():
        rollout.llm.generate = timed_generate  # an instance attribute over the method, for this call only
        try:
            batch = rollout.generate(prompts, sampling, seed=0)
        finally:
            del rollout.llm.generate
        return last[1], batch["responses"]

    def bare():
        requests, params = bare_inputs() if args.bare_fresh else reused
        return rollout.llm.generate(requests, params, use_tqdm=False), None

    paths = {name: fn for name, fn in ((NODE, node), (BARE, bare)) if name in args.paths.split(",")}
    for fn in paths.values():  # warm-up: allocator, the first call's one-off work
        rollout.llm.reset_prefix_cache()
        fn()
    probe, runs, outside, first = Probe(), [], [], None
    same_samples = True  # dagrl's resume guarantee: one seed, the same samples every call
    names = list(paths)
    schedule = order(args.repeats, *names) if len(names) == 2 else [(p, names[0]) for p in range(args.repeats)]
    for pair, name in schedule:
        # no earlier call's outputs alive into the next call, on either path (every gc collection walks them)
        outputs = samples = last[1] = None
        rollout.llm.reset_prefix_cache()
        probe.start()
        torch.cuda.synchronize()
        start = time.perf_counter()
        outputs, samples = paths[name]()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        runs.append(Run(name, pair, seconds, tokens, probe.stop(outputs)))
        if name == NODE:
            outside.append(seconds - last[0])
            first = samples if first is None else first
            same_samples = same_samples and torch.equal(first, samples)
    probe.close()
    if args.profile and NODE in paths:  # dagrl's request building and unpacking, apart from vLLM's generate
        print(cpu_profile(node, "cumulative", r"dagrl/(engine|data)", 12))
    if args.profile and len(paths) == 2:  # where inside generate the node's extra seconds go
        profiled = {}
        for name in (NODE, BARE):
            rollout.llm.reset_prefix_cache()
            profiled[name] = profile(paths[name])
        print(function_diff(profiled[NODE], profiled[BARE], (NODE, BARE)))
    fresh = ", inputs built per call" if args.bare_fresh else ""
    lengths = f"{args.response_length} forced (ignore_eos)" if args.force_lengths else f"<= {args.response_length}"
    shape = (
        f"Qwen3-{args.size} shape, {args.prompts} prompts x n={args.n}, prompt <= {args.prompt_length}, response "
        f"{lengths}, bare {'unseeded' if args.bare_unseeded else 'with the same seeds'}{fresh}, 1 GPU, CUDA graphs"
    )
    result = {
        "shape": shape,
        "engine": engine_line(rollout.llm, runner),
        "paths": {name: path_summary(runs, name) for name in paths},
        "runs": [asdict(r) for r in runs],
        "notes": probe.notes,
    }
    if NODE in paths:
        result["node_same_samples"] = same_samples
        result["node_outside_generate_s"] = outside
    if len(paths) == 2:
        ratios = paired_ratios(runs, NODE, BARE)
        result["ratios"], result["verdict"] = ratios, asdict(verdict(ratios))
        result["host_ratios"] = host_paired_ratios(runs, NODE, BARE)
    report(result, runs)
    return result


def report(result: dict, runs: list[Run]) -> None:
    print(f"\n{result['shape']}\nengine: {result['engine']}")
    print(summary_table(runs))
    if "verdict" in result:
        v = verdict(result["ratios"])
        print("paired ratios (node tokens/s / bare tokens/s): " + ", ".join(f"{r:.3f}" for r in result["ratios"]))
        print(v.line("node", "bare"))
        if result.get("host_ratios"):  # a diagnostic beside the verdict, never in its place
            h = verdict(result["host_ratios"])
            print(
                f"with each call's seconds in units of its host's speed (host ms), as if host-bound: node / bare "
                f"median {h.median:.3f} (min-max {h.low:.3f}-{h.high:.3f}); not a verdict"
            )
    if "node_outside_generate_s" in result:
        outside = statistics.median(result["node_outside_generate_s"])
        print(
            f"dagrl's own work around vLLM's generate in each node call: median {outside:.3f} s; "
            f"the same samples in every node call: {result['node_same_samples']}"
        )
    print("\nevery timed run, in the order they ran:")
    print(repeat_table(runs, FIELDS))
    print("\n" + movers(runs, FIELDS))
    for note in result["notes"]:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.compare:
        compare(args, argv)
        return
    result = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
