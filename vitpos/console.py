"""Third-party messages that tell a vitpos user nothing, silenced one by one (by message and by the
module or logger they come from, never a blanket filter). The training CLI installs them."""

from __future__ import annotations

import logging
import warnings

# Lightning's info messages go through one of these loggers (whichever package set it last)
LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


# Lightning's info lines that vitpos's start lines say better (the device and the processes of the
# run) or that advertise its cloud products
LIGHTNING_NOISE = (
    "💡 Tip:",
    "GPU available:",
    "TPU available:",
    "HPU available:",
    f"{'-' * 100}\ndistributed_backend=",
)


def _not_noise(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(LIGHTNING_NOISE)


def quiet_third_party() -> None:
    """Silence: Lightning's product tip, its banners of the devices it found and of the distributed
    processes it started, the deprecation of torch's LeafSpec that Lightning's own code triggers,
    and the advice to sync the epoch-level train/loss (vitpos logs rank 0's epoch mean on purpose:
    an all-reduce every step costs more than it tells)."""
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
    warnings.filterwarnings(
        "ignore",
        message=r"It is recommended to use `self\.log\('train/loss', \.\.\., sync_dist",
        module=r"lightning\.pytorch\.trainer\.connectors\.logger_connector\.result",
    )
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if _not_noise not in logger.filters:
            logger.addFilter(_not_noise)
