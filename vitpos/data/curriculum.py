"""A resolution curriculum: the run's epochs in phases of increasing image size, the last at
`img_size` (the model's built grid), each phase's size and batch a function of the epoch alone
(docs/DESIGN.md, section 2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from omegaconf import OmegaConf

from ..errors import ConfigError, is_integer, is_number
from ..model import image_size
from ..runs import size_tag, sizes_tag

BATCH_MODES = ("fixed", "tokens")
EXAMPLE = "curriculum=[[16,0.3],[24,0.3],[32,0.4]]"


@dataclass(frozen=True)
class Phase:
    """Epochs `first_epoch` .. `first_epoch + epochs - 1` (counted from 0) train at `size` with
    `batch_size` images per process and step."""

    size: tuple[int, int]
    first_epoch: int
    epochs: int
    batch_size: int


class Curriculum:
    """Phases `[[size, amount], ...]`: a size (an int or [H, W]) and either a share of the run's
    epochs, written as a decimal (0.3; the shares sum to 1), or a number of epochs, written as an
    integer (10; they sum to trainer.max_epochs). Sizes grow phase by phase (no side shrinks) and
    the last is `img_size`.

    Args:
        phases: the phase list as configured.
        img_size: the model's size, where validation, test and the checkpoint are.
        batch_size: images per process and step at `img_size`.
        batch: `fixed` (every phase steps with `batch_size` images) or `tokens` (a phase at a smaller
            size steps with batch_size x (img_size / size)^2 images: about as many tokens per step).
    """

    def __init__(self, phases, img_size: tuple[int, int], batch_size: int, batch: str = "fixed"):
        phases = OmegaConf.to_container(phases) if OmegaConf.is_config(phases) else phases
        if batch not in BATCH_MODES:
            raise ConfigError(f"curriculum_batch={batch!r} must be one of {', '.join(BATCH_MODES)}")
        if not isinstance(phases, Sequence) or isinstance(phases, str) or len(phases) < 2:
            raise ConfigError(
                f"curriculum={phases!r} must list two or more phases [size, share], e.g. {EXAMPLE}; "
                f"for one size set img_size and leave curriculum=null"
            )
        for phase in phases:
            if not isinstance(phase, Sequence) or isinstance(phase, str) or len(phase) != 2:
                raise ConfigError(f"curriculum phase {phase!r} must be a pair [size, share or epochs], e.g. {EXAMPLE}")
        self.sizes = [image_size(size, f"curriculum size {size!r}", EXAMPLE) for size, _ in phases]
        self.amounts = [amount for _, amount in phases]
        if not all(is_number(a) and a > 0 for a in self.amounts):
            raise ConfigError(f"curriculum shares or epochs {self.amounts} must be positive numbers, e.g. {EXAMPLE}")
        self.in_epochs = all(is_integer(a) for a in self.amounts)
        if not self.in_epochs and any(is_integer(a) for a in self.amounts):
            raise ConfigError(
                f"curriculum {self.amounts} mixes shares (decimals, e.g. 0.3) and epochs (integers, e.g. 10); "
                f"write every phase's amount one way"
            )
        if not self.in_epochs and sum(self.shares()) != 1:
            raise ConfigError(
                f"curriculum shares {self.amounts} sum to {float(sum(self.shares())):g}, not 1; e.g. {EXAMPLE}"
            )
        for smaller, larger in zip(self.sizes, self.sizes[1:]):
            if larger == smaller or larger[0] < smaller[0] or larger[1] < smaller[1]:
                raise ConfigError(
                    f"curriculum sizes {sizes_tag(self.sizes)} must grow phase by phase "
                    f"({size_tag(smaller)} then {size_tag(larger)}), e.g. {EXAMPLE}"
                )
        if self.sizes[-1] != tuple(img_size):
            raise ConfigError(
                f"the curriculum ends at {size_tag(self.sizes[-1])} but img_size is {size_tag(img_size)}: the "
                f"run validates, tests and saves the model at img_size; end the curriculum at img_size"
            )
        self.img_size, self.batch_size, self.batch = tuple(img_size), batch_size, batch
        self._plans: dict[int, tuple[Phase, ...]] = {}

    def shares(self) -> list[Fraction]:
        """The shares as exact fractions of their decimals (0.3 is 3/10), so that they sum to exactly 1."""
        return [Fraction(str(a)) for a in self.amounts]

    def phase_batch(self, size: tuple[int, int]) -> int:
        """Images per process and step at `size`."""
        if self.batch == "fixed":
            return self.batch_size
        return max(1, round(self.batch_size * self.img_size[0] * self.img_size[1] / (size[0] * size[1])))

    def largest_batch(self) -> int:
        """The most images a step of any phase takes (the first phase's, with `tokens`)."""
        return max(self.phase_batch(size) for size in self.sizes)

    def plan(self, max_epochs) -> tuple[Phase, ...]:
        """The phases over a run of `max_epochs` epochs. Shares become epochs at the rounded cumulative
        share (half up): 0.3, 0.3, 0.4 of 35 epochs are epochs 0-10, 11-20, 21-34."""
        if max_epochs in self._plans:
            return self._plans[max_epochs]
        if not (is_integer(max_epochs) and max_epochs > 0):
            raise ConfigError(
                f"a curriculum is planned over trainer.max_epochs, which is {max_epochs!r}; set it, "
                f"e.g. trainer.max_epochs=35 (trainer.max_steps may still end the run earlier)"
            )
        if self.in_epochs:
            if sum(self.amounts) != max_epochs:
                raise ConfigError(
                    f"curriculum epochs {self.amounts} sum to {sum(self.amounts)}, not trainer.max_epochs="
                    f"{max_epochs}; set trainer.max_epochs={sum(self.amounts)} or give shares, e.g. {EXAMPLE}"
                )
            ends = [sum(self.amounts[: i + 1]) for i in range(len(self.amounts))]
        else:
            cumulative = [sum(self.shares()[: i + 1]) for i in range(len(self.amounts))]
            ends = [int(max_epochs * c + Fraction(1, 2)) for c in cumulative]
        starts = [0, *ends[:-1]]
        for size, start, end in zip(self.sizes, starts, ends):
            if end <= start:
                raise ConfigError(
                    f"the curriculum's {size_tag(size)} phase gets no epoch of trainer.max_epochs={max_epochs}; "
                    f"raise its share or trainer.max_epochs"
                )
        plan = tuple(
            Phase(size, start, end - start, self.phase_batch(size))
            for size, start, end in zip(self.sizes, starts, ends)
        )
        self._plans[max_epochs] = plan
        return plan

    def phase_at(self, epoch: int, max_epochs) -> Phase:
        """The phase of `epoch` (counted from 0) in a run of `max_epochs` epochs."""
        plan = self.plan(max_epochs)
        return next((p for p in plan if epoch < p.first_epoch + p.epochs), plan[-1])

    def tag(self, max_epochs) -> str:
        """The curriculum in a run's name and HParams: `16-24-32px_11-10-14ep`, and `_tokens` when
        the batch follows the tokens; shares and the epochs they become read alike."""
        plan = self.plan(max_epochs)
        epochs = "-".join(str(p.epochs) for p in plan)
        return f"{sizes_tag(self.sizes)}_{epochs}ep" + ("_tokens" if self.batch == "tokens" else "")

    def describe(self, max_epochs) -> str:
        """The start line's account: `16px for 11 epochs, 24px for 10, 32px for 14 (batch 256, 114, 64 per process)`."""
        plan = self.plan(max_epochs)
        spans = [f"{size_tag(p.size)} for {p.epochs}" for p in plan]
        batches = ", ".join(str(p.batch_size) for p in plan) if self.batch == "tokens" else str(self.batch_size)
        unit = "epoch" if plan[0].epochs == 1 else "epochs"
        return f"{spans[0]} {unit}, {', '.join(spans[1:])} (batch {batches} per process)"


def curriculum_tag(config: dict) -> str:
    """The curriculum tag of a run's saved config (`Curriculum.tag`), "-" for a run without one."""
    if not config.get("curriculum"):
        return "-"
    curriculum = Curriculum(
        config["curriculum"],
        image_size(config["img_size"]),
        config["data"]["batch_size"],
        config.get("curriculum_batch") or "fixed",
    )
    return curriculum.tag(config["trainer"]["max_epochs"])
