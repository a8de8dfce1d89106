"""Every bad input a user has been seen to try ends in one `error:` line naming the fix (exit 2),
with no traceback and no run folder left behind."""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
import torch

import vitpos
from vitpos import VitposError
from vitpos.data import read_idx
from vitpos.evaluate import main as evaluate_main
from vitpos.train import train

ROOT = Path(__file__).resolve().parents[1]

BAD_TRAINING = [  # (override, words the message must contain)
    ("img_size=0", "img_size=0 must be a positive integer"),
    ("img_size=-8", "img_size=-8 must be a positive integer"),
    ("img_size=abc", "img_size='abc' must be a positive integer"),
    ("img_size=30", "not divisible by the patch size 4"),
    ("data.batch_size=0", "data.batch_size=0 must be a positive integer"),
    ("data.batch_size=-1", "data.batch_size=-1 must be a positive integer"),
    ("optim.lr=-1", "optim.lr=-1 must be a non-negative number"),
    ("data.augment=foo", "data.augment='foo' is not one of"),
    ("+data.rrc_scale=[0,1]", r"data.rrc_scale=\[0, 1\] must be a \[low, high\] pair with 0 < low <= high <= 1"),
    ("+data.rrc_scale=[0.5,1.5]", r"data.rrc_scale=\[0.5, 1.5\] must be a \[low, high\] pair"),
    ("+data.rrc_ratio=[2,1]", r"data.rrc_ratio=\[2, 1\] must be a \[low, high\] pair with 0 < low <= high, e.g."),
    ("+data.rrc_ratio=abc", r"data.rrc_ratio='abc' must be a \[low, high\] pair"),
    ("data.batch_size=4096", "fewer than one batch"),
    ("paths.log_dir=/proc/vitpos-cannot-write-here", "cannot write to paths.log_dir"),
    ("train_img_sizes=[24,0]", "train_img_sizes entry 0 must be a positive integer"),
    ("train_img_sizes=[24,30]", "image size 30x30 is not divisible by the patch size 4"),
    ("train_img_sizes=abc", "train_img_sizes='abc' must be a non-empty list"),
    ("curriculum=[]", "curriculum=.. must list two or more phases"),
    ("curriculum=[[32,1.0]]", "curriculum=.*must list two or more phases .* for one size set img_size"),
    ("curriculum=[16,32]", "curriculum phase 16 must be a pair .size, share or epochs."),
    ("curriculum=[[18,0.5],[32,0.5]]", "image size 18x18 is not divisible by the patch size 4"),
    ("curriculum=[[0,0.5],[32,0.5]]", "curriculum size 0 must be a positive integer"),
    ("curriculum=[[16,0.5],[32,0.3]]", "curriculum shares .0.5, 0.3. sum to 0.8, not 1"),
    ("curriculum=[[16,-0.5],[32,1.5]]", "curriculum shares or epochs .-0.5, 1.5. must be positive numbers"),
    ("curriculum=[[16,10],[32,0.5]]", "mixes shares .decimals, e.g. 0.3. and epochs .integers, e.g. 10."),
    (
        "curriculum=[[24,0.3],[16,0.3],[32,0.4]]",
        "curriculum sizes 24-16-32px must grow phase by phase .24px then 16px.",
    ),
    ("curriculum=[[16,0.5],[24,0.5]]", "the curriculum ends at 24px but img_size is 32px"),
    (
        "curriculum=[[16,1],[32,2]]",
        "curriculum epochs .1, 2. sum to 3, not trainer.max_epochs=100; set trainer.max_epochs=3",
    ),
    (
        "curriculum=[[16,0.01],[32,0.99]] trainer.max_epochs=10",
        "the curriculum's 16px phase gets no epoch of trainer.max_epochs=10",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] trainer.max_epochs=null",
        "a curriculum is planned over trainer.max_epochs, which is None",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] train_img_sizes=[24,32]",
        "curriculum and train_img_sizes .or batch_by_tokens. both choose",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] batch_by_tokens=true",
        "batch_by_tokens=True only matters with train_img_sizes=...; set train_img_sizes, or drop batch_by_tokens",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] curriculum_batch=tokenz",
        "curriculum_batch='tokenz' must be one of fixed, tokens",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] curriculum_batch=tokens data.batch_size=160",
        "fewer than one batch .data.batch_size=160, 640 at the curriculum's first size.",
    ),
    (
        "curriculum=[[16,0.5],[32,0.5]] curriculum_batch=tokens +trainer.reload_dataloaders_every_n_epochs=2",
        "curriculum_batch=tokens rebuilds the training loader every epoch",
    ),
    ("model.compile=fast", "model.compile='fast' must be false, true or one of"),
    ("data.device_resident=yes", "data.device_resident='yes' must be auto, true or false"),
    ("model.drop_rate=1.0", "model.drop_rate=1.0 must be a number with 0 <= drop_rate < 1"),
    ("model.dim=0", "model.dim=0 must be a positive integer"),
    ("model.depth=-1", "model.depth=-1 must be a positive integer"),
    ("model.num_heads=0", "model.num_heads=0 must be a positive integer"),
    ("model.patch_size=0", "model.patch_size=0 must be a positive integer"),
    ("model.mlp_ratio=0", "model.mlp_ratio=0 must be a positive number"),
    ("model.drop_path_rate=1.5", "model.drop_path_rate=1.5 must be a number with 0 <= drop_path_rate < 1"),
    ("model.attn_temperature=cubic", "attn_temperature='cubic' is not one of none, log"),
    ("loss.label_smoothing=1.5", "loss.label_smoothing=1.5 must be below 1"),
    ("scheduler.min_lr_ratio=2", "scheduler.min_lr_ratio=2 must be a number in .0, 1."),
    ("scheduler.warmup_steps=2.5", "scheduler.warmup_steps=2.5 must be a whole number of steps"),
    ("seed=abc", "seed='abc' must be an integer"),
    ("checkpoint_every_n_steps=0", "checkpoint_every_n_steps=0 must be a positive number of optimizer steps"),
    ("trainer.max_epochs=-5", "Trainer: `max_epochs` must be a non-negative integer or -1"),
    ("trainer.max_epochs=1.5", "trainer.max_epochs=1.5 must be an integer"),
    ("trainer.max_steps=2.5", "trainer.max_steps=2.5 must be an integer"),
    ("data.batch_size=true", "data.batch_size=True must be a positive integer"),
    ("run_name=a/b", "run_name='a/b' must be one folder name, without /"),
    ("run_name=..", "run_name='..' must be one folder name"),
    ("pos=rel_bias pos.fuzzy=true", "pos=rel_bias has no continuous coordinates"),
    ("pos=2d_sin pos.fuzzy=maybe", "pos.fuzzy='maybe' must be true or false"),
    ("optim.lr=abc", "optim.lr='abc' must be a non-negative number"),
    ("optim.betas=[2,0.9]", "optim: Invalid beta parameter at index 0: 2"),
    ("check_finite_every=0", "check_finite_every=0 must be a positive number of steps"),
    ("callbacks.best_checkpoint.mode=up", "ModelCheckpoint: `mode` can be"),
    ("loss.mixup_alpha=-1", "loss.mixup_alpha=-1 must be a non-negative number"),
    ("+loss.foo=1", "unknown loss setting.s. loss.foo; the loss takes loss.cutmix_alpha"),
    ("+data.batchsize=10", "SyntheticDataModule has no setting 'batchsize'; it takes num_train, num_test, seed, "),
    ("trainer.fast_dev_run=true", "trainer.fast_dev_run is not supported .* trainer.limit_train_batches=2"),
    ("callbacks.last_checkpoint.every_n_steps=0", "callbacks.last_checkpoint.every_n_steps=0 must be a positive"),
    ("callbacks.best_checkpoint.monitor=val/accuracy", "monitor='val/accuracy' is not a logged metric; use one of"),
    (
        "callbacks.best_checkpoint.monitor=val/loss",
        "mode='max' keeps the worst one; add callbacks.best_checkpoint.mode=min",
    ),
    (
        "+callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping +callbacks.stop.monitor=loss",
        "callbacks.stop.monitor='loss' is not a logged metric; use one of train/loss",
    ),
]


@pytest.mark.parametrize("override, message", BAD_TRAINING, ids=[o for o, _ in BAD_TRAINING])
def test_bad_training_input_is_a_user_error_and_leaves_no_run(override, message, make_config, tiny_overrides, tmp_path):
    with pytest.raises(VitposError, match=message.replace("(", r"\(")):
        train(make_config([*tiny_overrides, *override.split()]))
    assert not (tmp_path / "logs").exists(), "a run that never trained left a folder"


def test_a_run_name_that_reads_as_a_number_is_a_name(make_config, tiny_overrides):
    metrics = train(make_config([*tiny_overrides, "run_name=nan", "test_after_fit=false"]))
    assert Path(metrics["log_dir"]).parent.name == "nan"


BAD_COMPOSITION = [  # (arguments, words of the one error line): Hydra's errors, before Hydra reports them
    (["data=nosuch"], "Could not find 'data/nosuch' Available options in 'data': cifar10 fashion_mnist"),
    (["experiment=nosuch"], "Could not find 'experiment/nosuch'"),
    (["model.nosuch=1"], "Could not override 'model.nosuch'. To append to your config use +model.nosuch=1"),
    (["-m", "pos=none,nosuch"], "Could not find 'pos/nosuch' Available options in 'pos': 1d_learned"),
    (["logger=nosuch"], "Could not find 'logger/nosuch' Available options in 'logger': csv tensorboard"),
    (["callbacks.nosuch=null"], "Could not override 'callbacks.nosuch'"),
]


@pytest.mark.parametrize("args, message", BAD_COMPOSITION, ids=[" ".join(a) for a, _ in BAD_COMPOSITION])
def test_composition_errors_are_one_line(args, message, tmp_path, capsys):
    from vitpos.__main__ import check_composes

    with pytest.raises(SystemExit) as stop:
        check_composes([*args, f"paths.log_dir={tmp_path / 'logs'}"])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "Config search path" not in lines[0] and not (tmp_path / "logs").exists()


def test_a_users_own_config_folder_takes_part_in_the_composition(tmp_path, capsys):
    from vitpos.__main__ import check_composes

    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "mine.yaml").write_text("# @package _global_\nseed: 7\n")
    check_composes([f"--config-dir={tmp_path / 'mine'}", "experiment=mine"])  # Hydra composes it: no error here
    assert capsys.readouterr().err == ""


def test_cli_prints_one_error_line_with_exit_code_2(tmp_path):
    result = forked_cli.run(
        [
            str(ROOT / "train.py"),
            "data=synthetic",
            "model=vit_70k",
            "data.augment=foo",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: data.augment='foo' is not one of none, standard, randaugment, trivialaugment, rrc"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nope"], "error: unknown option '--nope'; use --cpu-smoke, --out DIR or --help"),
        (["--out"], "error: --out needs a folder, e.g. --out $OUT"),
        ([], "error: no CUDA device visible to torch; on a CPU machine use --cpu-smoke"),
    ],
)
def test_gpu_check_refuses_with_one_error_line(args, message):
    if not args and torch.cuda.is_available():
        pytest.skip("a GPU is visible: the check would run")
    env = {**os.environ, "CIFAR10": str(ROOT / "train.py")}  # any existing path passes the data check
    result = subprocess.run(["bash", "scripts/gpu_check.sh", *args], cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 2 and result.stderr.splitlines() == [message] and not result.stdout


@pytest.mark.parametrize(
    "sizes, message", [("img_sizes=[0]", "img_size=0 must be"), ("img_sizes=abc", "img_sizes='abc' must be a list")]
)
def test_evaluate_bad_sizes(sizes, message, capsys, tmp_path):
    assert evaluate_main([f"ckpt={tmp_path}", sizes]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("cut", [3, 20, 100])
def test_truncated_idx_file_names_the_file(cut, tmp_path):
    whole = bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in (4, 28, 28)) + bytes(4 * 784)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(whole)[:cut] if cut < 50 else gzip.compress(whole[:cut]))
    with pytest.raises(VitposError, match=f"cannot read {path}: truncated or corrupt"):
        read_idx(path)


@pytest.mark.parametrize("img_size", [0, -8, (32, 0), "abc", 32.5])
def test_create_model_refuses_a_size_that_is_no_grid(img_size):
    with pytest.raises(VitposError, match="must be a positive integer"):
        vitpos.create_model("none", img_size=img_size)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"_target_": "vitpos.data.ImageFolderDataModule", "root": None}, "data=image_folder needs data.root="),
        ({"_target_": "vitpos.data.SyntheticDataModule", "augment": "foo"}, "data.augment='foo' is not one of"),
    ],
)
def test_evaluate_reports_a_bad_data_config_of_the_checkpoint_as_one_line(data, message, capsys, tmp_path):
    """The CLIs build the datamodule through the same unwrapper as training: the constructor's
    own message, not Hydra's InstantiationException."""
    import torch

    model = vitpos.create_model("none", img_size=16, num_classes=4, in_chans=3, dim=32, depth=1, num_heads=2)
    path = tmp_path / "best.ckpt"
    torch.save(
        {
            "hyper_parameters": {"model": model.config, "data": data},
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        },
        path,
    )
    assert evaluate_main([f"ckpt={path}", "img_sizes=[16]", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_evaluate_reads_data_settings_over_the_recorded_ones_and_refuses_unknown_ones(capsys, tmp_path):
    """`data.<key>=` replaces one setting of the data config the checkpoint records (as train.py's
    data.root= does); a setting its data module does not take is one error line naming those it does."""
    import csv

    import torch

    model = vitpos.create_model("none", img_size=16, num_classes=4, in_chans=3, dim=32, depth=1, num_heads=2)
    path = tmp_path / "best.ckpt"
    data = {
        "_target_": "vitpos.data.SyntheticDataModule",
        "num_train": 64,
        "num_test": 24,
        "val_size": 8,
    }
    torch.save(
        {
            "hyper_parameters": {"model": model.config, "data": data},
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        },
        path,
    )
    out = tmp_path / "out"
    # 56 training images, fewer than evaluate's default batch of 256, which only a training run must fill
    assert evaluate_main([f"ckpt={path}", "img_sizes=[16]", f"out={out}", "data.num_test=40"]) == 0
    with open(out / "resolution.csv", newline="") as f:
        assert [row["images"] for row in csv.DictReader(f)] == ["40"]  # the whole test split, as overridden
    assert evaluate_main([f"ckpt={path}", "img_sizes=[16]", f"out={tmp_path / 'again'}", "data.num_tst=40"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("error: unknown data setting(s) data.num_tst; SyntheticDataModule takes data.num_train, ")


def test_a_checkpoint_recording_a_setting_no_longer_taken_names_the_data_option(tmp_path, capsys):
    """An older vitpos recorded settings this one dropped (e.g. data.num_workers): one line naming
    data=<name>, which reads the images with today's config; that option then evaluates it."""
    model = vitpos.create_model("none", img_size=16, num_classes=4, in_chans=3, dim=32, depth=1, num_heads=2)
    data = {"_target_": "vitpos.data.SyntheticDataModule", "num_train": 64, "num_test": 24, "num_workers": 4}
    path = tmp_path / "old.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"hyper_parameters": {"model": model.config, "data": data}, "state_dict": state}, path)
    assert evaluate_main([f"ckpt={path}", "img_sizes=[16]", f"out={tmp_path / 'refused'}"]) == 2
    assert capsys.readouterr().err == (
        f"error: {path} records data.num_workers, which this vitpos no longer takes (an older version wrote it); "
        "pass data=synthetic to read its images with today's configs/data/synthetic.yaml\n"
    )
    assert not (tmp_path / "refused").exists()
    fixed = [f"ckpt={path}", "img_sizes=[16]", f"out={tmp_path / 'out'}", "data=synthetic", "limit=8"]
    assert evaluate_main(fixed) == 0


@pytest.mark.parametrize("option", ["ckpt=", "limit="])
def test_an_option_without_a_value_is_refused_not_read_as_unset(option, capsys, tmp_path):
    assert evaluate_main([f"ckpt={tmp_path}", "img_sizes=[32]", option]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {option} has no value; give one, or {option}null for none; see --help\n"


@pytest.mark.parametrize("command", ["evaluate", "figures"])
@pytest.mark.parametrize("out", ["a_file", "a_file/sub", "/proc/vitpos_out"])
def test_an_out_that_cannot_be_a_folder_is_one_line_before_any_work(command, out, capsys, tmp_path, monkeypatch):
    from vitpos.figures import main as figures_main

    monkeypatch.chdir(tmp_path)
    Path("a_file").write_text("x")
    main = evaluate_main if command == "evaluate" else figures_main
    assert main([f"ckpt={tmp_path}", f"out={out}"]) == 2  # refused before the (absent) checkpoint is looked for
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write to out= ({out}: ") and err.count("\n") == 1
    assert err.endswith("pass a writable folder, e.g. out=logs/mine\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"] and Path("a_file").read_text() == "x"


def test_an_out_that_can_be_made_is_not_left_behind_when_the_command_fails(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert evaluate_main([f"ckpt={tmp_path / 'absent'}", "out=new/a/b"]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not Path("new").exists()
