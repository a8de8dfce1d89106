"""Compare finished runs from their logged metrics (event files, or metrics.csv of logger=csv), with seed statistics.

    python -m vitpos.compare logs/ [data=fashion_mnist] [pos=[none,cpe]] [img_size=32] [out=logs/compare]
    [reference=<published.csv>] [reach=80]
    (the folder may also be given as logdir=logs/; several folders compare as one: logs/a logs/b, or
    logdir=[logs/a,logs/b], with out= defaulting to the first folder's compare/)

Runs that differ only by `seed` form one group (the same scheme, data, size or curriculum, model, lr, batch,
budget and recipe: optimizer, schedule, loss and augmentation settings, weight EMA and test-time flip);
a seed run twice counts
once, its latest run. Each group is one row with the number of runs `n` and the mean +- sample
standard deviation of every accuracy: best and final validation, test, the best test over epochs of
runs that tested after every epoch (test_every_epoch=true), and the resolution-transfer
accuracies that `vitpos.evaluate` logged into the run (`test_acc@42px`, `test_acc@42px/interpolate`,
`test_acc@42px/interpolate_1000img` for an evaluation of a subset, ...); the table names lr and the
recipe words that tell its rows apart when they differ. Writes to `out`: `compare.md` (the table),
`compare.csv` (mean and std columns), `runs.csv` (one row per run), `compare.png` (accuracy per
group, error bars of one std), `epochs.png` (validation accuracy per epoch, one line per group) and
`epochs.md` (the same means, each with the group's rank at that epoch, then the epoch from which
each pair whose order changed keeps its final order) when runs validated more than
once, `accuracy_vs_minutes.png` (validation accuracy, and test accuracy where logged, against
wall-clock minutes since each run's start: the times of its TensorBoard events) when the runs
logged to TensorBoard, with `reach=<percent>` also `minutes_to_reach.md` (per group, the runs whose
validation accuracy reached it and their wall-clock minutes to the first such validation),
`transfer.png` (accuracy against evaluation size, one panel per scheme, one line per training
setting and resize mode) when runs were evaluated at two or more sizes, and, for evaluations that
asked for an attention temperature (`resize_mode=all`, each `scripts/study.sh` run's extrapolation
step), `extrapolation.md` (every conversion at every size, the best per scheme and size in bold;
then each scheme's best conversion per size as a share of its 1x accuracy) and `extrapolation.png`
(one panel per scheme, one line per conversion, fuzzy-trained twins in the same panel) and `kept.png`
(per scheme and training variant, the share of its 1x accuracy its best conversion keeps at each
larger size) instead of table columns. `ranking.md` ranks the groups trained at one size and not
fine-tuned (written when there are some) by test accuracy, each with its gap to the next and whether
the two are separated (their one-std bars do not overlap: gap > std + std); with `reference=` (a CSV
of `pos,name,data,test_acc,source`, e.g. a published ablation, accuracies in percent) it joins each
scheme's published accuracy and rank beside ours, for runs of that data set: our best test over
epochs where we have it, as published ablations report, else our test. A run counts once it
has finished (`results.json`).
"""

from __future__ import annotations

from omegaconf import OmegaConf

from ..cli import parse_options
from ..errors import ConfigError, VitposError
from ..errors import report as report_error
from .report import compare

__all__ = ["compare", "main"]  # the jobs' own names: vitpos.compare.logs, .grouping, .tables, .charts, .report

DEFAULTS = dict(logdir=None, data=None, pos=None, img_size=None, out=None, reference=None, reach=None)


def main(argv: list[str]) -> int:
    folders = [arg for arg in argv if "=" not in arg and not arg.startswith("-")]
    if folders:  # the log folder(s) may come unnamed
        others = [arg for arg in argv if arg not in folders]
        argv = [f"logdir={folders[0]}" if len(folders) == 1 else f"logdir=[{','.join(folders)}]", *others]
    try:
        options = parse_options(argv, DEFAULTS, __doc__)
        if not options.logdir:
            raise ConfigError("pass the log folder: python -m vitpos.compare logs/ (or logdir=logs/)")
        given = OmegaConf.to_container(options)
        compare(given.pop("logdir"), **given)
    except VitposError as error:
        return report_error(error)
    return 0
