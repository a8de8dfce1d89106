"""Run folders and checkpoints: `<log_dir>[/<experiment>]/<run name>/version_N/` holds train.py's
`config.yaml`, `hparams.yaml`, event files, `checkpoints/` and, once finished, `results.json`."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from .config import CONFIG_DIR, to_container
from .errors import ConfigError
from .model import ATTN_TEMPERATURES

RESULTS_FILE = "results.json"  # final metrics of a finished run, in its version_N folder
CHECKPOINTS = "checkpoints"


def size_tag(img_size) -> str:
    """`32px`, or `32x48px` for a rectangle."""
    sizes = [img_size] * 2 if isinstance(img_size, int) else list(img_size)
    return f"{sizes[0]}px" if sizes[0] == sizes[1] else f"{sizes[0]}x{sizes[1]}px"


def sizes_tag(sizes) -> str:
    """`24-32-40px` for the sizes of mixed-resolution training (`32x48` for rectangles)."""
    return "-".join(size_tag(size).removesuffix("px") for size in sizes) + "px"


FUZZY_SUFFIX = "+fuzzy"


def scheme_label(pos_config) -> str:
    """The scheme as tables and HParams name it: `2d_sin`; each argument set away from its
    configs/pos YAML as `+key=value`, e.g. `cpe+padding_mode=circular`; then `+fuzzy` when trained
    with fuzzy positions. So runs of one scheme with other arguments never group together."""
    pos_config = to_container(pos_config)
    name = pos_config["name"]
    defaults = scheme_defaults(name)
    changed = [
        f"+{key}={_word(value)}"
        for key, value in sorted(pos_config.items())
        if defaults is not None and key not in ("name", "fuzzy") and (key not in defaults or value != defaults[key])
    ]
    return name + "".join(changed) + (FUZZY_SUFFIX if pos_config.get("fuzzy") else "")


@functools.cache  # vitpos.compare labels every run: each YAML is read once
def scheme_defaults(name: str) -> dict | None:
    """The settings of configs/pos/<name>.yaml, or None for a scheme without one (not to be changed)."""
    path = CONFIG_DIR / "pos" / f"{name}.yaml"
    return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else None


def run_folder_label(pos_config) -> str:
    """`scheme_label` as a folder name, one that command-line values take as they are:
    `cpe_padding_mode-circular`, `2d_sin_ref_grid-4-4_fuzzy`."""
    return "_".join(re.sub(r"[^\w.]+", "-", part).strip("-") for part in scheme_label(pos_config).split("+"))


def budget(trainer: dict) -> str:
    """`15 epochs`, or `2000 steps` when the steps bound the run (train.py's HParams say the same)."""
    steps = trainer.get("max_steps")
    return f"{steps} steps" if steps not in (None, -1) else f"{trainer.get('max_epochs')} epochs"


def devices(trainer: dict) -> int:
    """Processes of a run (devices x nodes), so `batch_size` is the global batch; 1 for `auto`."""
    count = trainer.get("devices")
    return int(count) * int(trainer.get("num_nodes") or 1) if str(count).isdigit() else 1


EVALUATION_KEYS = ("ema_decay", "ema_warmup", "test_flip")  # train.yaml's weight EMA and test-time flip


def training_recipe(config: dict) -> str:
    """How a run (its config.yaml) was optimised besides lr and batch size: the optimizer and its
    settings, the schedule, the loss, the augmentation and the weight EMA and test-time flip where
    on, as `name=value` words, e.g.
    `optim=AdamW weight_decay=0.05 ... schedule=warmup_cosine_schedule warmup_steps=500 ...`."""
    optim, scheduler, loss = dict(config["optim"]), dict(config["scheduler"]), dict(config["loss"])
    words = [f"optim={optim.pop('_target_').rsplit('.', 1)[-1]}"]
    words += [f"{k}={_word(v)}" for k, v in sorted(optim.items()) if k not in ("lr", "_partial_")]
    words.append(f"schedule={scheduler.pop('_target_').rsplit('.', 1)[-1]}")
    words += [f"{k}={_word(v)}" for k, v in sorted(scheduler.items()) if k != "_partial_"]
    words += [f"{k}={_word(v)}" for k, v in sorted(loss.items())]
    if "augment" in config.get("data", {}):
        words.append(f"augment={config['data']['augment']}")
    # what validation and test evaluate: written where switched on, so older runs keep their recipe
    words += [f"{k}={_word(config[k])}" for k in EVALUATION_KEYS if config.get(k) not in (None, False)]
    return " ".join(words)


def _word(value) -> str:
    """A setting as one word: numbers as Python's shortest form (0 and 0.0 alike), lists without spaces."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_word, value)) + "]"
    return str(value)


def conversion_suffix(resize_mode: str | None, attn_temperature: str | None, images: int | None = None) -> str:
    """The tag suffix of an evaluation whose conversion the user asked for: `ntk_tlog`, `ntk`,
    `tnone` (`resolution/test_acc_<suffix>`; "" for the checkpoint's own conversion), then `_<n>img`
    when it read a subset of n images of the split (`limit=`), so that a check on a subset is its
    own column and never replaces the figure of the whole split."""
    return "_".join(filter(None, [resize_mode, attn_temperature and f"t{attn_temperature}", images and f"{images}img"]))


def parse_conversion_suffix(suffix: str) -> tuple[str, str | None, int | None]:
    """`ntk_tlog` -> ("ntk", "log", None), `tnone_2000img` -> ("", "none", 2000), `interpolate` ->
    ("interpolate", None, None): the resize mode ("" for the scheme's own rule), the temperature asked
    for (None: not asked) and the size of the subset evaluated (None: the whole split)."""
    images = None
    rest, _, last = suffix.rpartition("_")
    if last.endswith("img") and last.removesuffix("img").isdigit():
        suffix, images = rest, int(last.removesuffix("img"))
    mode, _, last = suffix.rpartition("_")
    if last.startswith("t") and last.removeprefix("t") in ATTN_TEMPERATURES:
        return mode, last.removeprefix("t"), images
    return suffix, None, images


RUN_FOLDER_ENV = "VITPOS_RUN_FOLDER"  # rank 0's claimed version folder, inherited by the ranks it launches


def claim_version(run_root: Path) -> Path:
    """Create the next free `<run_root>/version_N` and return it. `mkdir` is atomic: of two runs
    started at the same moment, one creates version_N and the other moves on to version_N+1. The
    folder is published in the environment, from which the ranks Lightning launches learn it."""
    run_root.mkdir(parents=True, exist_ok=True)
    numbers = [p.name.removeprefix("version_") for p in run_root.glob("version_*")]
    version = max((int(n) for n in numbers if n.isdigit()), default=-1) + 1
    while True:
        folder = run_root / f"version_{version}"
        try:
            folder.mkdir()
        except FileExistsError:
            version += 1
            continue
        os.environ[RUN_FOLDER_ENV] = str(folder)
        return folder


def claimed_version(run_root: Path) -> int | None:
    """On a rank other than 0: the version rank 0 claimed under `run_root` (`claim_version`), or
    None when it is not known here (such a rank writes nothing into the run folder)."""
    folder = os.environ.get(RUN_FOLDER_ENV)
    if folder and Path(folder).parent == run_root and Path(folder).name.startswith("version_"):
        return version_of(Path(folder))
    return None


def version_of(folder: Path) -> int:
    """N of a `version_N` folder."""
    return int(Path(folder).name.removeprefix("version_"))


def run_dir(checkpoint: Path) -> Path | None:
    """The `version_N` folder of a checkpoint saved by train.py, or None for a loose file."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS else None


def run_label(checkpoint: Path) -> str:
    """`<run>/version_N` of a checkpoint in a run folder, else the file's stem."""
    run = run_dir(checkpoint)
    return f"{run.parent.name}/{run.name}" if run else Path(checkpoint).stem


def checkpoint_step(path: Path) -> int:
    """The optimizer step in a checkpoint's name (`best-epoch12-step4563.ckpt` -> 4563), -1 if none."""
    found = re.search(r"step(\d+)", Path(path).stem)
    return int(found.group(1)) if found else -1


def best_checkpoint(checkpoints_dir: Path) -> Path:
    """The best-*.ckpt of a run's checkpoints folder (last.ckpt when it has none). A best checkpoint
    is written only when validation improves, so the one of the latest step is the best, also when
    an interrupted run left an earlier one behind; names sort wrongly as text (epoch9 > epoch12)."""
    folder = Path(checkpoints_dir)
    return max(folder.glob("best-*.ckpt"), key=checkpoint_step, default=folder / "last.ckpt")


def find_checkpoints(spec) -> list[Path]:
    """Checkpoint files named by `spec` (a path or a list of paths): files, or folders searched for
    the best checkpoint of every run (`best_checkpoint`)."""
    paths = []
    for item in [spec] if isinstance(spec, (str, Path)) else list(spec):
        item = Path(item).expanduser()
        if item.is_dir():
            runs = sorted({p.parent for p in item.rglob("*.ckpt")})
            paths += [best_checkpoint(run) for run in runs]
        else:
            paths.append(item)  # read_checkpoint says clearly when it is missing
    if not paths:
        raise ConfigError(f"no checkpoint found in {spec}; pass ckpt=<file.ckpt> or a folder holding checkpoints")
    return paths


def check_writable(folder: Path) -> Path | None:
    """Fail before training when the log folder cannot be written; return the outermost folder this
    made (None: `folder` existed), for a run that never trains to take away."""
    created = next((f for f in [*reversed(folder.parents), folder] if not f.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(
            f"cannot write to paths.log_dir ({folder}: {error.strerror}); pass a writable folder, "
            f"e.g. paths.log_dir=logs"
        ) from None
    return created


def check_out_folder(out: Path) -> None:
    """Refuse an `out` that cannot become a folder (a file, /proc/x) before any output is
    written (evaluate, figures); the folders made to find out are removed again."""
    missing = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot write to out= ({out}: {error.strerror}); pass a writable folder, e.g. out=logs/mine"
        ) from None
    finally:
        for folder in missing:
            try:
                folder.rmdir()
            except OSError:
                pass


def remove_run_folder(version_dir: Path, created: Path | None) -> None:
    """Delete `<run>/version_N`, `<run>` if that leaves it empty, and the folders above it this run
    made (`created` and those below it) where they are left empty."""
    shutil.rmtree(version_dir, ignore_errors=True)
    run = version_dir.parent
    up_to_created = [f for f in version_dir.parents if created is not None and (f == created or created in f.parents)]
    for folder in up_to_created or [run]:  # innermost first
        if not folder.is_dir() or any(folder.iterdir()):
            break
        folder.rmdir()
