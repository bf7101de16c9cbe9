"""The wheel, as a user has it: installed into a fresh virtualenv with `pip install
--no-index` (no build, no compiler, no Rust), and used from that venv alone, with a PATH
that has neither cargo nor the source tree's builds: the embedded demo job run by the
installed `coordinator`, `status` and `verify` on its output, the output read by the
installed `probeflow`, one version everywhere.

`tests/run` builds the wheel (`release/wheel --binaries`, from the test builds) and
names it in PROBEFLOW_WHEEL, with the directory of its dependencies' wheels in
PROBEFLOW_WHEELHOUSE.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

WHEEL = os.environ.get("PROBEFLOW_WHEEL")
WHEELHOUSE = os.environ.get("PROBEFLOW_WHEELHOUSE")

pytestmark = pytest.mark.skipif(
    not (WHEEL and WHEELHOUSE),
    reason="tests/run sets PROBEFLOW_WHEEL and PROBEFLOW_WHEELHOUSE (release/wheel builds it)",
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                    "--disable-pip-version-check", "--find-links", WHEELHOUSE, WHEEL], check=True)
    return venv


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a user of the wheel: the venv's bin alone on PATH (no cargo,
    rustc or C compiler), no variable pointing at Rust or the source tree's builds."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARGO", "RUSTUP", "PROBEFLOW_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = str(venv / "bin")
    env["VIRTUAL_ENV"] = str(venv)
    return env


def sh(venv: Path, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), cwd=cwd, env=user_env(venv), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def wheel_version() -> str:
    return Path(WHEEL).name.split("-")[1]


def test_the_wheel_is_one_abi3_wheel_with_both_executables():
    name = Path(WHEEL).name
    assert re.fullmatch(r"probeflow-[0-9.]+-cp311-abi3-manylinux_2_\d+_x86_64\.whl", name), name
    with zipfile.ZipFile(WHEEL) as z:
        names = set(z.namelist())
        scripts = {n.rsplit("/", 1)[1] for n in names if "/scripts/" in n and ".data/" in n}
        assert scripts == {"coordinator", "worker"}, scripts
        assert "probeflow/_native.abi3.so" in names
        # The executables are the programs (ELF), not Python launchers.
        for n in names:
            if n.endswith(("/scripts/coordinator", "/scripts/worker")):
                assert z.read(n)[:4] == b"\x7fELF", n


def test_no_rust_and_the_installed_programs_on_path(venv, tmp_path):
    for tool in ("cargo", "rustc", "cc", "gcc", "maturin"):
        found = sh(venv, "/bin/sh", "-c", f"command -v {tool} || true", cwd=tmp_path).stdout.strip()
        assert not found, f"{tool} is on the user's PATH: {found}"
    for program in ("coordinator", "worker"):
        where = sh(venv, "/bin/sh", "-c", f"command -v {program}", cwd=tmp_path).stdout.strip()
        assert where == str(venv / "bin" / program), where
        assert Path(where).read_bytes()[:4] == b"\x7fELF", f"{where} is not the program itself"


def test_one_version_everywhere(venv, tmp_path):
    version = wheel_version()
    assert sh(venv, "coordinator", "--version", cwd=tmp_path).stdout.split() == ["coordinator", version]
    assert sh(venv, "worker", "--version", cwd=tmp_path).stdout.split() == ["worker", version]
    got = sh(venv, "python", "-c", "import probeflow; print(probeflow.__version__)", cwd=tmp_path)
    assert got.stdout.strip() == version


def test_the_demo_job_runs_and_reads_from_the_installed_wheel(venv, tmp_path):
    """The README's run command, as a user of the wheel types it: the embedded demo job
    (2M generated measurements, local mode) into ./out/demo; then status, verify, and
    batches from the installed reader."""
    done = sh(venv, "coordinator", "run", cwd=tmp_path)
    assert "out/demo: done." in done.stdout, done.stdout + done.stderr[-2000:]
    out = tmp_path / "out" / "demo"
    record = json.loads((out / "_SUCCESS").read_text())
    assert record["kind"] == "probe_rows" and record["release"] == wheel_version()
    assert "finished (probe_rows job)" in sh(venv, "coordinator", "status", str(out), cwd=tmp_path).stdout
    verified = sh(venv, "coordinator", "verify", str(out), cwd=tmp_path).stdout
    assert "probe_rows output" in verified and "match the manifest" in verified, verified
    read = sh(venv, "python", "-c", """
import json, sys
import numpy as np
import probeflow
with probeflow.Dataset(sys.argv[1], "train", seq_len=256, batch_size=8, shard_index=0,
                       shard_count=1, seed=3) as ds:
    batch = next(ds)
    print(json.dumps({"rows": ds.num_rows, "shape": list(batch["inputs"].shape),
                      "tokens": int(np.count_nonzero(batch["inputs"]))}))
""", str(out), cwd=tmp_path)
    got = json.loads(read.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert got["rows"] == sum(s["rows"] for s in manifest["shards"] if s["split"] == "train") > 0
    assert got["shape"] == [8, 256] and got["tokens"] > 0
