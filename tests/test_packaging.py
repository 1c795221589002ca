"""The wheel: built from this tree, installed into a fresh environment, it loads with
``import torch`` alone and runs the device.

The fresh environment gets the project environment's packages (torch, numpy, the PJRT
plugin, ...) through a directory of links named by a .pth file, not by reinstalling them
(torch alone is 750 MB); only torch_tpu's own entries are left out, so the package, its
metadata and its entry points come from the wheel. The wheel build reuses the tree's
build/ (setup.py's CMake build then has nothing to do): 10-15 s in all on 2 cores.
"""

import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# torch_tpu's own entries in the project environment (an editable install).
OWN = ("torch_tpu", "torch_tpu-", "__editable__")

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.skipif(
        not (ROOT / "build" / "build.ninja").exists(),
        reason="build/ is not configured (make build): the wheel would compile the extension",
    ),
]


def run(args, **env) -> subprocess.CompletedProcess:
    # Without PYTHONPATH: a tree on it would be seen as torch_tpu installed already.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **env}
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd="/")
    assert out.returncode == 0, f"{args}\n{out.stdout}\n{out.stderr}"
    return out


def build_wheel(tmp_path: pathlib.Path) -> pathlib.Path:
    dist = tmp_path / "dist"
    # setuptools' build and egg-info directories in tmp_path: files that an earlier build
    # left in the tree (egg-info's SOURCES.txt lists every file of a package) would be
    # added to the wheel and hide a package missing from the configuration.
    setuptools_options = ["build", f"--build-base={tmp_path / 'build'}"]
    setuptools_options += ["egg_info", f"--egg-base={tmp_path}"]
    command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    command += ["--no-index", "-w", str(dist), str(ROOT)]
    run(command + [f"-C--build-option={option}" for option in setuptools_options])
    (wheel,) = dist.glob("torch_tpu-*.whl")
    return wheel


def fresh_environment(tmp_path: pathlib.Path) -> pathlib.Path:
    """A venv without pip that sees the project environment's packages but torch_tpu's."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    links = tmp_path / "links"
    links.mkdir()
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.startswith(OWN):
            (links / entry.name).symlink_to(entry)
    fresh_site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    )
    (pathlib.Path(fresh_site.stdout.strip()) / "project-packages.pth").write_text(f"{links}\n")
    return python


CHECK = """
    import importlib.metadata, pathlib, sys
    import torch

    assert "torch_tpu" in sys.modules, "import torch did not load torch_tpu"
    import torch_tpu, torch_tpu.distributed, torch_tpu.tools.model_zoo

    assert torch_tpu.__file__.startswith(sys.prefix), torch_tpu.__file__
    (tpu,) = importlib.metadata.entry_points(group="torch_dynamo_backends", name="tpu")
    assert tpu.load() is torch_tpu._compile.tpu_backend
    assert tpu.dist.locate_file("torch_tpu/__init__.py") == pathlib.Path(torch_tpu.__file__)
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("tpu") is torch_tpu._compile.tpu_backend
    print("RESULT", (torch.ones(2, device="tpu") + 1).cpu().tolist())
"""


def test_wheel_installs_and_runs_in_a_fresh_environment(tmp_path):
    wheel = build_wheel(tmp_path)
    python = fresh_environment(tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    run(pip + ["install", "--no-deps", "--no-index", str(wheel)])
    locks = tmp_path / "locks"
    locks.mkdir()
    out = run([str(python), "-c", textwrap.dedent(CHECK)], TORCH_TPU_LOCK_DIR=str(locks))
    assert "RESULT [2.0, 2.0]" in out.stdout, out.stdout
