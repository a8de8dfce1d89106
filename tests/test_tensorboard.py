"""What a user sees in TensorBoard, read through its HTTP data API from a real server started on a
log folder of two short runs: the HParams table leads with the scheme, both schemes' val/acc are
there, and the Custom Scalars layout holds one chart per question."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from vitpos.train import train


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tensorboard(make_config, tiny_overrides, tmp_path):
    """A TensorBoard server on the runs of two schemes; yields a function that GETs / POSTs JSON."""
    extra = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    for pos in ("none", "rel_bias"):
        train(make_config([f"pos={pos}", *tiny_overrides, *extra]))
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tmp_path / "logs"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def fetch(path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    try:
        for _ in range(120):  # the server needs a few seconds to start and load the runs
            try:
                if len(fetch("/data/runs")) >= 2:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        yield fetch
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_tensorboard_shows_the_scheme_first_and_every_schemes_accuracy(tensorboard):
    experiment = tensorboard("/data/plugin/hparams/experiment", {"experimentName": ""})
    columns = [info["name"] for info in experiment["hparamInfos"]]
    assert columns[:3] == ["pos", "seed", "size"]  # the order TensorBoard shows (differing first, then by name)
    metrics = [info["name"]["tag"] for info in experiment["metricInfos"]]
    assert {"val/acc_best", "test/acc", "val/acc"} <= set(metrics)
    sessions = tensorboard(
        "/data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
            "colParams": [],
            "startIndex": 0,
            "sliceSize": 100,
        },
    )
    schemes = {group["hparams"]["pos"] for group in sessions["sessionGroups"]}
    assert schemes == {"none", "rel_bias"}
    for group in sessions["sessionGroups"]:  # integers as written (a number would show 42.000), the budget
        assert group["hparams"]["seed"].isdigit() and group["hparams"]["batch_size"].isdigit()
        assert group["hparams"]["budget"].endswith((" epochs", " steps"))

    tags = tensorboard("/data/plugin/scalars/tags")
    runs_with_accuracy = [run for run, run_tags in tags.items() if "val/acc" in run_tags]
    assert len(runs_with_accuracy) == 2 and all(
        run.split("/")[0].startswith(("none_", "rel_bias_")) for run in runs_with_accuracy
    )

    layout = tensorboard("/data/plugin/custom_scalars/layout")
    titles = [chart["title"] for category in layout["category"] for chart in category["chart"]]
    assert titles[0] == "validation accuracy (every run)" and "test accuracy" in titles
