"""The job summary finds a job's GPUs by the device Slurm gave it, not by NVML's order: on a real node
(tests/recorded/captured/nvidia-smi-q, driver 535.154.05, 8 GPUs) /dev/nvidia0 is the GPU NVML calls 3.
The node's kiln_gpu_device_info (from nvidia-smi -q) joins Slurm's minor number to dcgm-exporter's UUID;
the query is evaluated by Prometheus' own engine (promtool test rules) on series of that node."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from checks import gpu, job_summary
from checks.parsers import nvidia_smi_q
from tests.conftest import REPO

CAPTURE = REPO / "tests" / "recorded" / "captured" / "nvidia-smi-q" / "gpud-nvidia-smi-query.535.154.05.out.0.valid"
PROMTOOL = shutil.which("promtool")


def _devices() -> list[tuple[str, int, str]]:
    return nvidia_smi_q.devices(nvidia_smi_q.read(CAPTURE.read_text()))


def test_minor_numbers_and_nvml_order_differ_on_the_recorded_node():
    devices = _devices()
    assert len(devices) == 8
    by_nvml_index = sorted(devices)  # NVML numbers GPUs in PCI bus order
    assert [minor for _, minor, _ in by_nvml_index[:4]] == [3, 2, 1, 0]
    text = gpu.device_exposition(CAPTURE.read_text())
    assert ('kiln_gpu_device_info{minor="0",device="nvidia0",UUID="GPU-025f6884-1162-3032-9aab-14e0d5622783",'
            'pci_bus_id="00000000:61:00.0"} 1') in text
    if PROMTOOL:
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package; .ci/run installs it)")
def test_a_jobs_gpus_are_found_by_uuid_through_the_device_map(tmp_path):
    """Slurm gave the job IDX 0-1 (/dev/nvidia0, /dev/nvidia1) on gpu01: their busy series are averaged,
    not those of NVML's GPUs 0 and 1 (minors 3 and 2)."""
    devices = sorted(_devices())
    series = []
    for nvml_index, (bus, minor, uuid) in enumerate(devices):
        busy = 90 if minor in (0, 1) else 10  # only the job's GPUs are busy
        series.append({"series": f'DCGM_FI_DEV_GPU_UTIL{{node="gpu01",gpu="{nvml_index}",UUID="{uuid}",'
                                 f'device="nvidia{nvml_index}"}}', "values": f"{busy}x10"})
        series.append({"series": f'kiln_gpu_device_info{{node="gpu01",minor="{minor}",device="nvidia{minor}",'
                                 f'UUID="{uuid}",pci_bus_id="{bus}"}}', "values": "1x10"})
    expr = job_summary.query("DCGM_FI_DEV_GPU_UTIL", {"gpu01": [0, 1]}, 300)
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 90}]}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(tests))
    out = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "t.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # the old reading (dcgm-exporter's gpu label as Slurm's index) would have averaged the idle GPUs 0 and 1
    old = 'avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL{node="gpu01",gpu=~"0|1"}[300s]))'
    tests["tests"][0]["promql_expr_test"][0]["expr"] = old
    (tmp_path / "t.yml").write_text(yaml.safe_dump(tests))
    out = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "t.yml")], capture_output=True, text=True)
    assert out.returncode != 0 and "got: {} 1E+01" in out.stdout + out.stderr


def test_kiln_usage_says_what_measured_each_jobs_useful_hours():
    from kiln.usage import sacct
    engine = job_summary.summary(40.0, 10.0, {"gpu01": [0]}, 3600, "gr_engine_active")
    assert sacct.admin_util_by(engine) == "gr_engine_active" and sacct.admin_util(engine) == 40.0
    assert sacct.admin_util_by("kiln:gpu_util=63.5,gpus=2,seconds=600") == "gpu_util"  # before the word
    assert sacct.admin_util_by("kiln:gpu_util=63.5,util_by=anything") is None
    assert sacct.admin_util_by("not kiln's") is None


def test_the_node_check_writes_the_device_map_once_a_boot(tmp_path):
    """kiln-node-check writes kiln-gpu-devices.prom when it is missing or older than the boot, from one
    nvidia-smi -q; a run that finds it fresh asks nothing; output cut short writes nothing."""
    import os

    from checks import node_local
    from checks.node import Node, Result
    asked = []

    def run(command: str) -> Result:
        asked.append(command)
        return Result(0, CAPTURE.read_text())
    node_local.gpu_devices(Node("gpu01", run), str(tmp_path))
    path = tmp_path / gpu.DEVICE_FILE
    assert asked == ["nvidia-smi -q"] and 'minor="0",device="nvidia0"' in path.read_text()
    node_local.gpu_devices(Node("gpu01", run), str(tmp_path))
    assert len(asked) == 1  # fresh: not asked again
    os.utime(path, (0, 0))  # written before this boot
    cut = Node("gpu01", lambda c: Result(0, CAPTURE.read_text()[:4000]))
    node_local.gpu_devices(cut, str(tmp_path))
    assert os.stat(path).st_mtime == 0  # cut short: the old map is left, not replaced by a partial one
    node_local.gpu_devices(Node("gpu01", run), str(tmp_path))
    assert len(asked) == 2 and os.stat(path).st_mtime > 0
