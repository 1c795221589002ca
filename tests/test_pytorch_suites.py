"""torch_tpu.tools.pytorch_suites: PyTorch's device-generic test files run unedited on tpu
(instantiated as ...TPU classes, each xdist worker with its own device lock), the tests that
cannot pass by design skipped with their reason, and the report."""

import json
import re
import subprocess
import sys

from torch_tpu.tools import pytorch_suites

# A device-generic file written as PyTorch's are.
SUITE = """
import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests, onlyCPU, onlyCUDA,
)
from torch.testing._internal.common_utils import TestCase, run_tests, skipIfMps


class TestToy(TestCase):
    def test_add(self, device):
        self.assertEqual(torch.ones(3, device=device) + 1, torch.full((3,), 2.0))

    def test_wrong(self, device):  # on every device
        self.assertEqual(torch.ones(3, device=device).sum().item(), 4.0)

    def test_on_the_host(self, device):  # fails on tpu only
        self.assertEqual(torch.ones(1, device=device).device.type, "cpu")

    def test_complex32_view(self, device):
        torch.ones(2, dtype=torch.complex32, device=device)

    def test_device_type(self, device):
        self.assertEqual(self.device_type, "tpu")

    # Twins whose CPU instances share a name, as in test_nn: the CPU re-run still collects.
    @onlyCPU
    def test_twin_cpu(self, device):
        pass

    @onlyCUDA
    def test_twin(self, device):
        pass

    # Expects the index check at the call: runs in the debug eager mode (LAUNCH_BLOCKING).
    def test_trivial_fancy_out_of_bounds(self, device):
        index = torch.ones(3, dtype=torch.int64, device=device)
        index[-1] = 10
        self.assertRaises(IndexError, torch.zeros(5, device=device).__getitem__, index)


instantiate_device_type_tests(TestToy, globals())


class TestOffCpu(TestCase):  # no CPU class: the CPU re-run has nothing to run for it
    def test_fails_off_the_cpu(self, device):
        self.assertEqual(device, "cpu")


instantiate_device_type_tests(TestOffCpu, globals(), except_for="cpu")

if __name__ == "__main__":
    run_tests()
"""


def test_cause_of_generalises_numbers_and_names():
    cause = pytorch_suites.cause_of(
        "RuntimeError: shape '[2, 3]' is invalid for input of size 7\n…"
    )
    assert cause == "RuntimeError: shape '…' is invalid for input of size N"


def test_a_device_generic_file_runs_on_tpu(tmp_path):
    tests = tmp_path / "suites"
    tests.mkdir()
    (tests / "test_toy.py").write_text(SUITE)
    report = tmp_path / "report.md"
    out = subprocess.run(
        [sys.executable, "-m", "torch_tpu.tools.pytorch_suites", "--tests", str(tests),
         "--workers", "1", "--timeout", "300", "--report", str(report), "--cpu-baseline",
         "--outcomes", str(tmp_path / "outcomes.jsonl")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "test_toy.py: 3 passed, 2 failed, 0 errors, 1 failing on the CPU too, 3 skipped"
        in out.stdout
    )
    text = report.read_text()
    assert "| test_toy.py | 3 | 2 | 0 | 1 | 3 |" in text
    assert "**3 of 5 tests that ran passed (60.0%)**, not counting 1 that fail on the CPU" in text
    assert "| 2 | `AssertionError: String comparison failed: '…' != '…'` |" in text
    assert "test_toy.py::test_on_the_host_tpu" in text  # the failure's example
    assert re.search(r"\| \d+ \(\d+\.\d\dx\) \| completed \|", text), text  # against the CPU
    outcomes = [json.loads(line) for line in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    add = next(o for o in outcomes if o["test"].endswith("test_add_tpu"))
    assert add["file"] == "test_toy.py" and add["outcome"] == "passed"
    assert add["compiles"] >= 0 and add["compile_seconds"] >= 0  # each test's compiles


def test_op_db_decorators_apply_to_renamed_classes():
    # PyTorch's own skips and tolerances name TestBinaryUfuncsDevice, the older files'
    # class is TestBinaryUfuncs.
    from torch.testing._internal.opinfo.core import DecorateInfo

    from torch_tpu.tools import _pytorch_suite_plugin

    _pytorch_suite_plugin._install_renamed_helpers()
    info = DecorateInfo(lambda f: f, "TestBinaryUfuncsDevice", "test_x")
    assert info.is_active("TestBinaryUfuncs", "test_x", "tpu", None, {})
    assert not info.is_active("TestUnaryUfuncs", "test_x", "tpu", None, {})


def test_a_missing_folder_is_reported(tmp_path):
    assert pytorch_suites.main(["--tests", str(tmp_path / "none")]) == 2
