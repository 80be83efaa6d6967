"""The throughput job's prompts for benchmarks/vs_verl.py: the arithmetic parquet with each prompt's
last user message padded by deterministic filler words, so that the chat-templated prompt is exactly --prompt-length
tokens with --tokenizer. One set of files feeds both sides, so both prefill the same tokens.

    python3 benchmarks/verl_data.py --src /tmp/data/arithmetic --dst /tmp/data/prompt512 --tokenizer /tmp/q17

A prompt is counted as dagrl reads it (dagrl/data/dataset.py: the template rendered with add_generation_prompt=True,
then tokenized without special tokens) and checked against the template's own tokenization (what verl's agent loop
sends); a row where they differ stops the script. Filler words are those of FILLER that are one token each with this
tokenizer: each starts with a space, so byte-level pre-tokenization keeps them apart and k words add exactly k tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

FILLER = (" the", " of", " and", " to", " in", " a", " is", " it", " x", " 0", " 1")


def prompt_ids(tokenizer, chat: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    direct = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
    direct = direct["input_ids"] if hasattr(direct, "keys") else direct  # transformers 5 may return a BatchEncoding
    if list(direct) != list(ids):
        raise SystemExit(
            f"the rendered-then-tokenized prompt ({len(ids)} tokens) differs from the chat template's "
            f"own tokenization ({len(direct)}): the two trainers would not see the same prompt"
        )
    return ids


def padded(tokenizer, chat: list[dict], length: int, words: list[str]) -> list[dict]:
    """`chat` with filler appended to its last user message so that the prompt is `length` tokens."""
    user = max(i for i, message in enumerate(chat) if message["role"] == "user")
    count = 0
    for _ in range(8):  # one step when the words add one token each; a few more if a merge crosses a boundary
        out = [dict(message) for message in chat]
        out[user]["content"] += "".join(words[i % len(words)] for i in range(count))
        have = len(prompt_ids(tokenizer, out))
        if have == length:
            return out
        if count == 0 and have > length:
            raise SystemExit(f"a prompt is already {have} tokens, more than --prompt-length {length}")
        count = max(0, count + length - have)
    raise SystemExit(f"could not pad a prompt to exactly {length} tokens (last try: {have})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="directory with train.parquet (and test.parquet)")
    parser.add_argument("--dst", required=True)
    parser.add_argument("--tokenizer", required=True, help="directory with the tokenizer (the model's)")
    parser.add_argument("--prompt-length", type=int, default=512)
    args = parser.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    words = [w for w in FILLER if len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]
    if not words:
        raise SystemExit(f"none of {FILLER} is a single token with {args.tokenizer}")
    Path(args.dst).mkdir(parents=True, exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        if not (Path(args.src) / name).exists():
            continue
        table = pq.read_table(Path(args.src) / name)
        rows = table.to_pylist()
        for row in rows:
            row["prompt"] = padded(tokenizer, row["prompt"], args.prompt_length, words)
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), Path(args.dst) / name)
        print(f"{len(rows)} prompts of {args.prompt_length} tokens -> {Path(args.dst) / name}")


if __name__ == "__main__":
    main()
