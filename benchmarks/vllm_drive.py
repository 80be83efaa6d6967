"""One vLLM engine driven four ways on one GPU: how much of verl's slower generation is the way it drives vLLM.

usage (GPU machine, vLLM installed): python3 benchmarks/vllm_drive.py --out DIR [--model /tmp/q17-config]
           [--tokenizer /tmp/smol] [--modes inproc,detok,async_mp,async_mp_final] [--prompts 32] [--n 8]
           [--prompt-length 512] [--response-length 1024] [--repeats 3] [--timeout 600] [--report] [--dry-run]

vs_verl.py's throughput job generated the same 256 x 1,024 tokens in 15.5 s under dagrl and 23.8 s under verl, with
the same vLLM 0.26.0 and scheduler settings; the two differ in how they drive the engine. Each mode runs in a process
of its own (one after the other, its own engine) on --model (a Qwen3-1.7B shape with a tokenizer, as vs_verl.py
builds it, or config only with --tokenizer's when absent; vLLM loads dummy weights), CUDA graphs on,
gpu_memory_utilization 0.5, max_num_seqs 1024, max_num_batched_tokens 8192, chunked prefill, prefix caching, sleep
mode, processed log-probs of each sampled token, responses of exactly --response-length (EOS ignored), new random
prompts each repeat:
  inproc          dagrl's way: vllm.LLM in the calling process (VLLM_ENABLE_V1_MULTIPROCESSING=0), no tokenizer
                  (skip_tokenizer_init), detokenize=False, --prompts requests of n=--n in one generate call
  detok           inproc with the tokenizer loaded and detokenize=True
  async_mp        verl's way less Ray and HTTP (verl/workers/rollout/vllm_rollout/vllm_async_server.py): AsyncLLM
                  with its engine core in a process of its own (the mp executor), the tokenizer loaded, detokenizing,
                  --prompts x --n requests of n=1, one asyncio task each iterating its streamed outputs (vLLM's
                  default RequestOutputKind.CUMULATIVE, as verl's `async for output in generator`)
  async_mp_final  async_mp with RequestOutputKind.FINAL_ONLY (one output per request): streaming's share
Median of --repeats after one warm-up; files: DIR/<mode>.json (seconds of each repeat, tokens, start-up seconds) and
DIR/<mode>.log. The table gives each mode's seconds and tokens/s against inproc's. --report prints it from the files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import random_qwen3  # noqa: E402 - after the sys.path insert above

MODES = {
    "inproc": "vllm.LLM in process, no tokenizer, one generate call (dagrl)",
    "detok": "vllm.LLM in process, tokenizer loaded, detokenize=True",
    "async_mp": "AsyncLLM, engine core process, detokenizing, a task per request, streamed (verl)",
    "async_mp_final": "async_mp with FINAL_ONLY outputs",
}


def engine_kwargs(args: argparse.Namespace, mode: str) -> dict:
    return dict(
        model=args.model,
        dtype="bfloat16",
        load_format="dummy",
        seed=0,
        max_model_len=args.prompt_length + args.response_length,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
        gpu_memory_utilization=0.5,
        enforce_eager=False,
        enable_sleep_mode=True,
        logprobs_mode="processed_logprobs",
        disable_log_stats=True,
        skip_tokenizer_init=mode == "inproc",
        **({"distributed_executor_backend": "mp"} if mode.startswith("async") else {}),
    )


def prompts_of(args: argparse.Namespace, repeat: int, vocab: int) -> list[list[int]]:
    """--prompts random prompts of exactly --prompt-length tokens, new for each repeat (no prefix-cache hits across)."""
    import random

    rng = random.Random(repeat)
    return [[rng.randrange(100, vocab - 100) for _ in range(args.prompt_length)] for _ in range(args.prompts)]


def sampling(args: argparse.Namespace, n: int, detokenize: bool, final_only: bool = False):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kind = RequestOutputKind.FINAL_ONLY if final_only else RequestOutputKind.CUMULATIVE
    return SamplingParams(
        n=n,
        temperature=1.0,
        max_tokens=args.response_length,
        ignore_eos=True,
        logprobs=0,
        detokenize=detokenize,
        output_kind=kind,
    )


def child(args: argparse.Namespace, mode: str) -> dict:
    """Runs in the mode's own process: start the engine, one warm-up, --repeats timed rounds."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if mode.startswith("async") else "0"
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    start = time.perf_counter()
    if mode.startswith("async"):
        import asyncio

        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs(args, mode)))
        params = sampling(args, 1, True, final_only=mode == "async_mp_final")

        async def one(request_id: str, ids: list[int]) -> int:
            final = None
            async for output in engine.generate({"prompt_token_ids": ids}, params, request_id):
                final = output
            return len(final.outputs[0].token_ids)

        async def round_(repeat: int) -> int:
            prompts = prompts_of(args, repeat, vocab)
            counts = await asyncio.gather(
                *(one(f"{repeat}-{p}-{k}", ids) for p, ids in enumerate(prompts) for k in range(args.n))
            )
            return sum(counts)

        loop = asyncio.new_event_loop()
        generate = lambda repeat: loop.run_until_complete(round_(repeat))  # noqa: E731 - a short local helper
        close = engine.shutdown
    else:
        from vllm import LLM

        llm = LLM(**engine_kwargs(args, mode), distributed_executor_backend="uni")
        params = sampling(args, args.n, mode == "detok")

        def generate(repeat: int) -> int:
            requests = [{"prompt_token_ids": ids} for ids in prompts_of(args, repeat, vocab)]
            outputs = llm.generate(requests, params, use_tqdm=False)
            return sum(len(c.token_ids) for o in outputs for c in o.outputs)

        close = lambda: None  # noqa: E731 - a short local helper
    startup = time.perf_counter() - start
    generate(-1)  # warm-up: first-call allocations and lazy compiles
    seconds, tokens = [], 0
    for repeat in range(args.repeats):
        begin = time.perf_counter()
        tokens = generate(repeat)
        seconds.append(time.perf_counter() - begin)
    close()
    return {"mode": mode, "seconds": seconds, "tokens": tokens, "startup_s": startup}


def build_model(args: argparse.Namespace, log: Path) -> None:
    """A config-only Qwen3-1.7B shape with --tokenizer's tokenizer and vocabulary at --model (vLLM loads dummy
    weights)."""
    if not (Path(args.tokenizer) / "tokenizer_config.json").exists():
        raise SystemExit(
            f"--model {args.model} has no config.json and --tokenizer {args.tokenizer} no tokenizer to "
            f"build it with: pass a --model with both, or a --tokenizer directory"
        )
    random_qwen3("1.7b", args.model, args.tokenizer, log, "--config-only")


def report(out: Path, modes: list[str]) -> str:
    results = {m: json.loads((out / f"{m}.json").read_text()) for m in modes if (out / f"{m}.json").exists()}
    if not results:
        return f"no results in {out} (expected {', '.join(f'{m}.json' for m in modes)})"
    base = statistics.median(results["inproc"]["seconds"]) if "inproc" in results else None
    lines = [
        "| mode | how vLLM is driven | seconds (median) | range | tokens | tokens/s | inproc / mode speed | "
        "engine start s |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for mode, r in results.items():
        median = statistics.median(r["seconds"])
        ratio = f"{base / median:.3f}" if base else "-"
        lines.append(
            f"| {mode} | {MODES[mode]} | {median:.3f} | {min(r['seconds']):.3f}-{max(r['seconds']):.3f} | "
            f"{r['tokens']} | {r['tokens'] / median:,.0f} | {ratio} | {r['startup_s']:.1f} |"
        )
    missing = [m for m in modes if m not in results]
    if missing:
        lines.append(f"no result for: {', '.join(missing)} (see their .log)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--model",
        default="/tmp/q17-config",
        help="an HF directory with config.json and a tokenizer; built there (config only) when absent",
    )
    parser.add_argument("--tokenizer", default="/tmp/smol", help="the tokenizer a --model built here gets")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a mode's process may run")
    parser.add_argument("--report", action="store_true", help="run nothing: the table of the files in --out")
    parser.add_argument("--dry-run", action="store_true", help="print each mode's command and exit")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        raise SystemExit(
            f"--modes: {', '.join(sorted(set(modes) - set(MODES)))} unknown; choose from {', '.join(MODES)}"
        )
    out = Path(args.out)
    if args.child:
        (out / f"{args.child}.json").write_text(json.dumps(child(args, args.child)))
        return
    if not args.report:
        out.mkdir(parents=True, exist_ok=True)
        if not args.dry_run and not (Path(args.model) / "config.json").exists():
            build_model(args, out / "prep.log")
        passed = [
            f"--{k.replace('_', '-')}={v}"
            for k, v in vars(args).items()
            if k in ("model", "prompts", "n", "prompt_length", "response_length", "repeats")
        ]
        for mode in modes:
            command = [sys.executable, __file__, "--out", str(out), "--child", mode, *passed]
            if args.dry_run:
                print(" ".join(command))
                continue
            (out / f"{mode}.json").unlink(missing_ok=True)
            with open(out / f"{mode}.log", "w") as log:
                try:
                    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"{mode}: past --timeout {args.timeout:g} s", file=sys.stderr)
        if args.dry_run:
            return
    print(
        f"vllm_drive: {args.prompts} prompts x {args.n}, {args.prompt_length} + {args.response_length} tokens, "
        f"median of {args.repeats}; files in {out}"
    )
    print(report(out, modes))


if __name__ == "__main__":
    main()
