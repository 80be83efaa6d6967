"""The multi-turn datasets (products and marbles with the calculator, addition with retries, gsm8k with the
calculator), run as users run the scripts, and the scorers their rows are judged by."""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from dagrl.agent.calculator import calculate
from dagrl.agent.interaction import load_interactions
from dagrl.agent.prompting import parse_calls
from dagrl.data.checks import check_data_files
from dagrl.data.dataset import PromptDataset
from dagrl.reward.scorers import default_compute_score
from tests.data.test_preprocess import GSM8K_INSTRUCTION, GSM8K_ROWS, ROOT, read_split, run_script, write_jsonl

PRODUCT = re.compile(r"What is (\d+) \* (\d+)\?")


def write_products(out, *args: str) -> tuple[list[dict], list[dict]]:
    result = run_script("products.py", "--local_dir", str(out), *args)
    assert result.returncode == 0, result.stderr
    return read_split(out, "train"), read_split(out, "test")


def operands(row: dict) -> tuple[int, int]:
    a, b = PRODUCT.fullmatch(row["prompt"][-1]["content"]).groups()
    return int(a), int(b)


def test_products_rows_offer_the_calculator_and_hold_the_product(tmp_path, tokenizer):
    train, test = write_products(tmp_path / "out", "--train_size", "300", "--test_size", "40", "--seed", "3")
    assert len(train) == 300 and len(test) == 40
    for row in train + test:
        a, b = operands(row)
        truth = str(a * b)
        assert 100 <= a <= 999 and 100 <= b <= 999
        assert row["data_source"] == "dagrl/products" and row["reward_model"]["ground_truth"] == truth
        assert [m["role"] for m in row["prompt"]] == ["system", *["user", "assistant", "tool", "assistant"] * 2, "user"]
        info = row["extra_info"]
        assert info["need_tools_kwargs"] is True and info["answer"] == truth
        assert info["tools_kwargs"] == {"calculator": {"create_kwargs": {"ground_truth": truth}}}
    # a * b and b * a are one problem: none is in both splits, none repeats
    pairs = {split: [tuple(sorted(operands(r))) for r in rows] for split, rows in (("train", train), ("test", test))}
    assert len(set(pairs["train"])) == 300 and len(set(pairs["test"])) == 40
    assert not set(pairs["train"]) & set(pairs["test"])
    assert any(a > b for a, b in map(operands, train)) and any(a < b for a, b in map(operands, train))
    # the trainer reads the nested tools_kwargs back as the loop expects it
    files = [str(tmp_path / "out" / "train.parquet"), str(tmp_path / "out" / "test.parquet")]
    assert check_data_files(files, "prompt") == 340
    batch = PromptDataset(files[:1], tokenizer, 4096, "error", False).rows([0, 5])
    assert batch["extra_info"][1]["tools_kwargs"]["calculator"]["create_kwargs"] == {
        "ground_truth": train[5]["reward_model"]["ground_truth"]
    }


def test_products_worked_examples_are_calls_the_loop_parses_with_right_results(tmp_path):
    train, _ = write_products(tmp_path / "out", "--train_size", "4", "--test_size", "2")
    prompt = train[0]["prompt"]
    calls, errors = parse_calls(prompt[0]["content"], max_calls=10)
    assert errors == [] and len(calls) == 1  # the system message shows the format itself
    for turn in (1, 5):  # two worked examples as earlier turns: question, call, result, answer
        (call,), errors = parse_calls(prompt[turn + 1]["content"], max_calls=1)
        a, b = map(int, call.arguments["expression"].split(" * "))
        assert call.name == "calculator" and not errors and prompt[turn]["content"] == f"What is {a} * {b}?"
        assert prompt[turn + 2]["content"] == prompt[turn + 3]["content"] == str(a * b)


def test_products_are_seeded_and_never_ask_an_example_of_the_prompt(tmp_path):
    first, _ = write_products(tmp_path / "a", "--train_size", "50", "--test_size", "10", "--seed", "1")
    again, _ = write_products(tmp_path / "b", "--train_size", "50", "--test_size", "10", "--seed", "1")
    other, _ = write_products(tmp_path / "c", "--train_size", "50", "--test_size", "10", "--seed", "2")
    assert first == again and first != other
    # 2 digits: 90 * 91 / 2 = 4095 unordered pairs, less 12 * 34 from the prompt's examples
    train, test = write_products(tmp_path / "d", "--digits", "2", "--train_size", "4000", "--test_size", "94")
    asked = {tuple(sorted(operands(r))) for r in train + test}
    assert len(asked) == 4094 and (12, 34) not in asked
    result = run_script(
        "products.py", "--local_dir", str(tmp_path / "e"), "--digits", "2", "--train_size", "4001", "--test_size", "94"
    )
    assert result.returncode == 2 and "4094 distinct problems" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "response, score",
    [
        ("<tool_call>...</tool_call> The answer is 281,764.", 1.0),
        ("347 * 812 = 281764", 1.0),
        ("281,765", 0.0),
        ("764", 0.0),  # what the arithmetic scorer would read from "281,764"
        ("no number", 0.0),
    ],
)
def test_products_scorer_reads_thousands_separators(response, score):
    assert default_compute_score("dagrl/products", response, "281764") == score


MARBLES = re.compile(r"A box holds (\d+) marbles\. How many marbles are in (\d+) boxes and (\d+) more boxes\?")


def marbles_numbers(row: dict) -> tuple[int, int, int]:
    a, b, c = MARBLES.fullmatch(row["prompt"][-1]["content"]).groups()
    return int(a), int(b), int(c)


def test_marbles_rows_offer_the_calculator_and_hold_a_times_b_plus_c(tmp_path, tokenizer):
    out = tmp_path / "out"
    result = run_script(
        "marbles.py", "--local_dir", str(out), "--train_size", "300", "--test_size", "40", "--seed", "3"
    )
    assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 300 and len(test) == 40
    for row in train + test:
        a, b, c = marbles_numbers(row)
        truth = str(a * (b + c))
        assert all(100 <= x <= 999 for x in (a, b, c))
        assert row["data_source"] == "dagrl/marbles" and row["reward_model"]["ground_truth"] == truth
        assert [m["role"] for m in row["prompt"]] == ["system", *["user", "assistant", "tool", "assistant"] * 2, "user"]
        info = row["extra_info"]
        assert info["need_tools_kwargs"] is True and info["answer"] == truth
        assert info["tools_kwargs"] == {"calculator": {"create_kwargs": {"ground_truth": truth}}}
    # (a, b, c) and (a, c, b) are one problem: none is in both splits, none repeats
    keys = {
        split: [(a, min(b, c), max(b, c)) for a, b, c in map(marbles_numbers, rows)]
        for split, rows in (("train", train), ("test", test))
    }
    assert len(set(keys["train"])) == 300 and len(set(keys["test"])) == 40
    assert not set(keys["train"]) & set(keys["test"])
    # the worked examples: the products prompt's system message, then calls with parentheses that the loop parses
    # and the calculator answers with the example's result
    prompt = train[0]["prompt"]
    assert (
        prompt[0]["content"]
        == write_products(tmp_path / "products", "--train_size", "2", "--test_size", "1")[0][0]["prompt"][0]["content"]
    )
    for turn in (1, 5):
        (call,), errors = parse_calls(prompt[turn + 1]["content"], max_calls=1)
        a, b, c = marbles_numbers({"prompt": [prompt[turn]]})
        assert not errors and call.arguments == {"expression": f"{a} * ({b} + {c})"}
        assert prompt[turn + 2]["content"] == prompt[turn + 3]["content"] == str(a * (b + c))
        assert calculate(call.arguments["expression"]) == str(a * (b + c))
        assert not (100 <= a <= 999 and 100 <= b <= 999)  # 2- and 4-digit examples: never a question
    files = [str(out / "train.parquet"), str(out / "test.parquet")]
    assert check_data_files(files, "prompt") == 340
    # seeded
    again = tmp_path / "again"
    assert (
        run_script(
            "marbles.py", "--local_dir", str(again), "--train_size", "300", "--test_size", "40", "--seed", "3"
        ).returncode
        == 0
    )
    assert read_split(again, "test") == test


def test_marbles_examples_in_system_and_size_errors(tmp_path):
    out = tmp_path / "out"
    result = run_script(
        "marbles.py", "--local_dir", str(out), "--train_size", "4", "--test_size", "2", "--examples_in", "system"
    )
    assert result.returncode == 0, result.stderr
    (row, *_) = read_split(out, "test")
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "12 * (34 + 5)" in row["prompt"][0]["content"] and "Assistant: 77742" in row["prompt"][0]["content"]
    result = run_script("marbles.py", "--local_dir", str(tmp_path / "bad"), "--train_size", "0")
    assert result.returncode == 2 and "--train_size" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "response, score",
    [
        ("<tool_call>...</tool_call> 1,066,545 marbles", 1.0),
        ("1066545", 1.0),
        ("865 * 673 + 560 = 582705", 0.0),
    ],
)
def test_marbles_scorer_is_the_products_scorer(response, score):
    assert default_compute_score("dagrl/marbles", response, "1066545") == score


def test_addition_retry_rows_name_the_try_again_interaction(tmp_path):
    out = tmp_path / "out"
    result = run_script("addition_retry.py", "--local_dir", str(out), "--max_operand", "9", "--test_size", "20")
    assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 80 and len(test) == 20  # 10 * 10 problems, 20 held out, the rest once
    questions = {
        split: {r["extra_info"]["question"] for r in rows} for split, rows in (("train", train), ("test", test))
    }
    assert len(questions["train"]) == 80 and not questions["train"] & questions["test"]
    interactions = load_interactions(os.path.join(ROOT, "examples", "agentic", "interaction_config.yaml"))
    for row in train + test:
        a, b = map(int, re.fullmatch(r"What is (\d+) \+ (\d+)\?", row["prompt"][1]["content"]).groups())
        assert row["data_source"] == "dagrl/addition_retry" and row["reward_model"]["ground_truth"] == str(a + b)
        assert row["extra_info"]["interaction_kwargs"] == {
            "name": "try_again",
            "query": row["prompt"][1]["content"],
            "ground_truth": str(a + b),
        }
        assert "tools_kwargs" not in row["extra_info"]
    # the row's kwargs drive the shipped interaction, as the turn loop passes them
    row = test[0]
    kwargs = row["extra_info"]["interaction_kwargs"]
    interaction = interactions[kwargs["name"]]
    truth = row["reward_model"]["ground_truth"]

    async def episode():
        instance = await interaction.start_interaction("r0", **kwargs)
        wrong = await interaction.generate_response(instance, [{"role": "assistant", "content": f"{truth}1"}], **kwargs)
        right = await interaction.generate_response(instance, [{"role": "assistant", "content": truth}], **kwargs)
        await interaction.finalize_interaction(instance)
        return wrong[0], right[0]

    assert asyncio.run(episode()) == (False, True)
    assert default_compute_score(row["data_source"], f"Wrong? Then {truth}", truth) == 1.0


def test_gsm8k_tool_is_gsm8ks_row_plus_the_calculator(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    write_jsonl(source / "train.jsonl", GSM8K_ROWS[:4])
    write_jsonl(source / "test.jsonl", GSM8K_ROWS[4:])
    plain, tool = tmp_path / "plain", tmp_path / "tool"
    for script, out in (("gsm8k.py", plain), ("gsm8k_tool.py", tool)):
        result = run_script(script, "--source_dir", str(source), "--local_dir", str(out))
        assert result.returncode == 0, result.stderr
    for split, size in (("train", 4), ("test", 2)):
        for before, row in zip(read_split(plain, split), read_split(tool, split), strict=True):
            system, *rest = row["prompt"]
            assert rest == before["prompt"]  # question + "####" instruction, unchanged
            assert rest[0]["content"].endswith(GSM8K_INSTRUCTION)
            assert system["role"] == "system" and '"name": "calculator"' in system["content"]
            assert "#### <answer>" in system["content"]
            assert row["data_source"] == "openai/gsm8k" and row["reward_model"] == before["reward_model"]
            truth = row["reward_model"]["ground_truth"]
            assert row["extra_info"] == {
                **before["extra_info"],
                "need_tools_kwargs": True,
                "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": truth}}},
            }
    assert read_split(tool, "train")[1]["reward_model"]["ground_truth"] == "1001"


def test_gsm8k_tool_missing_field_is_a_one_line_error(tmp_path):
    source = write_jsonl(tmp_path / "broken.jsonl", [GSM8K_ROWS[0], {"question": "no answer"}])
    result = run_script("gsm8k_tool.py", "--source_dir", source, "--local_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'answer'" in errors[0] and "row 1" in errors[0]


def test_the_shipped_tool_config_offers_the_calculator_with_an_expression_argument():
    import yaml

    with open(os.path.join(ROOT, "examples", "agentic", "tool_config.yaml")) as f:
        tools = yaml.safe_load(f)["tools"]
    assert [t["class_name"] for t in tools] == ["dagrl.agent.calculator.CalculatorTool"]
    function = tools[0]["tool_schema"]["function"]
    assert function["name"] == "calculator"  # the name the rows' tools_kwargs and prompts use
    assert function["parameters"]["required"] == ["expression"]
    assert function["parameters"]["properties"]["expression"]["type"] == "string"
