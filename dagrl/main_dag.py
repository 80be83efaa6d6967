"""`python3 -m dagrl.main_dag key=value ...`: compose conf/, check it, train.

A bad override fails before Hydra composes (an unknown key naming the closest valid one, see config/load.py); with
plain key=value arguments that early composition is the job's config (Hydra's main, which would compose it again,
runs only for its flags and hydra.* overrides: 0.2 s of every launch). Every other configuration problem is found
by the pre-flight checks before any model is built (one line per independent problem). Both exit with code 2.
Ctrl-C exits with code 130 and one line, after a checkpoint where a step was under way (utils/preemption.py);
SIGTERM/SIGUSR1 from the first line on: during start-up one line and exit 0, later a checkpoint and exit 0. The
process itself (logging, pre-flight, training) is dagrl/launch/process.py, which the Ray workers run too.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys

from dagrl.utils.preemption import (  # the standard library only
    INTERRUPTED,
    START_SIGNALS,
    StopBeforeStart,
    install_start_handlers,
)

NOT_STARTED = "Ctrl-C before the run started: stopped, nothing to save"


def _not_started(signum: int, frame) -> None:
    if signum == signal.SIGINT:
        os.write(2, f"dagrl: {NOT_STARTED}\n".encode())
        os._exit(INTERRUPTED)
    if os.environ.get("RANK", "0") == "0":  # nothing is written during the imports: exit without unwinding
        os.write(2, f"dagrl: {StopBeforeStart(signal.Signals(signum).name).line()}\n".encode())
    os._exit(0)


# A stop during the imports below (half a second): one line, no traceback; main() goes on with KeyboardInterrupt
# and StopBeforeStart. A signal this process was started ignoring stays so (Ctrl-C in a script's background job).
if __name__ == "__main__":
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _not_started)
    for _sig in START_SIGNALS:
        if signal.getsignal(_sig) is not signal.SIG_IGN:
            signal.signal(_sig, _not_started)

import hydra  # noqa: E402 - after the Ctrl-C handler above
from omegaconf import DictConfig  # noqa: E402 - after the Ctrl-C handler above

from dagrl.config.errors import ConfigError  # noqa: E402 - after the Ctrl-C handler above
from dagrl.config.conf_dir import CONF_DIR, CONFIG_NAME  # noqa: E402 - after the Ctrl-C handler above
from dagrl.config.load import compose, to_plain  # noqa: E402 - after the Ctrl-C handler above
from dagrl.launch.process import setup_logging, train_process  # noqa: E402 - after the Ctrl-C handler above


def fail(message: str, code: int) -> None:
    """One line on stderr (one per problem when pre-flight found several), no traceback; exit 2 for bad input, 1
    for a stopped or failed run."""
    for line in message.splitlines() or [message]:
        print(f"dagrl: error: {line}", file=sys.stderr)
    sys.exit(code)


def run(cfg_data: dict) -> None:
    """The CLI's job: train here, or (trainer.launcher=ray) validate here and train on Ray workers."""
    if os.environ.get("DAGRL_CHECK_ONLY") == "1":  # a launch script's check before torchrun starts N processes
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import preflight

        try:  # each problem once, exit 2, rather than N ranks' copies and torchrun's traceback with exit 1
            preflight(Cfg(cfg_data))
        except ConfigError as error:
            fail(str(error), 2)
        return
    if cfg_data["trainer"]["launcher"] == "ray" and os.environ.get("DAGRL_LAUNCHER") != "ray":
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import placement, planned_world_size, preflight

        cfg = Cfg(cfg_data)
        from dagrl.launch.ray_cluster import Interrupted, WorkerFailed, check_ray_address, launch
        from dagrl.trainer.run_dir import check_free, resolve

        try:  # every input check before a single worker starts
            preflight(cfg, world_size=planned_world_size(cfg))
            resolve(cfg_data)  # the run directory as the driver's current directory names it, for every worker
            check_free(cfg.trainer.default_local_dir)  # in use: said here (the workers' rank 0 takes the lock)
            # a bounded wait, not ray.init's minutes of retries; nodes as launch() counts them (a pool's machines)
            nodes = max(pool.size // pool.per_node for pool in placement(cfg).pools)
            check_ray_address(cfg.trainer.ray_address, nnodes=nodes)
        except ConfigError as error:
            fail(str(error), 2)
        from dagrl.launch.driver_signals import Stopped
        from dagrl.utils.preemption import resume_advice

        try:  # SIGTERM/SIGUSR1 are the launcher's from here (passed on to the workers once they train)
            launch(cfg_data)
        except Stopped as stop:  # the workers stopped on the scheduler's signal the driver passed on: exit 0
            print(f"dagrl: {stop.line(resume_advice(cfg.trainer, 'intact'))}", file=sys.stderr)
        except WorkerFailed as error:
            fail(str(error), error.exit_code)
        except Interrupted as stop:  # the workers stopped on the Ctrl-C the driver passed on
            interrupted(
                str(stop)
                or f"Ctrl-C with no step under way: the Ray workers stopped at once, nothing "
                f"unsaved; {resume_advice(cfg.trainer, 'intact')}"
            )
        except KeyboardInterrupt:  # a second Ctrl-C, or one before the workers trained: launch() killed them
            interrupted(
                f"Ctrl-C: the Ray workers were stopped at once without a checkpoint; "
                f"{resume_advice(cfg.trainer, 'intact')}"
            )
        return
    code, message = train_process(cfg_data)
    if code == INTERRUPTED:
        interrupted(message)
    if code:
        fail(message, code)


def interrupted(message: str) -> None:
    """Ctrl-C: the line saying where the run stopped and how it resumes (from one process only), exit 130."""
    if message:
        print(f"dagrl: {message}", file=sys.stderr)
    sys.exit(INTERRUPTED)


@hydra.main(config_path=str(CONF_DIR), config_name=CONFIG_NAME, version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    run(to_plain(cfg))


# Hydra's flags that take the next argument as their value (--cfg job); every other argument is an override.
VALUE_FLAGS = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
}
# Left to Hydra: help and info compose nothing, and a multirun expands its sweeps itself.
HYDRA_ONLY_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--version", "--multirun", "-m"}


# Hydra's flags that take no value; together with VALUE_FLAGS, the only arguments that may start with '-'.
PLAIN_FLAGS = {"--resolve", "--run", "-r", "--shell-completion", "-sc"}
CONFIG_NAME_FLAGS = {"--config-name", "-cn"}
CONFIG_PATH_FLAGS = {"--config-path", "-cp"}
CONFIG_DIR_FLAGS = {"--config-dir", "-cd"}
# torchrun's own options: written after `-m dagrl.main_dag` they reach dagrl instead of torchrun
TORCHRUN_FLAGS = {
    f"--{name}"
    for base in (
        "nproc_per_node",
        "node_rank",
        "master_addr",
        "master_port",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "rdzv_conf",
        "max_restarts",
        "nnodes",
        "standalone",
        "monitor_interval",
    )
    for name in (base, base.replace("_", "-"))
}


def check_flags(argv: list[str]) -> None:
    """Arguments with a leading '-' that Hydra would answer with its usage text or a multi-line error: an override
    written as an option (--data.train_batch_size=8), and verl's --config-name/--config-path (dagrl has one
    primary config, conf/dagrl.yaml)."""
    from dagrl.config.conf_dir import CONFIG_NAME

    for index, arg in enumerate(argv):
        name, has_value, value = arg.partition("=")
        follows_flag = index > 0 and argv[index - 1] in VALUE_FLAGS  # --cfg job: the flag's value
        if name in TORCHRUN_FLAGS and not follows_flag:
            raise ConfigError(
                name,
                f"'{arg}' is torchrun's option, written after the module, so torchrun passed it "
                f"on to dagrl: put it before the module: torchrun {arg} -m dagrl.main_dag "
                f"key=value ...",
            )
        if arg.startswith("-") and name not in VALUE_FLAGS | PLAIN_FLAGS | HYDRA_ONLY_FLAGS and not follows_flag:
            bare = arg.lstrip("-")
            fix = f"write {bare}" if "=" in bare else f"write {bare}=<value>" if bare else "drop it"
            raise ConfigError(
                name,
                f"'{arg}' is not an option of python3 -m dagrl.main_dag: config keys are set as "
                f"key=value without dashes; {fix}",
            )
        if not has_value and name in VALUE_FLAGS:
            value = argv[index + 1] if index + 1 < len(argv) else ""
        if name in CONFIG_NAME_FLAGS and value.removesuffix(".yaml") != CONFIG_NAME:
            raise ConfigError(
                name,
                f"{name}={value}: dagrl has one primary config, conf/{CONFIG_NAME}.yaml "
                f"(verl's ppo_trainer/ppo_megatron_trainer keys are its sections); drop {name} and "
                f"set keys as overrides (dag=ppo for the PPO graph)",
            )
        if name in CONFIG_DIR_FLAGS and not os.path.isdir(os.path.expanduser(value)):
            what = "a file" if os.path.isfile(os.path.expanduser(value)) else "no directory"
            raise ConfigError(
                name,
                f"{name}={value} is {what}: --config-dir takes a directory of config group "
                f"options (e.g. one holding dag/my_graph.yaml, chosen with dag=my_graph); a config "
                f"file's keys are set as key=value overrides",
            )
        if name in CONFIG_PATH_FLAGS:
            raise ConfigError(
                name,
                f"{name}={value}: dagrl composes its own conf/ directory; drop {name} and set "
                f"keys as key=value overrides (--config-dir adds a directory of group options)",
            )


def early_override_check(argv: list[str]) -> dict | None:
    """Compose the config as Hydra will, so that a bad override fails in one line (ConfigError) instead of in
    Hydra's multi-line message or traceback: an unknown key names the closest valid one. Returns the composed
    config when it is the whole job's: every argument an override or a --config-dir (which compose searches as
    Hydra does, wherever it stands: Hydra's own parser refuses overrides after it), none of Hydra's (hydra.*);
    else None."""
    check_flags(argv)
    overrides, config_dirs, flag_value, dir_args = [], [], False, 0
    for index, arg in enumerate(argv):
        if not flag_value and not arg.startswith("-"):
            overrides.append(arg)
        name, has_value, value = arg.partition("=")
        if name in CONFIG_DIR_FLAGS:  # Hydra searches it for group options: so does the check
            config_dirs.append(value if has_value else argv[index + 1] if index + 1 < len(argv) else "")
            dir_args += 1 if has_value else 2
        flag_value = arg in VALUE_FLAGS
    if {"-m", "--multirun"} & set(argv):  # Hydra runs the sweep's jobs in turn: each needs its own run directory
        from dagrl.trainer.run_dir import check_multirun, conf_default

        check_multirun(overrides, conf_default())
    if overrides and not HYDRA_ONLY_FLAGS & {arg.split("=", 1)[0] for arg in argv}:
        cfg_data = compose(overrides, config_dirs)
        whole_job = len(overrides) + dir_args == len(argv)
        if whole_job and not any(arg.lstrip("+~").startswith("hydra") for arg in overrides):
            return cfg_data
    return None


def main() -> None:
    # Run last of the exit handlers registered from here on (trackers, loggers, files close in theirs): the
    # interpreter's teardown then leaves the half-million objects torch, megatron-core and transformers made to the OS,
    # as it leaves their memory, instead of walking them in garbage collections: a second of CPU per process. Nothing
    # written waits for those collections: dagrl's metric sinks flush every step and close in the train loop's
    # `finally`, checkpoints are saved synchronously, and logging's own handler (registered before) flushes directly.
    atexit.register(gc.freeze)
    if signal.getsignal(signal.SIGINT) is _not_started:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    install_start_handlers()  # until the trainer's StopRequest takes SIGTERM/SIGUSR1 over
    try:
        try:
            setup_logging()
            cfg_data = early_override_check(sys.argv[1:])
        except ConfigError as error:
            fail(str(error), 2)
        if cfg_data is None:  # flags (--cfg job, --config-dir, ...) or hydra.* overrides: Hydra's own main
            hydra_main()
        else:  # composed already, as Hydra's main would (conf/dagrl.yaml: no run dir, no chdir, no Hydra logging)
            run(cfg_data)
    except KeyboardInterrupt:  # before train_process took Ctrl-C over (composing, pre-flight of a Ray launch)
        interrupted(NOT_STARTED)
    except StopBeforeStart as stop:  # a scheduler's SIGTERM/SIGUSR1 before the trainer's handler: nothing to save
        if os.environ.get("RANK", "0") == "0":
            print(f"dagrl: {stop.line()}", file=sys.stderr)
        sys.exit(0)


if __name__ == "__main__":
    main()
