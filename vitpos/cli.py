"""The one command-line convention of the vitpos CLIs (`vitpos.evaluate`, `compare`, `diagnose`,
`figures`): `key=value` options in Hydra's override syntax."""

from __future__ import annotations

import inspect

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError


def parse_options(argv: list[str], defaults: dict, doc: str, extra_keys=()) -> DictConfig:
    """`key=value` options in Hydra's override
    syntax (`img_sizes=[32,48]`, `ckpt=[a,b]`) over `defaults`; `--help` prints `doc` and exits.
    `extra_keys` are accepted beyond the defaults (model arguments for a fresh model)."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(doc.strip())
        raise SystemExit(0)
    loose = [arg for arg in argv if "=" not in arg]
    if loose:
        raise ConfigError(f"expected key=value options, got {loose[0]!r}; see --help")
    empty = [arg for arg in argv if arg.endswith("=") and arg.count("=") == 1]
    if empty:  # OmegaConf would read it as null, i.e. as if the option were not given
        raise ConfigError(f"{empty[0]} has no value; give one, or {empty[0]}null for none; see --help")
    try:
        options = OmegaConf.from_dotlist(argv)
    except Exception as error:  # OmegaConf's grammar errors have several types
        raise ConfigError(f"cannot parse the options ({str(error).splitlines()[0]}); see --help") from None
    unknown = set(options) - set(defaults) - set(extra_keys)
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(sorted(unknown))}; valid: {', '.join([*defaults, *sorted(extra_keys)])}"
        )
    return OmegaConf.merge(OmegaConf.create(defaults), options)


def refuse_beside_ckpt(argv: list[str], ignored) -> None:
    """Refuse options that a `ckpt=` on the same command line makes the command ignore (the model
    comes from the checkpoint: a scheme or model argument given beside it would silently not count)."""
    given = sorted({arg.split("=", 1)[0] for arg in argv} & set(ignored))
    if given and any(arg.startswith("ckpt=") for arg in argv):
        raise ConfigError(
            f"ckpt= builds the model the checkpoint records, which ignores {', '.join(given)}; "
            f"drop {'it' if len(given) == 1 else 'them'}, or drop ckpt= for a fresh model"
        )


def keyword_defaults(function) -> dict:
    """`function`'s keyword arguments and their defaults: a CLI's options, kept with the function."""
    parameters = inspect.signature(function).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
