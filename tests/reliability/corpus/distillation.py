from __future__ import annotations

from tests.reliability.corpus.case import Case
from tests.reliability.corpus.model_makers import teacher_with_swapped_tokens, teacher_with_vocab

TOPIC = "On-policy distillation (distillation.*, dag=opd)"
CASES: tuple[Case, ...] = (
    Case(
        "distillation_enabled_on_grpo",
        "`distillation.enabled=true` on the GRPO graph (no teacher node)",
        ("distillation.enabled=true", "distillation.teacher_model.model_path={model}"),
        ("distillation.enabled=true but the graph has no teacher node", "run dag=opd"),
    ),
    Case(
        "opd_without_teacher",
        "dag=opd without distillation.teacher_model.model_path",
        ("dag=opd",),
        ("distillation.teacher_model.model_path is not set", "the student's tokenizer"),
    ),
    Case(
        "opd_teacher_other_tokenizer",
        "a teacher whose tokenizer gives tokens other ids than the student's",
        ("dag=opd", "distillation.teacher_model.model_path={ws}/teacher"),
        (
            "the teacher's tokenizer (<tmp>/teacher) differs from the student's",
            "2 tokens have other ids",
            "use a teacher with the student's tokenizer",
        ),
        make=teacher_with_swapped_tokens,
    ),
    Case(
        "opd_teacher_small_vocabulary",
        "a teacher whose embedding has fewer rows than the student's token ids",
        ("dag=opd", "distillation.teacher_model.model_path={ws}/teacher"),
        ("the teacher's vocab_size=100", "has no row for the student's token id"),
        make=teacher_with_vocab(100),
    ),
    Case(
        "opd_supervised_distillation",
        "`distillation.distillation_loss.use_policy_gradient=false` (verl's supervised KL loss)",
        (
            "dag=opd",
            "distillation.teacher_model.model_path={model}",
            "distillation.distillation_loss.use_policy_gradient=false",
        ),
        ("use_policy_gradient=false", "set it true"),
    ),
    Case(
        "distillation_key_without_opd",
        "`distillation.distillation_loss.loss_mode=k3` on the GRPO graph",
        ("distillation.distillation_loss.loss_mode=k3",),
        ("has no effect", "distillation.enabled=false", "dag=opd"),
    ),
)
