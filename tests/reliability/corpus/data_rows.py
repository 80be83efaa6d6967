from __future__ import annotations

from tests.reliability.corpus.case import STARTUP, Case
from tests.reliability.corpus.data_makers import (
    _ends_with_the_answer,
    _extra_info_as_json,
    _messages,
    _prompts_json_encoded,
    _rename_ground_truth,
    _roles_renamed,
    _set,
    content_as_bytes,
    rows_changed,
)
from tests.reliability.corpus.texts import LONG_QUESTION

TOPIC = "Rows of a data file: prompts, messages, data_source, ground truth, extra_info"
CASES: tuple[Case, ...] = (
    Case(
        "prompt_role_human",
        "prompts whose messages have role `human` (a ShareGPT name under the role key)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "role 'human'", "human -> user"),
        make=rows_changed(_roles_renamed),
    ),
    Case(
        "prompt_json_encoded",
        "the prompt column holds json.dumps of the chat list (a string)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "JSON string of a chat list", "json.loads"),
        make=rows_changed(_prompts_json_encoded),
    ),
    Case(
        "prompt_list_of_strings",
        "prompts as lists of strings, not messages",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "(str)"),
        make=rows_changed(_messages(lambda m: m["content"])),
    ),
    Case(
        "message_without_content",
        "chat messages with a role and no content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "without role and content"),
        make=rows_changed(_messages(lambda m: {"role": m["role"]})),
    ),
    Case(
        "prompt_content_null",
        "a training row whose message content is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 4", "content is NoneType"),
        make=rows_changed(_set(4, "prompt", [{"role": "user", "content": None}])),
    ),
    Case(
        "content_as_parts",
        "OpenAI content parts ([{type: text, text: ...}]) as message content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "content is list, not a string"),
        make=rows_changed(
            _messages(lambda m: {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]})
        ),
    ),
    Case(
        "content_bytes",
        "message content stored as bytes (not UTF-8 text)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "content is bytes"),
        make=content_as_bytes,
    ),
    Case(
        "content_empty_string",
        "a row whose only message has empty content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 3", "only empty messages"),
        make=rows_changed(_set(3, "prompt", [{"role": "user", "content": ""}])),
    ),
    Case(
        "prompt_only_system",
        "a row whose prompt has only a system message",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 5", "no user message (only system)"),
        make=rows_changed(_set(5, "prompt", [{"role": "system", "content": "You are a helpful assistant."}])),
    ),
    Case(
        "prompt_ends_with_the_answer",
        "SFT conversations as prompts: each ends with the assistant's answer",
        ("data.train_files={ws}/bad.parquet",),
        ("row 0", "ends with an assistant message"),
        make=rows_changed(_ends_with_the_answer),
    ),
    Case(
        "data_source_integer",
        "data_source written as an integer",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' has data_source 7",),
        make=rows_changed(_set(None, "data_source", 7)),
    ),
    Case(
        "reward_model_not_a_struct",
        "a data file whose reward_model column holds plain strings (the answer)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "not a struct", "ground_truth"),
        make=rows_changed(_set(None, "reward_model", "7")),
    ),
    Case(
        "ground_truth_list",
        "reward_model.ground_truth as a list of answers with the built-in scorers (every response would score 0)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "ground_truth of type list<element: string>", "ground_truth[0]"),
        make=rows_changed(
            lambda rows: [
                row.update(reward_model={"style": "rule", "ground_truth": [row["reward_model"]["ground_truth"]]})
                for row in rows
            ]
        ),
    ),
    Case(
        "ground_truth_not_a_number",
        "ground_truth written as a word ('seven') for the arithmetic scorer (every "
        "response scored 0, the run exited 0)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0 has reward_model.ground_truth 'seven'", "needs an integer"),
        make=rows_changed(_set(None, "reward_model.ground_truth", "seven")),
    ),
    Case(
        "data_source_without_scorer",
        "training rows whose data_source (`my_org/arith`) has no built-in scorer, and no custom_reward_function.path",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'my_org/arith'", "custom_reward_function.path", "built-in: "),
        make=rows_changed(_set(None, "data_source", "my_org/arith")),
    ),
    Case(
        "data_source_typo_in_one_row",
        "one training row with data_source `openai/GSM8K` (a typo of a built-in name)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'openai/GSM8K'", "row 17"),
        make=rows_changed(_set(17, "data_source", "openai/GSM8K")),
    ),
    Case(
        "val_data_source_without_scorer",
        "validation rows whose data_source has no built-in scorer",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "'my_org/arith'", "custom_reward_function.path"),
        make=rows_changed(_set(None, "data_source", "my_org/arith"), name="val.parquet"),
    ),
    Case(
        "data_source_null",
        "a training row whose data_source is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "data_source None", "row 0"),
        make=rows_changed(_set(0, "data_source", None)),
    ),
    Case(
        "ground_truth_null",
        "a training row whose reward_model.ground_truth is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "reward_model.ground_truth", "row 3"),
        make=rows_changed(_set(3, "reward_model.ground_truth", None)),
    ),
    Case(
        "ground_truth_renamed",
        "a data file whose reward_model has `answer` instead of `ground_truth`",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "no reward_model.ground_truth", "regenerate"),
        make=rows_changed(_rename_ground_truth),
    ),
    Case(
        "val_ground_truth_null",
        "a validation row whose reward_model.ground_truth is null",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "reward_model.ground_truth", "row 5"),
        make=rows_changed(_set(5, "reward_model.ground_truth", None), name="val.parquet"),
    ),
    Case(
        "prompt_too_long",
        "a prompt longer than data.max_prompt_length=8 with data.truncation=error (found before "
        "the first step, not when its row is drawn)",
        ("data.max_prompt_length=8",),
        ("data.max_prompt_length=8", "row 0", "data.truncation=left|right|middle", "filter_overlong_prompts=True"),
        found=STARTUP,
    ),
    Case(
        "prompt_too_long_in_last_row",
        "only the last training row is longer than data.max_prompt_length "
        "(truncation=error: it would stop the run when drawn, maybe epochs in)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 31", "data.max_prompt_length=32", "filter_overlong_prompts=True"),
        make=rows_changed(_set(31, "prompt", LONG_QUESTION)),
        found=STARTUP,
    ),
    Case(
        "val_prompt_too_long",
        "a validation prompt longer than data.max_prompt_length (truncation=error)",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "row 2", "data.max_prompt_length=32"),
        make=rows_changed(_set(2, "prompt", LONG_QUESTION), name="val.parquet"),
        found=STARTUP,
    ),
    Case(
        "prompt_plain_string",
        "the prompt column holds plain strings, not chat lists",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "plain string", "'content'"),
        make=rows_changed(_set(None, "prompt", "What is 3 + 4?")),
    ),
    Case(
        "prompt_sharegpt",
        "the prompt column holds ShareGPT `{from, value}` messages",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "ShareGPT", "{role, content}"),
        make=rows_changed(_set(None, "prompt", [{"from": "human", "value": "What is 3 + 4?"}])),
    ),
    Case(
        "prompt_empty_list",
        "a validation row whose prompt is an empty list",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "row 1", "empty list", "fix the file"),
        make=rows_changed(_set(1, "prompt", []), name="val.parquet"),
    ),
    Case(
        "every_prompt_filtered",
        "`data.filter_overlong_prompts=true` with a max_prompt_length no prompt fits",
        ("data.filter_overlong_prompts=true", "data.max_prompt_length=4"),
        ("data.max_prompt_length=4", "filter_overlong_prompts=True left none"),
        found=STARTUP,
    ),
    Case(
        "extra_info_max_len_string",
        "extra_info.max_response_length written as a string",
        ("data.train_files={ws}/bad.parquet",),
        ("extra_info.max_response_length of type string", "token count"),
        make=rows_changed(_set(None, "extra_info.max_response_length", "4")),
    ),
    Case(
        "extra_info_json_string",
        "the extra_info column as json.dumps strings",
        ("data.train_files={ws}/bad.parquet",),
        ("extra_info column of strings", "json.loads"),
        make=rows_changed(_extra_info_as_json),
    ),
)
