"""Wheels for a machine without the package index: downloaded here, installed there.

Standard library only (it runs on a device machine's bare ``python3``).  The one place that
names a wheel file, downloads wheels at a lock's versions and installs them there:
:mod:`dreamer_parity.accel.wheelsets` (the candidate's wheels, ``make accel-wheels``),
:mod:`dreamer_parity.device_reference` (the reference's, ``make tpu-reference``) and
``benchmarks/device_env.sh`` use it.  pip does the work; its last line is the error.

Command line (what ``benchmarks/device_env.sh`` runs on the device machine)::

    python3 -m dreamer_parity.wheels install --target DIR WHEEL...
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from dreamer_parity.provenance import normalise

__all__ = ["wheel_name", "download", "install", "PLATFORMS"]

#: pip's platform tags for CPython 3.11 on x86-64 Linux, the oldest glibc first (pip
#: prefers the earlier tag); pure-Python wheels (``any``) always qualify.
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_26_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")
_PIP = ("-m", "pip")


def wheel_name(path) -> tuple[str, str]:
    """``(normalised distribution name, version)`` from a wheel's file name (PEP 427).

    Raises:
      ValueError: naming the file, when it is not ``name-version-...-...-....whl``.
    """
    name = Path(path).name
    parts = name.split("-")
    if not name.endswith(".whl") or len(parts) < 5:
        raise ValueError(f"{name}: not a wheel file name")
    return normalise(parts[0]), parts[1]


def _pip(args: list[str], what: str) -> None:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    r = subprocess.run([sys.executable, *_PIP, *args, "--disable-pip-version-check"],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed: "
                           f"{(r.stderr.strip().splitlines() or ['(no output)'])[-1]}")


def download(pins: dict[str, str], dest, python_version: str = "3.11") -> list[Path]:
    """Download one wheel of each ``{name: version}`` of ``pins`` into ``dest`` (no
    dependencies; CPython ``python_version`` ("3.11" or "3.12"), x86-64 Linux,
    :data:`PLATFORMS`), removing the other wheels there.  Returns the wheels of ``dest``, sorted.

    Raises:
      RuntimeError: pip's last line, or a package without exactly one wheel.
    """
    want = {normalise(n): v for n, v in pins.items()}
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        name, version = wheel_name(old)
        if want.get(name) != version:
            old.unlink()
    if python_version not in ("3.11", "3.12"):
        raise ValueError(f"python_version must be 3.11 or 3.12, got {python_version!r}")
    cp = "cp" + python_version.replace(".", "")
    args = ["download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
            python_version, "--implementation", "cp", "--abi", cp, "--abi", "abi3", "--abi", "none",
            "-d", str(dest)]
    for tag in PLATFORMS:
        args += ["--platform", tag]
    _pip(args + [f"{n}=={v}" for n, v in sorted(want.items())], "pip download")
    found: dict[str, list[Path]] = {}
    for w in dest.glob("*.whl"):
        found.setdefault(wheel_name(w)[0], []).append(w)
    bad = [n for n in sorted(want) if len(found.get(n, [])) != 1]
    if bad:
        raise RuntimeError(f"not exactly one wheel for {', '.join(bad)}")
    return sorted(dest.glob("*.whl"))


def install(files, target) -> str:
    """Install the wheel ``files`` into the folder ``target`` (``pip install --no-index
    --no-deps --upgrade --target``, isolated from pip's configuration), unless a stamp
    there says this set of wheels is installed already (by an earlier call).  Returns what
    was done, one line.

    Raises:
      RuntimeError: pip's last line.
    """
    files = sorted(Path(f) for f in files)
    if not files:
        return "no wheels"
    target = Path(target)
    stamp = target / (".installed-" + hashlib.sha256(
        "\n".join(f.name for f in files).encode()).hexdigest()[:16])
    if stamp.exists():
        return f"{len(files)} wheels already in {target}"
    _pip(["install", "--isolated", "-q", "--no-index", "--no-deps", "--no-compile",
          "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, files)],
         f"pip install of {len(files)} wheel(s)")
    stamp.write_text("\n".join(f.name for f in files) + "\n")
    return f"{len(files)} wheels installed into {target}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.wheels",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("install", help="install wheel files into a folder")
    ins.add_argument("--target", required=True)
    ins.add_argument("wheels", nargs="+")
    a = ap.parse_args(argv)
    try:
        print(install(a.wheels, a.target), file=sys.stderr)
    except RuntimeError as e:
        print(f"wheels: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
