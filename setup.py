"""Builds torch_tpu._C with CMake against the installed torch (no build isolation)."""

import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _configured_python(build_dir: str) -> str | None:
    """The Python the build folder was configured for, if it was."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
            for line in cache:
                if line.startswith("Python_EXECUTABLE:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import torch

        root = os.path.dirname(os.path.abspath(__file__))
        build_dir = os.path.join(root, "build")
        torch_dir = os.path.dirname(torch.__file__)
        # The environment's own cmake and ninja (pip packages) first: a build without
        # isolation does not put the environment's bin/ on PATH.
        bin_dir = os.path.dirname(sys.executable)
        env = dict(os.environ, PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))
        # A build folder another environment configured (`make build`'s) stays its own:
        # an install from a second environment of the same torch (`make serve-env`)
        # builds in it as it is, rather than pointing it at this one's torch, Python and
        # CMake (which break the first's build once this environment is gone).
        owner = _configured_python(build_dir)
        if owner is None or owner == sys.executable or not os.path.exists(owner):
            configure = ["cmake", "-S", root, "-B", build_dir, "-G", "Ninja"]
            configure += [f"-DTORCH_DIR={torch_dir}", f"-DPython_EXECUTABLE={sys.executable}"]
            subprocess.check_call(configure, env=env)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_C"], env=env)
        built = os.path.join(root, "torch_tpu", os.path.basename(self.get_ext_filename(ext.name)))
        target = self.get_ext_fullpath(ext.name)
        if os.path.abspath(built) != os.path.abspath(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            self.copy_file(built, target)


setup(ext_modules=[CMakeExtension("torch_tpu._C")], cmdclass={"build_ext": CMakeBuild})
