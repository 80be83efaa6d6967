"""The optimizer section the actor and the critic share: Adam, its LR schedule and verl's FSDP schedule names."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import ANY_INT, BETAS, LEARNING_RATE, NON_NEGATIVE, POSITIVE, UNIT, Section, hinted, key


@dataclass(frozen=True)
class Optim(Section):
    """An optimizer and its LR schedule (the actor's and the critic's)."""

    lr: float = key(1e-06, "peak learning rate", LEARNING_RATE)
    betas: list = key([0.9, 0.999], "Adam betas", BETAS)
    weight_decay: float = key(0.01, "decoupled weight decay", NON_NEGATIVE)
    lr_warmup_steps: int = key(-1, "warmup optimizer steps; -1 = use lr_warmup_steps_ratio", ANY_INT)
    lr_warmup_steps_ratio: float = key(0.0, "warmup as a fraction of all optimizer steps", UNIT)
    lr_decay_style: str = key(
        "constant", "after warmup: constant | linear | cosine", choices=("constant", "linear", "cosine")
    )
    min_lr: float = key(0.0, "LR at the end of linear/cosine decay", NON_NEGATIVE)
    warmup_style: str | None = key(
        None,
        "verl's FSDP name for the schedule after warmup: constant | cosine; set, it "
        "replaces lr_decay_style (which must be constant or the same)",
    )
    min_lr_ratio: float | None = key(
        None,
        "verl's FSDP name: min_lr as a fraction of lr (min_lr = min_lr_ratio x lr);"
        " set, min_lr must be 0 or that value",
        hinted(UNIT, "min_lr = min_lr_ratio x lr"),
    )
    clip_grad: float | None = key(
        None, "alias of the section's grad_clip (verl's Megatron name); must match it if set", POSITIVE
    )


@dataclass(frozen=True)
class CriticOptim(Optim):
    """The critic's optimizer: a value head learns from scratch, at a higher rate than the policy."""

    lr: float = key(1e-05, "peak learning rate", LEARNING_RATE)
