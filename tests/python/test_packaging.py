"""`pip install .` (pyproject.toml, scikit-build-core): the wheel builds from the checkout,
installs into a fresh venv, imports from outside the checkout and generates the same tokens
as the development build. Objects come from ccache when dev.sh's build/ already compiled them
(docs/packaging.md), so this costs a link and pip's own work, not a second build."""
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import numpy as np

from onnx_light.demo import encode
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]

GENERATE = """
import sys, numpy as np, onnx_light
from onnx_light.demo import encode
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime
config = TinyDecoderConfig()
context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
feeds = {"input_ids": np.array([encode("pip install .")], np.int64), **empty_cache(config)}
out = runtime.generate(build_tiny_decoder(config=config), context, feeds,
                       runtime.GenerationOptions(max_new_tokens=12))
print(onnx_light.__file__)
print(np.from_dlpack(out)[0].tolist())
"""


def _build_env():
    env = dict(os.environ, CCACHE_BASEDIR=str(ROOT), CCACHE_NOHASHDIR="1",
               CCACHE_SLOPPINESS="pch_defines,time_macros")
    env.pop("PYTHONPATH", None)
    if shutil.which("ccache"):
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
    return env


def _expected_tokens():
    config = TinyDecoderConfig()
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    feeds = {"input_ids": np.array([encode("pip install .")], np.int64), **empty_cache(config)}
    out = runtime.generate(build_tiny_decoder(config=config), context, feeds,
                           runtime.GenerationOptions(max_new_tokens=12))
    return np.from_dlpack(out)[0].tolist()


def test_pip_wheel_installs_into_a_fresh_venv_and_generates_outside_the_checkout(tmp_path):
    env = _build_env()
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", "-w", str(dist), str(ROOT)],
                   env=env, check=True, timeout=3000)
    (wheel,) = dist.glob("onnx_light-0.1.0-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("onnx_light/onnx_py/_onnxpykernels") and n.endswith(".so")
               for n in names), names
    assert "onnx_light/models/tiny_decoder.py" in names
    # Only the Python package: no C++ headers, libraries or caches leak into the wheel.
    assert [n for n in names if not n.startswith(("onnx_light/", "onnx_light-0.1.0"))] == []
    assert not [n for n in names if "__pycache__" in n or n.endswith((".a", ".h"))]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], env=env, check=True, timeout=1200)
    run = subprocess.run([str(python), "-c", GENERATE], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    location, tokens = run.stdout.strip().splitlines()
    assert pathlib.Path(location).is_relative_to(venv), location
    assert eval(tokens) == _expected_tokens()  # noqa: S307 - a list printed by the child
    console = subprocess.run([str(venv / "bin" / "onnx-light"), "--help"], cwd=tmp_path,
                             capture_output=True, text=True, check=True)
    assert "prepare" in console.stdout
