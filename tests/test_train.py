"""End-to-end: train(cfg) composed through Hydra, TensorBoard output, checkpoints, errors."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import hydra
import lightning as L
import pytest
import torch
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

import vitpos
from vitpos import precision
from vitpos.precision import resolve_precision
from vitpos.train import summary, train

ROOT = Path(__file__).resolve().parents[1]


def test_every_scheme_has_a_config_and_vice_versa():
    configs = {p.stem for p in (ROOT / "configs" / "pos").glob("*.yaml")}
    assert configs == set(vitpos.list_pos())


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_smoke_train_every_scheme(pos, make_config, tiny_overrides):
    cfg = make_config([f"pos={pos}", *tiny_overrides])
    metrics = train(cfg)
    assert torch.isfinite(torch.tensor(metrics["test/loss"]))
    run_dir = Path(metrics["log_dir"])
    assert run_dir.parent.name == f"{pos}_synthetic_32px_seed{cfg.seed}"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    model_args = checkpoint["hyper_parameters"]["model"]
    assert model_args["pos"] == pos and model_args["img_size"] == 32 and model_args["num_classes"] == 4
    rebuilt = vitpos.create_model(**model_args)  # the checkpoint alone rebuilds the model
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    rebuilt.load_state_dict(state)
    # the reported test accuracy is the rebuilt model's top-1 on the test batch (no best checkpoint
    # exists in 2 steps, so the test ran on the final weights, those of last.ckpt)
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup()
    images, labels = next(iter(datamodule.test_dataloader()))
    with torch.no_grad():
        predicted = rebuilt.eval()(datamodule.preprocess(images, train=False)).argmax(-1)
    assert metrics["test/acc"] == pytest.approx((predicted == labels).float().mean().item(), abs=1e-6)


def test_tensorboard_has_scalars_and_hparams(make_config, tiny_overrides):
    cfg = make_config(
        [
            "pos=rel_bias",
            *tiny_overrides,
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "trainer.log_every_n_steps=1",
        ]
    )
    metrics = train(cfg)
    events = EventAccumulator(metrics["log_dir"])
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss_step", "val/loss", "val/acc", "val/acc_best", "lr", "test/acc"} <= scalars
    hparam_tags = {
        value.tag
        for path in Path(metrics["log_dir"]).glob("events.out.tfevents*")
        for event in EventFileLoader(str(path)).Load()
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == "hparams"
    }
    assert "_hparams_/session_start_info" in hparam_tags and "_hparams_/experiment" in hparam_tags
    assert list(Path(metrics["log_dir"]).glob("checkpoints/best-*.ckpt"))


def test_unknown_scheme_lists_the_options(make_config):
    with pytest.raises(MissingConfigException) as error:
        make_config(["pos=no_such_scheme"])
    assert all(f"\t{name}\n" in str(error.value) for name in vitpos.list_pos())
    with pytest.raises(vitpos.ConfigError, match="valid names: .*2d_sin"):
        vitpos.create_model("no_such_scheme")


def test_cli_unknown_scheme_and_missing_cifar(tmp_path):
    result = forked_cli.run([str(ROOT / "train.py"), "pos=no_such_scheme"], cwd=tmp_path)
    assert result.returncode != 0 and "2d_sin" in result.stderr + result.stdout
    result = forked_cli.run([str(ROOT / "train.py"), "pos=2d_sin", "data.download=false"], cwd=tmp_path)
    assert result.returncode == 2
    error_lines = result.stderr.splitlines()  # the error alone: no traceback, no Trainer device lines before it
    assert len(error_lines) == 1 and error_lines[0].startswith("error: ")
    assert "cifar-10-python.tar.gz" in error_lines[0] and str(tmp_path / "data") in error_lines[0]
    assert "data=fashion_mnist" in error_lines[0]
    assert not (tmp_path / "logs" / "2d_sin_cifar10_32px").exists()  # no half-made run folder


def test_precision_auto_falls_back_to_fp32(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512f"})  # an AVX2/AVX512 CPU without bf16
    assert resolve_precision("auto", "cpu") == "32-true"
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert resolve_precision("auto", "cpu") == "bf16-mixed"
    assert resolve_precision("32-true", "cpu") == "32-true"
    assert resolve_precision("16-mixed", "cpu") == "16-mixed"


def test_cpu_name_tells_apart_two_cpus_a_virtual_machine_names_alike(tmp_path, monkeypatch):
    """Two KVM guests both say 'AMD EPYC'; their family and model numbers (one AVX2-only, one
    with AVX512-BF16) are what a run's time depends on. Without a model name: the platform's word."""
    cpuinfo = tmp_path / "cpuinfo"
    names = []
    for family, model in ((25, 1), (26, 2)):
        block = f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        cpuinfo.write_text(block + "model name\t: AMD EPYC\nflags\t\t: fpu avx2\n\n" + block.replace(": 0", ": 1"))
        names.append(precision.cpu_name(cpuinfo))
    assert names == ["AMD EPYC, family 25 model 1", "AMD EPYC, family 26 model 2"]
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # an ARM board's: no model name
    monkeypatch.setattr(precision.platform, "processor", lambda: "aarch64")
    assert precision.cpu_name(cpuinfo) == "aarch64" and precision.cpu_name(tmp_path / "missing") == "aarch64"


def test_accuracy_is_top1_micro_on_an_unbalanced_batch():
    """9 of class 0 all right, 1 of class 1 wrong: top-1 is 0.9 (macro recall would say 0.5)."""
    from vitpos.module import ImageClassifier

    module = ImageClassifier(
        model=dict(pos="none", img_size=8, num_classes=3, in_chans=1, dim=8, depth=1, num_heads=1, patch_size=4)
    )
    labels = torch.tensor([0] * 9 + [1])
    logits = torch.zeros(10, 3)
    logits[:, 0] = 1.0  # predicts class 0 everywhere
    metric = module.val_metrics["acc"]
    metric.update(logits, labels)
    assert metric.compute().item() == pytest.approx(0.9)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml")))
def test_experiment_configs_compose_and_train(experiment, make_config, tmp_path):
    """Every experiment composes and trains a few steps of its own recipe (model, augmentation,
    Mixup/CutMix, schedule); CIFAR-10 on a uint8 stand-in laid out as cifar-10-batches-py."""
    from test_data import write_tiny_cifar10, write_tiny_fashion_mnist

    write_tiny_cifar10(tmp_path / "data", per_batch=16)
    write_tiny_fashion_mnist(tmp_path / "fmnist", train=64, test=16)
    standin = "data.system_dir=" + str(tmp_path / "fmnist")
    # one process: the two-process launch of fmnist_cpu's trainer is tested in test_ddp.py
    common = [
        "trainer=default",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "data.batch_size=16",
        "data.val_size=16",
        "callbacks.figures=null",
    ]
    data = [standin] if "fmnist" in experiment else []
    cfg = make_config([f"experiment={experiment}", "pos=rope_mixed", "seed=3", "trainer.max_steps=3", *common, *data])
    assert cfg.experiment == experiment
    if experiment.endswith("_finetune"):  # fine-tunes a checkpoint of its dataset's CPU recipe
        source = train(
            make_config(
                [
                    f"experiment={experiment.removesuffix('_finetune')}_cpu",
                    "pos=rope_mixed",
                    "trainer.max_steps=1",
                    "test_after_fit=false",
                    *data,
                    *common,
                ]
            )
        )
        cfg.finetune_from = source["checkpoint"]
    metrics = train(cfg)
    run = Path(metrics["log_dir"])
    assert run.parent.parent == tmp_path / "logs" / experiment and run.parent.name.endswith("_seed3")
    assert math.isfinite(metrics["test/loss"]) and (run / "results.json").is_file()


def test_quick_experiment_is_a_short_cifar10_run_that_also_runs_on_other_data(make_config, capsys):
    """experiment=quick: CIFAR-10 for at most 2 epochs, 1,000 validation images and a fifth of the test
    batches, through the ordinary keys; the default trainer; on data=synthetic it trains as written."""
    cfg = make_config(["experiment=quick"])
    assert cfg.experiment == "quick" and cfg.data._target_.endswith("CIFAR10DataModule")
    assert cfg.trainer.max_epochs <= 2 and cfg.trainer.max_steps == -1
    assert (cfg.data.val_size, cfg.trainer.limit_test_batches) == (1000, 0.2)
    assert cfg.trainer.strategy == make_config([]).trainer.strategy  # the default trainer, not cpu_ddp
    synthetic = make_config(["experiment=quick", "data=synthetic", "data.num_train=1280", "model=vit_70k"])
    metrics = train(synthetic)
    assert "(280 train, 1000 val)" in capsys.readouterr().out
    assert metrics["images_trained"] == 2 * 256  # 2 epochs of the 280 training images in whole batches of 128
    assert math.isfinite(metrics["test/acc"]) and (Path(metrics["log_dir"]) / "results.json").is_file()


def test_cpu_recipe_keeps_the_global_batch_on_two_processes_and_gives_way_to_a_gpu_trainer(make_config):
    """fmnist_cpu trains as 2 CPU processes of batch 64: the optimizer steps of one process with the
    study's batch 128; trainer=gpu on the command line replaces that trainer."""
    cpu = make_config(["experiment=fmnist_cpu"])
    assert (cpu.trainer.accelerator, cpu.trainer.strategy, cpu.trainer.devices) == ("cpu", "ddp", 2)
    assert cpu.data.batch_size * cpu.trainer.devices == 128
    gpu = make_config(["experiment=fmnist_cpu", "trainer=gpu", "data.batch_size=128"])
    assert (gpu.trainer.strategy, gpu.trainer.devices) == ("auto", 1)  # (make_config pins accelerator=cpu)
    assert gpu.trainer.max_epochs == cpu.trainer.max_epochs and gpu.optim == cpu.optim


def test_warmup_cosine_schedule():
    from vitpos.module import warmup_cosine

    lrs = [warmup_cosine(step, warmup_steps=10, total_steps=110, min_lr_ratio=0.01) for step in range(111)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear warmup, peak at its end
    assert lrs[10] == pytest.approx(1.0) and lrs[60] == pytest.approx(0.505)  # cosine: halfway = mid-point
    assert lrs[110] == pytest.approx(0.01)  # ends at min_lr_ratio
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # never rises after the warmup


@pytest.mark.parametrize(
    "limits",
    [
        ["trainer.max_epochs=2"],
        ["trainer.max_epochs=3", "trainer.limit_train_batches=4"],
        ["trainer.max_epochs=2", "trainer.accumulate_grad_batches=3"],
        ["trainer.max_epochs=5", "trainer.max_steps=7"],
        # a curriculum whose batch follows the tokens: 2, 4 and 8 steps in its 16, 24 and 32 px epochs
        ["trainer.max_epochs=3", "curriculum=[[16,1],[24,1],[32,1]]", "curriculum_batch=tokens"],
        [
            "trainer.max_epochs=4",
            "curriculum=[[16,0.5],[32,0.5]]",
            "curriculum_batch=tokens",
            "trainer.accumulate_grad_batches=3",
        ],
    ],
)
def test_schedule_length_is_the_number_of_optimizer_steps(limits, make_config, tiny_overrides):
    """The schedule's length (counted from the datamodule) is the steps the run really takes."""
    cfg = make_config(
        [*tiny_overrides, "trainer.max_steps=-1", *limits, "trainer.limit_val_batches=0", "test_after_fit=false"]
    )
    captured = {}

    class Capture(vitpos.module.ImageClassifier):
        def on_train_end(self):
            captured.update(total=self.total_steps(), taken=self.trainer.global_step)

    from unittest import mock

    with mock.patch("vitpos.assembly.ImageClassifier", Capture):
        train(cfg)
    assert captured["total"] == captured["taken"] > 0


def test_summary_counts_the_images_trained_on_with_batch_by_tokens(make_config, tiny_overrides, capsys):
    """Mixed sizes with batch_by_tokens keep fewer images at the larger sizes: the closing img/s
    counts the images each step really trained on, not steps x batch_size."""
    cfg = make_config([*tiny_overrides, "trainer.max_steps=6", "train_img_sizes=[16,64]", "batch_by_tokens=true"])
    captured = {}

    class Capture(vitpos.module.ImageClassifier):
        def on_train_end(self):
            sizes = [self.trainer.datamodule.train_size(step)[0] for step in range(6)]
            captured.update(images=self.images_trained, expected=sum(64 if size == 16 else 16 for size in sizes))

    from unittest import mock

    with mock.patch("vitpos.assembly.ImageClassifier", Capture):
        metrics = train(cfg)
    assert captured["images"] == captured["expected"] < 6 * 64
    assert f"{captured['images'] / metrics['fit_seconds']:.0f} img/s" in capsys.readouterr().out


class PoisonFromStep(L.Callback):
    """Every training batch from optimizer step `step` on is NaN."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step:
            batch[0].fill_(float("nan"))


@pytest.mark.parametrize(
    "every, poison, message",
    [
        (3, 1, "between steps 0 and 2"),  # caught at the first check, after step 2
        (1, 4, "at step 4"),  # checked every step
        (4, 9, "between steps 8 and 9"),  # the last step (9 of 0..9) is always checked
    ],
)
def test_non_finite_loss_stops_at_the_next_check(every, poison, message, make_config, tiny_overrides):
    cfg = make_config(
        [
            *tiny_overrides,
            "trainer.max_steps=10",
            f"check_finite_every={every}",
            "test_after_fit=false",
            "trainer.limit_val_batches=0",
            "+callbacks.nan._target_=test_train.PoisonFromStep",
            f"+callbacks.nan.step={poison}",
        ]
    )
    with pytest.raises(vitpos.VitposError, match=f"non-finite training loss {message} "):
        train(cfg)


def printed_train_command(text: str) -> list[str]:
    """The overrides of the `python -m vitpos ...` line of a closing summary, as the shell splits them
    (the form that works in a checkout and from an installed package alike)."""
    line = next(line.strip() for line in text.splitlines() if line.strip().startswith("python -m vitpos "))
    return shlex.split(line)[3:]


@pytest.mark.parametrize(
    "img_size, sizes, bigger", [("32", "img_sizes=[32,64]", 64), ("[32,48]", "img_sizes=[[32,48],[64,96]]", [64, 96])]
)
def test_closing_summary_suggests_commands_for_the_runs_own_size(make_config, tmp_path, img_size, sizes, bigger):
    cfg = make_config(["pos=rope_mixed", f"img_size={img_size}", "data=cifar10", "data.root=copy.tar.gz"])
    run = tmp_path / "logs" / "exp" / "run" / "version_0"
    text = summary(
        cfg,
        {"log_dir": str(run), "fit_seconds": 60.0, "images_per_s": 100.0, "checkpoint": "best.ckpt", "test/acc": 0.5},
    )
    assert f"python -m vitpos.evaluate ckpt={run} {sizes}" in text
    assert "test acc 50.00%" in text and "100 img/s" in text
    # the fine-tune line, composed as train.py would: a short fine-tune of this run, not the default 100 epochs
    finetune = make_config(printed_train_command(text))
    img_size = finetune.img_size if isinstance(finetune.img_size, int) else OmegaConf.to_container(finetune.img_size)
    assert finetune.pos.name == "rope_mixed" and img_size == bigger
    assert finetune.finetune_from == str(run) and finetune.paths.log_dir == cfg.paths.log_dir
    assert finetune.data.root == "copy.tar.gz" and finetune.data.train_subset == 10000
    assert finetune.trainer.max_epochs == 1 and finetune.optim.lr == pytest.approx(cfg.optim.lr / 5)


@pytest.mark.parametrize(
    "experiment, recipe", [("fmnist_cpu", "fmnist_finetune"), ("cifar10_study", "cifar10_finetune")]
)
def test_closing_summary_fine_tunes_with_the_recipes_own_fine_tune(experiment, recipe, make_config, tmp_path):
    """A study run's suggested fine-tune, pasted, is its experiment's short fine-tune recipe (a few
    minutes), into the study's log root, not the default trainer's 100 epochs into logs/."""
    cfg = make_config([f"experiment={experiment}", "pos=cpe", "paths.log_dir=/study"])
    run = tmp_path / "run" / "version_0"
    text = summary(cfg, {"log_dir": str(run), "fit_seconds": 60.0, "images_per_s": 100.0, "checkpoint": "best.ckpt"})
    finetune = make_config(printed_train_command(text))
    recipe_cfg = make_config([f"experiment={recipe}", "pos=cpe"])
    assert finetune.experiment == recipe and finetune.finetune_from == str(run) and finetune.paths.log_dir == "/study"
    assert finetune.trainer.max_epochs == recipe_cfg.trainer.max_epochs == 1
    assert finetune.data.train_subset == recipe_cfg.data.train_subset and finetune.img_size == 2 * cfg.img_size


def test_optimizer_and_schedule_come_from_their_config_groups(make_config, tiny_overrides):
    from vitpos.config import instantiate
    from vitpos.module import ImageClassifier

    cfg = make_config([*tiny_overrides, "optim=sgd", "optim.lr=0.05", "scheduler.warmup_steps=3"])
    module = ImageClassifier(
        model=dict(pos="2d_sin", img_size=16, num_classes=3, in_chans=1, dim=16, depth=1, num_heads=2),
        optimizer=instantiate(cfg.optim, _convert_="all"),
        scheduler=instantiate(cfg.scheduler, _convert_="all"),
    )
    optimizer = module.optimizer_factory(module.parameter_groups())
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 5e-4 and no_decay["weight_decay"] == 0.0  # the optimizer's own decay
    schedule = module.scheduler_factory(optimizer, total_steps=100)
    lrs = []
    for _ in range(5):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs[:3] == pytest.approx([0.05 / 3, 0.1 / 3, 0.05])  # warm-up of 3 steps to optim.lr


def test_logger_and_callbacks_come_from_their_config_groups(make_config, tiny_overrides):
    metrics = train(make_config([*tiny_overrides, "logger=csv", "callbacks.best_checkpoint=null"]))
    run = Path(metrics["log_dir"])
    assert (run / "metrics.csv").is_file() and not list(run.glob("events.out.tfevents*"))
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert "last.ckpt" in checkpoints and not any(name.startswith("best-") for name in checkpoints)
