"""Pre-flight of trainer.*: validation-only runs, the loggers (the backends dagrl knows, that an optional one is
installed and that W&B can log in), the launcher, and where the run directory may be and what in it a run would
cut; what checkpoints there hold is config/preflight/checkpoints.py's."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from dagrl.config.checks import as_list
from dagrl.config.errors import ConfigError, require
from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)
RUN_DIR = "trainer.default_local_dir"


def check_run_length_and_sampling(cfg: Cfg) -> None:
    """The run-length and validation switches between keys (each key's own type and range are the schema's)."""
    trainer = cfg.trainer
    require(
        not trainer.val_only or cfg.data.val_files,
        "trainer.val_only",
        "trainer.val_only=true validates and exits, but data.val_files is null: set data.val_files",
    )
    require(
        not trainer.val_only or cfg.actor_rollout_ref.hybrid_engine,
        "trainer.val_only",
        "trainer.val_only=true is supported on colocated runs only: set actor_rollout_ref.hybrid_engine=true",
    )


RUN_DIR_KEY = "trainer.default_local_dir"
RUN_DIR_DEFAULT = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"


def check_fixed_run_dir(overrides: list[str]) -> None:
    """${now:...} in the run directory (trainer.default_local_dir, or a name it is made of) gives every launch a
    new one: a relaunch after a crash or preemption finds no checkpoint there (auto-resume) and trains from
    scratch. Read from the overrides as written: composing resolves ${now:} into a plain time."""
    given = {arg.lstrip("+").split("=", 1)[0]: arg.split("=", 1)[1] for arg in overrides if "=" in arg}
    run_dir = given.get(RUN_DIR_KEY, RUN_DIR_DEFAULT)
    for key in ("trainer.project_name", "trainer.experiment_name", RUN_DIR_KEY):
        value = given.get(key, "")
        if "${now:" in value and (key == RUN_DIR_KEY or "${" + key + "}" in run_dir):
            raise ConfigError(
                key,
                f"{key}={value} changes at every launch, and with it {RUN_DIR_KEY}: a relaunch after a crash or "
                f"preemption would not find the run's checkpoints and would train from scratch; give {key} a "
                f"fixed value (a time fixed once by the launching script, outside its retry loop)",
            )


def say_steps_beyond_epochs(cfg: Cfg, train_rows: int) -> None:
    """trainer.total_training_steps only caps the run: more steps than trainer.total_epochs of the data holds
    would end the run early without a word."""
    from dagrl.config.derived import total_steps

    limit, epochs = cfg.trainer.total_training_steps, cfg.trainer.total_epochs
    steps = total_steps(cfg, train_rows)
    if not limit or not isinstance(steps, int) or limit <= steps:
        return
    per_epoch = train_rows // cfg.data.train_batch_size
    needed = -(-limit // per_epoch) if per_epoch else None
    logger.warning(
        f"trainer.total_training_steps={limit} is more than trainer.total_epochs={epochs} of the data holds "
        f"({per_epoch} steps an epoch: {train_rows} rows / data.train_batch_size={cfg.data.train_batch_size}): the "
        f"run stops at step {steps}; for {limit} steps set trainer.total_epochs={needed}"
    )


LOGGERS = ("console", "tensorboard", "jsonl", "wandb", "mlflow")
OPTIONAL_LOGGERS = ("wandb", "mlflow")  # optional packages, each with a pip extra of its own name


def check_loggers(cfg: Cfg, check_installed: bool = True) -> None:
    loggers = cfg.trainer.logger
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    for name in loggers:
        # "[console,wandb]" in quotes reaches here as one string, not a list: say so, not just list the valid names
        listed = isinstance(name, str) and name.startswith("[") and name.endswith("]")
        require(
            not listed,
            "trainer.logger",
            f"trainer.logger={name!r} is one string (a list inside quotes), not a list: quote the whole "
            f"override instead, 'trainer.logger={name.replace(' ', '')}'",
        )
        require(name in LOGGERS, "trainer.logger", f"trainer.logger has {name!r}; valid: {', '.join(LOGGERS)}")
        if name in OPTIONAL_LOGGERS and check_installed:
            require(
                importlib.util.find_spec(name) is not None,
                "trainer.logger",
                f"trainer.logger has {name!r} but the {name} package is not installed: "
                f"pip install 'dagrl[{name}]' (or drop {name} from trainer.logger)",
            )
        if name == "wandb" and check_installed:
            require(
                wandb_credentials(),
                "trainer.logger",
                "trainer.logger has 'wandb' but no W&B credentials were found (WANDB_API_KEY, or the ~/.netrc "
                "that `wandb login` writes): wandb.init would fail after the models are built; run `wandb login`, "
                "set WANDB_API_KEY, or WANDB_MODE=offline (or drop wandb from trainer.logger)",
            )


def wandb_credentials() -> bool:
    """What wandb.init reads to log in, from the environment and files alone (wandb is not imported): an API key
    or identity token in the environment, an offline/disabled mode, a .netrc (wandb login), or an api_key in
    wandb's settings file. Any of them present counts: wandb itself judges whether it is valid."""
    env = os.environ
    if (
        env.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun")
        or env.get("WANDB_DISABLED", "").lower() in ("true", "1", "yes")
        or env.get("WANDB_API_KEY")
        or env.get("WANDB_IDENTITY_TOKEN_FILE")
    ):
        return True
    home = os.path.expanduser("~")
    netrc = [env["NETRC"]] if env.get("NETRC") else [os.path.join(home, ".netrc"), os.path.join(home, "_netrc")]
    if any(os.path.isfile(path) for path in netrc):
        return True
    config_dir = env.get("WANDB_CONFIG_DIR") or os.path.join(
        env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "wandb"
    )
    try:
        with open(os.path.join(config_dir, "settings"), encoding="utf-8") as handle:
            return "api_key" in handle.read()
    except OSError:
        return False


def check_launcher(cfg: Cfg) -> None:
    trainer = cfg.trainer
    address = trainer.ray_address
    require(
        address is None or (isinstance(address, str) and address),
        "trainer.ray_address",
        f'trainer.ray_address={address!r} must be null, "auto" or host:port of a Ray head',
    )
    require(
        address is None or trainer.launcher == "ray",
        "trainer.ray_address",
        f"trainer.ray_address is set but trainer.launcher={trainer.launcher}: set trainer.launcher=ray",
    )
    require(
        trainer.max_restarts == 0 or trainer.launcher == "ray",
        "trainer.max_restarts",
        f"trainer.max_restarts={trainer.max_restarts} restarts Ray workers (trainer.launcher=ray); under torchrun "
        f"use torchrun --max-restarts={trainer.max_restarts} and leave trainer.max_restarts=0",
    )
    if trainer.launcher == "ray":
        import importlib.util

        require(
            importlib.util.find_spec("ray") is not None,
            "trainer.launcher",
            "trainer.launcher=ray but Ray is not installed: pip install ray (or use trainer.launcher=local "
            "with torchrun)",
        )
        require(
            "WORLD_SIZE" not in os.environ or os.environ.get("DAGRL_LAUNCHER") == "ray",
            "trainer.launcher",
            "trainer.launcher=ray starts its own workers: run python3 -m dagrl.main_dag once, not under torchrun",
        )


def check_run_dir_location(cfg: Cfg) -> None:
    """trainer.default_local_dir is a directory of the run's own: not the file-system root (what `$CKPT_ROOT/`
    becomes with the variable unset), the home directory, a model directory (or one inside it) or the directory
    of the data files, where the run's checkpoints, metrics.jsonl, prompt_ledger.jsonl and data_cache/ would be
    mixed into files that are not its own."""
    configured = cfg.trainer.default_local_dir
    if not isinstance(configured, str) or not configured.strip():
        return  # checkpoints.check_checkpoint_dir says what it must be
    root = os.path.realpath(os.path.expanduser(configured))
    shown = configured if configured.rstrip("/") == root.rstrip("/") else f"{configured} ({root})"
    fix = f"set {RUN_DIR}=<a directory of the run's own>"
    if root == os.path.dirname(root):
        what, fix = "the file-system root (an unset variable in $VAR/...?)", f"set the variable, or {fix}"
    elif root == os.path.realpath(os.path.expanduser("~")):
        what, fix = "the home directory", f"{fix}, e.g. {RUN_DIR}=~/checkpoints/<experiment>"
    else:
        what = None
        for key, value in (
            ("actor_rollout_ref.model.path", cfg.actor_rollout_ref.model.path),
            ("critic.model.path", cfg.critic.model.path),
        ):
            model = os.path.realpath(os.path.expanduser(value)) if isinstance(value, str) and value else None
            if model and os.path.isdir(model) and (root == model or root.startswith(model + os.sep)):
                what = f"{'inside ' if root != model else ''}the model directory {key}={value}"
                break
        for key in ("data.train_files", "data.val_files"):
            files = getattr(cfg.data, key.split(".")[1])
            for name in [files] if isinstance(files, str) else list(files or []):
                if what is None and isinstance(name, str) and name:
                    if root == os.path.dirname(os.path.realpath(os.path.expanduser(name))):
                        what = f"the directory of {key} ({name})"
        if what is None:
            return
    raise ConfigError(
        RUN_DIR,
        f"{RUN_DIR}={shown} is {what}: the run would write its checkpoints, metrics.jsonl, prompt_ledger.jsonl "
        f"and data_cache/ among files that are not its own; {fix}",
    )


def check_earlier_rows(cfg: Cfg) -> None:
    """metrics.jsonl and prompt_ledger.jsonl rows in the run directory that no checkpoint here accounts for (an
    earlier run with trainer.save_freq=-1, one resumed elsewhere, another tool's files): a fresh start would cut
    them, so it is refused. Rows of a run that was killed (its lock record left behind, dagrl/trainer/run_dir.py)
    are dagrl's own: its steps run again and their rows are replaced."""
    trainer = cfg.trainer
    if trainer.val_only:  # validation appends its rows, cutting none
        return
    from dagrl.trainer.checkpoint import complete_checkpoints
    from dagrl.trainer.ledger import LEDGER_FILE
    from dagrl.trainer.run_dir import METRICS_FILE, absolute, owner

    root = Path(absolute(trainer.default_local_dir))
    if trainer.resume_mode == "auto" and complete_checkpoints(root):
        return
    given = trainer.resume_from_path
    if trainer.resume_mode == "resume_path" and given and Path(absolute(str(given))).parent == root:
        return
    if owner(root) is not None:  # a killed run's (a live one's lock refuses this launch when it is taken)
        return
    names = [LEDGER_FILE, *([METRICS_FILE] if "jsonl" in as_list(trainer.logger) else [])]
    found = [f"{name} ({_lines(root / name)} rows)" for name in sorted(names) if _lines(root / name)]
    require(
        not found,
        RUN_DIR,
        f"{RUN_DIR}={root} holds {' and '.join(found)} but no checkpoint this run resumes from (an earlier run "
        f"with trainer.save_freq=-1, or another tool's files): a fresh start would cut them and dagrl never "
        f"rewrites rows it cannot account for; move them away or choose another {RUN_DIR}",
    )


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as rows:
            return sum(1 for line in rows if line.strip())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return 0
