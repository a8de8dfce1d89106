"""The command-line options that no constructor checks, declared as tables: what each takes, and
which option it only matters with. A CLI checks its table in one call, so a bad value or an option
the chosen mode would ignore is one ConfigError, before anything runs or is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError, is_integer

SEED_LIMIT = 2**32  # numpy's legacy RNG and Lightning's seed_everything take 0 <= seed < 2**32


@dataclass(frozen=True)
class Option:
    """One option: its `kind` (`flag`, `count`: an integer >= `low`, `seed`, `choice` of `choices`,
    `name`: any text, which a later step checks),
    whether null is allowed (`optional`), and `needs`: the option without which it is ignored (a
    value other than `unset` is then refused)."""

    kind: str
    example: str
    low: int = 1
    choices: tuple[str, ...] = ()
    optional: bool = False
    needs: str | None = None
    unset: object = None

    def accepts(self, value) -> bool:
        if value is None:
            return self.optional
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "count":
            return is_integer(value) and value >= self.low
        if self.kind == "seed":
            return is_integer(value) and 0 <= value < SEED_LIMIT
        if self.kind == "name":
            return isinstance(value, str) and value != ""
        return value in self.choices  # choice

    def must(self) -> str:
        text = {
            "flag": "true or false",
            "count": "a positive integer" if self.low == 1 else f"an integer >= {self.low}",
            "seed": f"an integer with 0 <= seed < 2**32 (= {SEED_LIMIT}), what numpy's RNG takes",
            "choice": f"one of {', '.join(self.choices)}",
            "name": "a name",
        }[self.kind]
        return f"{text}, or null" if self.optional else text


def check_options(values: Mapping, table: Mapping[str, Option], prefix: str = "") -> None:
    """Refuse a value `table` does not allow, then an option given where the option it needs is unset;
    `prefix` is the options' place in the config (`data.`)."""
    for key, option in table.items():
        if key in values and not option.accepts(values[key]):
            raise ConfigError(f"{prefix}{key}={values[key]!r} must be {option.must()}, e.g. {prefix}{option.example}")
    for key, option in table.items():
        if option.needs and values.get(key, option.unset) != option.unset and not values.get(option.needs):
            raise ConfigError(
                f"{prefix}{key}={values[key]!r} only matters with {prefix}{option.needs}=...; "
                f"set {prefix}{option.needs}, or drop {prefix}{key} (the run would ignore it)"
            )


TRAIN_OPTIONS = {  # the top-level keys of configs/train.yaml that no constructor checks
    "seed": Option("seed", "seed=0"),
    "test_after_fit": Option("flag", "test_after_fit=false"),
    "test_every_epoch": Option("flag", "test_every_epoch=true"),
    "batch_by_tokens": Option("flag", "batch_by_tokens=true", needs="train_img_sizes", unset=False),
    "curriculum_batch": Option(
        "choice", "curriculum_batch=tokens", choices=("fixed", "tokens"), needs="curriculum", unset="fixed"
    ),
    "ema_warmup": Option("flag", "ema_warmup=true", needs="ema_decay", unset=False),
    "resize_mode": Option("name", "resize_mode=interpolate", optional=True, needs="finetune_from"),
    "attn_temperature": Option(
        "choice", "attn_temperature=log", choices=("none", "log"), optional=True, needs="finetune_from"
    ),
}
DATA_OPTIONS = {  # the data settings that seed a generator (the data modules' own settings check the rest)
    "shuffle_seed": Option("seed", "shuffle_seed=0"),
    "split_seed": Option("seed", "split_seed=0"),
}
