"""The command-line tools: ``--help`` answers at once (the scripts parse their arguments
before importing torch, which takes seconds) and every option says what it does."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Scripts are the files with a main guard; the others are modules they share
# (benchmarks/models.py).
SCRIPTS = sorted(
    str(path.relative_to(ROOT))
    for folder in ("benchmarks", "examples", "tools")
    for path in (ROOT / folder).glob("*.py")
    if '__name__ == "__main__"' in path.read_text()
)
# Run with `python -m`: importing the torch_tpu package imports torch, whatever they do.
MODULES = [
    "torch_tpu.tools.model_zoo",
    "torch_tpu.tools.op_coverage",
    "torch_tpu.tools.pytorch_suites",
    "torch_tpu.distributed.environment",
]

# Runs a script or module with --help; prints the options without help text and whether
# torch was imported.
DRIVER = """
import argparse, runpy, sys

parsers = []
parse_args = argparse.ArgumentParser.parse_args


def capture(self, *args, **kwargs):
    parsers.append(self)
    return parse_args(self, *args, **kwargs)


argparse.ArgumentParser.parse_args = capture
target = sys.argv[1]
sys.argv = [target, "--help"]
try:
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
except SystemExit as e:
    assert e.code == 0, e.code
(parser,) = parsers
print("WITHOUT HELP", [a.option_strings for a in parser._actions if not a.help])
print("TORCH IMPORTED", "torch" in sys.modules)
"""


def help_of(target: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help_is_immediate_and_complete(script):
    out = help_of(script)
    assert "WITHOUT HELP []" in out, out
    assert "TORCH IMPORTED False" in out, out


@pytest.mark.parametrize("module", MODULES)
def test_module_options_have_help(module):
    out = help_of(module)
    assert "WITHOUT HELP []" in out, out
