"""Train a ViT with a pluggable positional scheme:  python -m vitpos pos=2d_sin [key=value ...]
(`python train.py ...` in a checkout is the same). Hydra entry point around `vitpos.train.train(cfg)`;
the configs are vitpos/configs/ (train.yaml and its groups), `--help` lists them."""

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from vitpos.config import CONFIG_DIR, compose_train_config
from vitpos.console import quiet_third_party
from vitpos.errors import EXIT_PREEMPTED, ConfigError, Preempted, VitposError, print_line
from vitpos.errors import report as report_error
from vitpos.finetune import finetune_config
from vitpos.precision import fastest_processes
from vitpos.train import train

METRICS_FILE = "VITPOS_METRICS_FILE"  # set by a sweep for a job it runs as its own command


def relaunches_command_line(trainer: DictConfig) -> bool:
    """Whether Lightning starts this run's other ranks by re-running the command line (its `ddp`
    launch over several local devices, as `trainer=cpu_ddp` and `trainer=ddp` do)."""
    strategy = str(trainer.get("strategy"))
    spawned = any(word in strategy for word in ("spawn", "fork", "notebook"))
    return strategy.startswith("ddp") and not spawned and str(trainer.get("devices")) != "1"


def run_job_as_its_own_command() -> dict:
    """Run this sweep job as a single `python -m vitpos <its overrides>` and return its metrics.
    Re-running a multirun's command line would start the whole sweep again in every other rank."""
    with tempfile.TemporaryDirectory() as scratch:
        metrics_file = Path(scratch, "metrics.json")
        importable_from = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, importable_from)), **{METRICS_FILE: str(metrics_file)}
        )
        job = subprocess.run([sys.executable, "-m", "vitpos", *HydraConfig.get().overrides.task], env=env)
        if job.returncode:
            sys.exit(job.returncode)  # the job printed its own error
        return json.loads(metrics_file.read_text())


USER_CONFIG_FLAGS = (
    "--config-dir",
    "-cd",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "hydra.searchpath",
    "+hydra.searchpath",
)
HYDRA_FLAGS_WITH_OWN_OUTPUT = ("-h", "--help", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion")


def parse_overrides(overrides: list[str], config_loader=None) -> list:
    """`overrides` read by Hydra's own override parser (its sweeps `a,b`, `range()`, `choice()`,
    `glob()`, `interval()`, quoted values, lists), as Hydra's sweeper reads them; a grammar error is
    one ConfigError line. `config_loader` (a composition's) is needed to expand `glob()`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        return OverridesParser.create(config_loader).parse_overrides(list(overrides))
    except OverrideParseException as error:
        reason = [
            line
            for line in str(error).splitlines()
            if line.strip() and not line.startswith(("See https://", "Error parsing override"))
        ]
        raise ConfigError(
            f"cannot parse {error.override!r} ({'; '.join(reason)}); see Hydra's override grammar, "
            f"https://hydra.cc/docs/advanced/override_grammar/basic/"
        ) from None


def sweep_variants(overrides: list[str], groups_only: bool = False) -> list[list[str]]:
    """A multirun's overrides as single runs, each as Hydra's basic sweeper would write a job's
    overrides: every sweep at its first value, then each other value of each sweep once (the rest at
    their first); with `groups_only`, only config-group sweeps (`pos=a,b`, not `seed=range(3)`) get
    their other values. `interval()` sweeps, which only a sampling sweeper plugin reads, are left out."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        values = []
        for override in parse_overrides(overrides, loader):
            if override.is_interval_sweep():
                continue
            if not override.is_sweep_override():
                values.append((False, [override.input_line]))
                continue
            key = override.get_key_element()
            swept = [f"{key}={value}" for value in override.sweep_string_iterator()]
            options = loader.get_group_options(override.key_or_group)
            if not swept:  # e.g. a glob() that matches no option, range(0,0)
                raise ConfigError(
                    f"{override.input_line} sweeps no value, so Hydra would run no job"
                    + (f"; the options of {override.key_or_group}: {', '.join(options)}" if options else "")
                )
            values.append((bool(options), swept))
    first = [choices[0] for _, choices in values]
    variants = [first]
    for index, (is_group, choices) in enumerate(values):
        if is_group or not groups_only:
            variants += [first[:index] + [choice] + first[index + 1 :] for choice in choices[1:]]
    return variants


def check_sweeper_takes(overrides: list[str], argv: list[str]) -> None:
    """An `interval()` sweep with Hydra's basic sweeper (which only enumerates): one line naming the fix."""
    if any(arg.startswith(("hydra/sweeper=", "+hydra/sweeper=")) for arg in argv):
        return
    for override in parse_overrides(overrides):
        if override.is_interval_sweep():
            raise ConfigError(
                f"{override.input_line}: Hydra's basic sweeper cannot sample an interval; use a,b,c, range(), "
                f"choice() or glob(), or a sampling sweeper plugin (hydra/sweeper=optuna)"
            )


def check_composes(argv: list[str]) -> None:
    """Compose the config as Hydra will, so that a composition error (an unknown option of a config
    group, a key the config does not have) ends as one `error:` line with exit status 2 instead of
    Hydra's multi-line report. A sweep (`-m key=a,b`) is checked at its first values and at every
    value of a config-group sweep; Hydra's own settings (`hydra.*`, `hydra/...`) and flags are left
    to Hydra."""
    if any(arg.split("=")[0] in HYDRA_FLAGS_WITH_OWN_OUTPUT for arg in argv):
        return
    if any(arg.startswith(USER_CONFIG_FLAGS) for arg in argv):
        return  # the user's own config folders take part in Hydra's composition: Hydra reports its errors
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [arg for arg in argv if not arg.startswith(("-", "hydra.", "hydra/", "+hydra", "~hydra"))]
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    try:
        if multirun:
            check_sweeper_takes(overrides, argv)
            variants = sweep_variants(overrides, groups_only=True)
        else:
            parse_overrides(overrides)  # a grammar error named with its override
            variants = [overrides]
    except ConfigError as error:
        sys.exit(report_error(error))
    for variant in variants:
        try:
            compose_train_config(variant)
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            message = " ".join(str(error).split("Config search path")[0].split())  # Hydra's lines as one
            sys.exit(report_error(ConfigError(message)))


def main() -> float | None:
    """`python train.py` / `python -m vitpos`: the config checked, then Hydra's run."""
    check_composes(sys.argv[1:])
    return hydra_main()


def choose_processes(cfg: DictConfig) -> tuple[DictConfig, str | None]:
    """`trainer.devices=auto` with `strategy=auto` on one node (trainer=default): the config with the
    fastest form for this machine (`precision.fastest_processes`), several processes sharing
    `data.batch_size` so the global batch and the optimizer steps stay those of one process, and the
    line that says so; other trainers as they are (no line)."""
    trainer = cfg.trainer
    if str(trainer.get("devices")) != "auto" or str(trainer.get("strategy")) != "auto":
        return cfg, None
    if str(trainer.get("num_nodes")) not in ("1", "None"):
        return cfg, None
    processes, why = fastest_processes(str(trainer.get("accelerator")))
    batch = cfg.data.get("batch_size")
    if processes > 1 and (not isinstance(batch, int) or batch % processes):
        processes, why = 1, f"one process: data.batch_size={batch} does not split over {processes} processes"
    cfg = copy.deepcopy(cfg)
    cfg.trainer.devices = processes
    if processes == 1:
        return cfg, f"vitpos: trainer: {why}"
    cfg.trainer.strategy, cfg.trainer.accelerator, cfg.data.batch_size = "ddp", "cpu", batch // processes
    return cfg, (
        f"vitpos: trainer: {why}; data.batch_size={batch} is split, {batch // processes} per process "
        f"(trainer.devices=1 for one process)"
    )


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    quiet_third_party()
    try:
        if HydraConfig.get().mode == RunMode.MULTIRUN and relaunches_command_line(choose_processes(cfg)[0].trainer):
            metrics = run_job_as_its_own_command()
        else:
            cfg, chosen = choose_processes(finetune_config(cfg))
            if chosen and rank_zero_only.rank == 0:  # the other processes re-run this command: the same choice
                print(chosen, flush=True)
            metrics = train(cfg)
    except VitposError as error:
        sys.exit(report_error(error))
    except Preempted as stop:
        print_line(f"vitpos: pre-empted: {stop}")
        sys.exit(EXIT_PREEMPTED)
    finally:
        end_process_group()
    if os.environ.get(METRICS_FILE) and rank_zero_only.rank == 0:
        Path(os.environ[METRICS_FILE]).write_text(json.dumps(metrics))
    return metrics.get("val/acc_best")


def end_process_group() -> None:
    """Destroy a DDP run's process group before the interpreter exits: Gloo's worker threads, left
    to the interpreter's finalization, abort the process now and then (SIGABRT, `terminate called
    without an active exception`), which the launcher reports as a failed job."""
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
