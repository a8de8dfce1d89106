"""The run's HParams row (hparams.yaml and TensorBoard's HParams tab) and its Custom Scalars layout."""

from __future__ import annotations

from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard.summary import hparams as hparams_summary

from .config import to_container
from .data import ImageDataModule
from .data.curriculum import curriculum_tag
from .module import ImageClassifier
from .runs import budget, devices, scheme_label, size_tag, sizes_tag

HPARAM_METRICS = ("val/acc_best", "test/acc", "val/acc", "resolution/test_acc")


def hparams_row(cfg: DictConfig, module: ImageClassifier, datamodule: ImageDataModule, trained_size=None) -> dict:
    """The HParams-tab columns: what tells runs of a comparison apart (the full config stays in
    the run's config.yaml; parameters and speed are in vitpos.compare). Integers are written as text,
    which TensorBoard shows as written (a number would read 42.000)."""
    model = module.model.config
    return {
        "pos": scheme_label(cfg.pos),
        "seed": str(cfg.seed),
        "budget": budget(cfg.trainer),
        "batch_size": str(datamodule.batch_size * devices(cfg.trainer)),
        "size": size_tag(to_container(cfg.img_size)),
        "data": datamodule.name,
        "data_source": datamodule.source or "-",
        "experiment": cfg.get("experiment") or "-",
        "finetuned_from": size_tag(trained_size) if trained_size else "-",
        "train_sizes": sizes_tag(cfg.train_img_sizes) if cfg.get("train_img_sizes") else "-",
        "curriculum": curriculum_tag(cfg),
        "lr": cfg.optim.lr,
        "ema_decay": str(cfg.ema_decay) if cfg.get("ema_decay") is not None else "-",
        "test_flip": str(bool(cfg.get("test_flip"))).lower(),
        "model": f"d{model['dim']}xL{model['depth']}xH{model['num_heads']}/p{model['patch_size']}",
    }


# TensorBoard orders HParams columns by (not differs, name) and ticks the first five: marking these
# as differing puts the scheme, seed and size first, then the rest by name.
HPARAMS_FIRST = ("pos", "seed", "size")

# TensorBoard's Custom Scalars tab: one chart per question, every run as a line (regexes over tags)
SCALARS_LAYOUT = {
    "1 accuracy": {
        "validation accuracy (every run)": ["Multiline", [r"^val/acc$"]],
        "best validation accuracy": ["Multiline", [r"^val/acc_best$"]],
        "test accuracy": ["Multiline", [r"^test/acc$"]],
        "test accuracy after every epoch (test_every_epoch=true; not held out)": ["Multiline", [r"^test_each_epoch/"]],
        "accuracy vs resolution (x = image height, from vitpos.evaluate)": ["Multiline", [r"^resolution/"]],
    },
    "2 training": {
        "training loss": ["Multiline", [r"^train/loss_step$"]],
        "learning rate": ["Multiline", [r"^lr$"]],
    },
    "3 throughput": {
        "samples/s": ["Multiline", [r"/samples_per_sec$"]],
        "flops and time": ["Multiline", [r"^train/device/(flops|mfu)", r"^train/time"]],
    },
}


def log_hparams(logger, row: dict) -> None:
    """Write the HParams row (hparams.yaml) and, to TensorBoard, the HParams-tab summary compared
    on accuracy at every resolution and the Custom Scalars layout."""
    logger.log_hyperparams(row)  # hparams.yaml; with no metrics Lightning writes no HParams summary
    if not isinstance(logger, TensorBoardLogger):
        return
    experiment, *session = hparams_summary(row, {name: 0.0 for name in HPARAM_METRICS})
    content = HParamsPluginData.FromString(experiment.value[0].metadata.plugin_data.content)
    for info in content.experiment.hparam_infos:
        info.differs = info.name in HPARAMS_FIRST
    experiment.value[0].metadata.plugin_data.content = content.SerializeToString()
    for summary in (experiment, *session):
        logger.experiment.file_writer.add_summary(summary)
    logger.experiment.add_custom_scalars(SCALARS_LAYOUT)
