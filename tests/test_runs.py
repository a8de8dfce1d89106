"""Which checkpoint a run folder stands for."""

from pathlib import Path

from vitpos.runs import best_checkpoint, find_checkpoints


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
