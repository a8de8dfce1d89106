"""The docs are checked against the code, so they cannot drift from it: DESIGN.md's hook table
against `PositionalEncoding`'s signatures, the TensorBoard page's HParams lists against the row
`hparams_row` builds, the option lists in config comments and the training page's config-group table
against the config folders and the augment choices, the command a sweep job runs as against
vitpos/__main__.py, every example image size against the patch size, and the prose against changelog
wording. (That the commands compose with Hydra is tests/test_readme.py's check.) Nothing is trained."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import compose_config

import vitpos.__main__ as cli
from vitpos.config import CONFIG_DIR
from vitpos.data import AUGMENTS
from vitpos.hparams import HPARAM_METRICS, hparams_row
from vitpos.pos import HOOKS, PositionalEncoding

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DESIGN = ROOT / "docs" / "DESIGN.md"
TRAINING = ROOT / "docs" / "training.md"  # the site's page of config groups and recipes
TENSORBOARD = ROOT / "docs" / "tensorboard.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))  # the site's pages, the records among them
DOCS = [README, *PAGES, *sorted((ROOT / "docs").glob("*/README.md"))]
# the docs that describe the project as it is: every page but the record of measurements
PROSE = [README, *(page for page in PAGES if page.name != "RESULTS.md")]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- DESIGN.md's hook table: `PositionalEncoding`'s hooks with their exact parameters -------------

# a hook written as a signature: `bias(layer, grid, q)`, also `pos.bias(...)` / `PositionalEncoding.bias(...)`
HOOK_NAMES = "|".join(HOOKS)
HOOK_MENTION = re.compile(rf"`(?:(?:self\.)?pos\.|PositionalEncoding\.)?({HOOK_NAMES})\(([^`()]*)\)`")


def hook_parameters(hook: str) -> str:
    """`PositionalEncoding.<hook>`'s parameters as the docs write them: `layer, grid, q`."""
    return ", ".join(list(inspect.signature(getattr(PositionalEncoding, hook)).parameters)[1:])


def hook_table(text: str) -> list[str]:
    """The first cells of DESIGN.md's hook table (the table whose header starts `| hook |`)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.replace(" ", "").startswith("|hook|")), None)
    assert start is not None, "DESIGN.md has no hook table (a header row `| hook | ...`)"
    rows = []
    for line in lines[start + 2 :]:  # past the header and its |---| row
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def hook_table_problems(text: str) -> list[str]:
    """What in DESIGN.md's hook table disagrees with `HOOKS` and the hooks' signatures."""
    problems, named = [], []
    for cell in hook_table(text):
        match = HOOK_MENTION.match(cell)
        if not match:
            problems.append(f"hook table row {cell!r} does not start with a hook signature `name(params)`")
            continue
        named.append(match.group(1))
    if named != list(HOOKS):
        problems.append(f"hook table rows name {named}, vitpos.pos.HOOKS is {list(HOOKS)}")
    return problems + hook_mention_problems(text)


def hook_mention_problems(text: str) -> list[str]:
    """Every hook written as a signature anywhere in `text` with other parameters than the code's."""
    problems = []
    for match in HOOK_MENTION.finditer(text):
        hook, written = match.group(1), ", ".join(p.strip() for p in match.group(2).split(","))
        if written != hook_parameters(hook):
            problems.append(f"`{hook}({written})` where PositionalEncoding.{hook} takes ({hook_parameters(hook)})")
    return problems


def test_design_hook_table_matches_the_interface():
    assert hook_table_problems(read(DESIGN)) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hook_signature_in_the_docs_disagrees(doc):
    assert hook_mention_problems(read(doc)) == []


# --- the TensorBoard page's HParams lists: the row `hparams_row` builds -----------------------------


def doc_list(text: str, label: str) -> list[str]:
    """The names of a page's one line `<label>: `a`, `b`, ...`, `z`.` (nothing else on that line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith(f"{label}: ")]
    assert len(lines) == 1, f"the page needs exactly one line starting `{label}: ` (found {len(lines)})"
    items = lines[0][len(label) + 2 :]
    assert re.fullmatch(r"`[^`]+`(, `[^`]+`)*\.?", items), f"not a plain list of `names`: {lines[0]!r}"
    return re.findall(r"`([^`]+)`", items)


def hparams_columns(tmp_path) -> list[str]:
    """The keys of the row `vitpos.hparams.hparams_row` builds, from the default config and stand-ins
    for the module and the data (nothing built, nothing trained)."""
    cfg = compose_config([], tmp_path)
    module = SimpleNamespace(model=SimpleNamespace(config=dict(dim=192, depth=6, num_heads=3, patch_size=4)))
    datamodule = SimpleNamespace(batch_size=128, name="cifar10", source=None)
    return list(hparams_row(cfg, module, datamodule, trained_size=32))


def test_tensorboard_page_hparams_columns_are_the_row_train_writes(tmp_path):
    documented = doc_list(read(TENSORBOARD), "HParams columns")
    assert len(documented) == len(set(documented)), f"a column listed twice: {documented}"
    assert set(documented) == set(hparams_columns(tmp_path))


def test_tensorboard_page_hparams_metrics_are_the_ones_train_writes():
    assert doc_list(read(TENSORBOARD), "HParams metrics") == list(HPARAM_METRICS)


# --- option lists: config comments and the training page's group table against the config folders -


def group_options(group: str) -> set[str]:
    return {path.stem for path in (CONFIG_DIR / group).glob("*.yaml")}


def defaults_comment(text: str, group: str) -> tuple[str, list[str]]:
    """train.yaml's `- <group>: <default>   # a | b | c` line: the default and the listed options."""
    match = re.search(rf"^\s*- {group}: (\S+)\s+#(.*)$", text, re.M)
    assert match, f"train.yaml has no `- {group}: <default>  # <options>` line"
    return match.group(1), [option.strip() for option in match.group(2).split("|")]


def listed_groups(text: str) -> list[str]:
    """The groups whose train.yaml defaults line lists options in its comment (`# a | b | c`)."""
    return re.findall(r"^\s*- (\w+): \S+\s+#\s*\w+(?:\s*\|\s*\w+)+\s*$", text, re.M)


def test_train_yaml_lists_the_model_and_data_options():
    assert {"model", "data"} <= set(listed_groups(read(CONFIG_DIR / "train.yaml")))


@pytest.mark.parametrize("group", listed_groups(read(CONFIG_DIR / "train.yaml")))
def test_train_yaml_lists_every_option_of_the_group(group):
    default, listed = defaults_comment(read(CONFIG_DIR / "train.yaml"), group)
    assert len(listed) == len(set(listed)) and default in listed
    assert set(listed) == group_options(group)


def group_row(text: str, group: str) -> set[str]:
    """The options (backticked names) of the config-group table row `| `<group>` | ... |`."""
    rows = [line for line in text.splitlines() if line.startswith(f"| `{group}` |")]
    assert len(rows) == 1, f"docs/training.md needs one config-group row for `{group}`"
    return set(re.findall(r"`(\w+)`", rows[0].split("|")[2]))


@pytest.mark.parametrize("group", ["data", "model", "trainer", "experiment"])
def test_training_page_group_table_lists_every_option(group):
    assert group_row(read(TRAINING), group) == group_options(group)


def augment_comment_problems(path: Path) -> list[str]:
    """A data config's `augment:` comment, where it lists choices (`a (what) | b | c`), against
    vitpos.data.AUGMENTS."""
    match = re.search(r"^augment: (\S+)\s*#(.*)$", read(path), re.M)
    if not match or "|" not in match.group(2):
        return []
    listed = [part.split()[0] for part in match.group(2).split("|") if part.split()]
    problems = [] if set(listed) == set(AUGMENTS) else [f"{path.name} lists {listed}, the code takes {list(AUGMENTS)}"]
    return problems + ([] if match.group(1) in AUGMENTS else [f"{path.name}: augment {match.group(1)!r}"])


@pytest.mark.parametrize("config", sorted((CONFIG_DIR / "data").glob("*.yaml")), ids=lambda p: p.name)
def test_data_config_augment_comment_lists_the_accepted_choices(config):
    assert augment_comment_problems(config) == []


def test_documented_augment_choices_are_the_accepted_ones():
    spans = [span for doc in DOCS for span in re.findall(r"`data\.augment=([^`]+)`", read(doc)) if "|" in span]
    assert spans, "no doc lists the `data.augment=a|b|...` choices"
    for span in spans:
        assert set(span.replace("\\|", "|").split("|")) == set(AUGMENTS), span


# --- the command a sweep job runs as -------------------------------------------------------------


def sweep_job_command(monkeypatch, tmp_path) -> str:
    """The command `vitpos.__main__` runs a sweep job as, with `python` for the interpreter: its
    subprocess call caught, the job's overrides taken off."""
    task = ["pos=cpe", "seed=1"]
    calls = []

    def run(argv, env):
        calls.append(argv)
        Path(env[cli.METRICS_FILE]).write_text("{}")
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(
        cli, "HydraConfig", SimpleNamespace(get=lambda: SimpleNamespace(overrides=SimpleNamespace(task=task)))
    )
    monkeypatch.setattr(cli.subprocess, "run", run)
    assert cli.run_job_as_its_own_command() == {}
    (argv,) = calls
    assert argv[0] == sys.executable and argv[-len(task) :] == task
    return " ".join(["python", *argv[1 : -len(task)]])


def test_docs_name_the_command_a_sweep_job_runs_as(monkeypatch, tmp_path):
    command = sweep_job_command(monkeypatch, tmp_path)
    mentions = [(doc.name, m) for doc in DOCS for m in re.findall(r"`([^`<]*?)\s*<job overrides>`", read(doc))]
    assert mentions, "no doc says which command a sweep job runs as (`... <job overrides>`)"
    assert [m for m in mentions if m[1] != command] == [], f"a sweep job runs as `{command} <job overrides>`"


# --- example image sizes divide by the patch size ------------------------------------------------

COMMAND = re.compile(r"\btrain\.py\b|python -m vitpos\b")


def doc_commands(text: str) -> list[str]:
    """Every training or vitpos command of a doc: the lines of its code blocks (continuation lines
    joined, comments dropped) and every backticked inline span, usage forms included."""
    commands, in_block, pending = [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            commands += [span for span in re.findall(r"`([^`]+)`", line) if COMMAND.search(span)]
            continue
        code = f"{pending} {line.strip()}" if pending else line.strip()
        if code.endswith("\\"):
            pending = code[:-1].strip()
            continue
        pending = ""
        code = re.split(r"(?:^|\s)#\s", f"{code} ", maxsplit=1)[0].strip()
        if COMMAND.search(code):
            commands.append(code)
    return commands


def model_patch_size(name: str) -> int:
    match = re.search(r"^patch_size: (\d+)", read(CONFIG_DIR / "model" / f"{name}.yaml"), re.M)
    assert match, f"configs/model/{name}.yaml has no patch_size"
    return int(match.group(1))


DEFAULT_MODEL = defaults_comment(read(CONFIG_DIR / "train.yaml"), "model")[0]


def image_size_problems(command: str) -> list[str]:
    """`img_size=` / `img_sizes=` / `train_img_sizes=` values of `command` that its patch size does
    not divide: `model.patch_size=` when the command sets it, else that of `model=<name>` or of the
    default model (4). Values that are not written out (`$size`, `...`) are skipped."""
    patch = re.search(r"(?:^|\s)model\.patch_size=(\S+)", command)
    model = re.search(r"(?:^|\s)model=(\w+)", command)
    if patch and not patch.group(1).isdigit():
        return []
    divisor = int(patch.group(1)) if patch else model_patch_size(model.group(1) if model else DEFAULT_MODEL)
    problems = []
    for key, value in re.findall(r"(?:^|\s)([\w.]*img_sizes?)=(\S+)", command):
        bad = [int(size) for size in re.findall(r"\d+", value) if int(size) % divisor]
        if bad:
            problems.append(f"{key}={value}: {bad} not divisible by the patch size {divisor}")
    return problems


def test_docs_have_sized_commands():
    assert sum("img_size" in c for doc in DOCS for c in doc_commands(read(doc))) >= 10


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_example_image_sizes_divide_by_the_patch_size(doc):
    problems = [
        f"{command}\n    {problem}" for command in doc_commands(read(doc)) for problem in image_size_problems(command)
    ]
    assert problems == []


# --- the prose describes the project, not its history --------------------------------------------

HISTORY = re.compile(
    r"\b(used to be|no longer|previously|this round|predates|so far|earlier run|(?:is|are) now|"
    r"now (?:uses|runs|compiles|takes|has|is)|was (?:changed|renamed|replaced|removed|added|fixed)|"
    r"not available to re-measure|earlier, on)\b",
    re.I,
)


@pytest.mark.parametrize("doc", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_of_the_project_not_its_history(doc):
    text = " ".join(read(doc).split())  # sentences wrap over lines
    found = [text[max(0, m.start() - 60) : m.end() + 20] for m in HISTORY.finditer(text)]
    assert found == []
