"""Which checkpoint a run folder stands for, and how a run's scheme is named."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from vitpos.compare.grouping import group_runs, latest_per_seed
from vitpos.compare.logs import run_folders, summarize
from vitpos.pos import list_pos
from vitpos.runs import best_checkpoint, find_checkpoints, run_folder_label, scheme_label
from vitpos.train import train


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_the_latest_best_checkpoint_wins_over_one_left_behind(tmp_path):
    # an interrupted run can leave an earlier best file; as text, epoch9 > epoch14 and epoch12 < epoch14
    checkpoints = tmp_path / "run" / "version_0" / "checkpoints"
    for name in ("best-epoch9-step3510", "best-epoch12-step4563", "best-epoch14-step5265", "last"):
        touch(checkpoints / f"{name}.ckpt")
    assert best_checkpoint(checkpoints).name == "best-epoch14-step5265.ckpt"
    assert find_checkpoints(tmp_path) == [checkpoints / "best-epoch14-step5265.ckpt"]


def test_a_run_without_best_checkpoint_stands_for_its_last(tmp_path):
    last = touch(tmp_path / "a" / "version_0" / "checkpoints" / "last.ckpt")
    best = touch(tmp_path / "b" / "version_0" / "checkpoints" / "best-epoch0-step10.ckpt")
    assert find_checkpoints(tmp_path) == [last, best]


@pytest.mark.parametrize("name", list_pos())
def test_a_scheme_with_its_yaml_settings_is_labelled_by_its_name_alone(name, make_config):
    pos = make_config([f"pos={name}"]).pos
    assert scheme_label(pos) == name and run_folder_label(pos) == name


def test_settings_away_from_the_yaml_name_the_variant_and_fuzzy_comes_last(make_config):
    pos = make_config(["pos=2d_sin", "pos.temperature=100", "+pos.ref_grid=[4,4]", "pos.fuzzy=true"]).pos
    assert scheme_label(pos) == "2d_sin+ref_grid=[4,4]+temperature=100+fuzzy"
    assert run_folder_label(pos) == "2d_sin_ref_grid-4-4_temperature-100_fuzzy"
    assert scheme_label(make_config(["pos=2d_sin", "pos.temperature=10000"]).pos) == "2d_sin"  # 10000 == 10000.0


def test_runs_of_one_scheme_with_other_settings_get_their_own_folders_and_rows(make_config, tiny_overrides, tmp_path):
    """Same scheme and seed, another argument: its own run folder, never a version of the other's,
    and its own row in vitpos.compare, never averaged with it or taken for a rerun of it."""
    for extra in ([], ["pos.padding_mode=circular"]):
        train(make_config([*tiny_overrides, "pos=cpe", "seed=0", *extra]))
    folders = sorted(version.parent.name for version in (tmp_path / "logs").rglob("version_*"))
    assert folders == ["cpe_padding_mode-circular_synthetic_32px_seed0", "cpe_synthetic_32px_seed0"]
    rows = [summarize(run, tmp_path / "logs") for run in run_folders(tmp_path / "logs")]
    kept, earlier = latest_per_seed(rows)
    assert sorted(row["pos"] for row in kept) == ["cpe", "cpe+padding_mode=circular"] and earlier == []
    assert sorted(row["n"] for row in group_runs(kept)) == [1, 1]
    # its fine-tune states the checkpoint's setting, which the command line did not repeat
    circular = tmp_path / "logs" / "cpe_padding_mode-circular_synthetic_32px_seed0"
    train(make_config([*tiny_overrides, "pos=cpe", "seed=0", "img_size=48", f"finetune_from={circular}"]))
    (finetuned,) = (tmp_path / "logs").glob("cpe_padding_mode-circular_synthetic_48px_from_32px_seed0/version_0")
    assert OmegaConf.load(finetuned / "config.yaml").pos.padding_mode == "circular"
