"""The tool-free multi-turn control: arithmetic.py's addition problems, answered in turns with feedback. The
try_again interaction (examples/agentic/interaction_config.yaml, dagrl.agent.interaction.TryAgainInteraction)
replies "Wrong, try again." until the last number of the answer is the sum; the reward is the last number of the
whole response (dagrl.reward.scorers.arithmetic).

    python3 examples/data_preprocess/addition_retry.py --local_dir ~/data/addition_retry
The test problems are disjoint from the train problems.
"""

from __future__ import annotations

import arithmetic
from common import schema_row

DATA_SOURCE = "dagrl/addition_retry"
INTERACTION_NAME = "try_again"
SYSTEM_PROMPT = "Answer with only the final number. If you are told the answer is wrong, answer again."


def make_row(problem: tuple[int, int], split: str, index: int) -> dict:
    a, b = problem
    question = f"What is {a} + {b}?"
    answer = str(a + b)
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    row = schema_row(DATA_SOURCE, prompt, "arithmetic", answer, split, index, answer, question)
    # verl's shape: `name` picks the interaction, the rest go to its start_interaction
    row["extra_info"]["interaction_kwargs"] = {"name": INTERACTION_NAME, "query": question, "ground_truth": answer}
    return row


if __name__ == "__main__":
    arithmetic.main(make_row, "~/data/addition_retry", __doc__)
