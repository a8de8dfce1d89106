"""README's commands paste: every `python train.py ...` and `python -m vitpos.<tool> ...` line of its
code blocks, and every such command inline in its prose that is not a usage form (`<arg>`,
`[option=...]`), composes with Hydra or parses with the tool's options as written (no placeholder,
no glob), so a README command cannot drift from the code. Nothing is trained or evaluated."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
from conftest import compose_config

from vitpos.__main__ import sweep_variants

ROOT = Path(__file__).resolve().parents[1]


TEMPLATE = re.compile(r"<|\.\.\.|\s\|\s|\[[a-z]")  # a usage form in prose: <arg>, ..., a | b, [option=...]


def readme_commands() -> list[str]:
    """The commands of README.md's code blocks (continuation lines joined, comments dropped) and the
    inline ones of its prose that are commands rather than usage forms (TEMPLATE)."""
    commands, in_block, pending = [], False, ""
    text = (ROOT / "README.md").read_text()
    for line in text.splitlines():
        if not in_block and not line.startswith("```"):
            commands += [
                span
                for span in re.findall(r"`(python (?:train\.py|-m vitpos)[^`]*)`", line)
                if not TEMPLATE.search(span)
            ]
        if line.startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        text = f"{pending} {line.strip()}" if pending else line.strip()
        if text.endswith("\\"):
            pending = text[:-1].strip()
            continue
        pending = ""
        code = re.split(r"\s#\s", f"{text} ", maxsplit=1)[0].strip()
        if code.startswith(("python train.py", "python -m vitpos")):
            commands.append(code)
    return commands


COMMANDS = readme_commands()


def test_readme_has_commands_of_every_kind():
    kinds = {" ".join(shlex.split(c)[:3]) if c.startswith("python -m") else "python train.py" for c in COMMANDS}
    assert {
        "python train.py",
        "python -m vitpos.compare",
        "python -m vitpos.evaluate",
        "python -m vitpos.figures",
    } <= kinds


# the function each tool's main() hands its parsed options to (replaced: nothing runs)
WORK = {"vitpos.compare": "compare", "vitpos.evaluate": "evaluate", "vitpos.figures": "figures_from_options"}


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_is_pasteable_and_composes(command, tmp_path, monkeypatch):
    assert not re.search(r"<[^>]*>|\.\.\.|\*", command), f"placeholder or glob in a command to paste: {command}"
    words = shlex.split(command)
    if words[1] == "train.py":
        # the launcher plugins are Hydra's own config (hydra/launcher=...): composition checks the rest
        overrides = [w for w in words[2:] if w != "-m" and not w.startswith(("hydra/", "hydra."))]
        for variant in sweep_variants(overrides):
            cfg = compose_config(variant, tmp_path)
            assert cfg.pos.name and cfg.data._target_
        return
    tool, calls = importlib.import_module(words[2]), []

    def work(*args, **kwargs):
        calls.append((args, kwargs))
        return {}, tmp_path  # what figures_from_options returns; compare and evaluate's results are unused

    monkeypatch.setattr(tool, WORK[words[2]], work)
    assert tool.main(words[3:]) == 0, command
    assert len(calls) == 1  # the options parsed and reached the tool's work
