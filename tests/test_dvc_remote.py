"""DVC set-up: analytics off, default remote ``store`` beside the checkout, push/pull round trip.

Everything runs in clones under tmp_path with the main venv's ``dvc``; a clone at
``tmp_path/a`` resolves the committed remote ``../../dreamer-parity-store`` (relative to
its ``.dvc/``) to ``tmp_path/dreamer-parity-store``, so nothing is written beside the
real checkout.
"""

import configparser
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DVC = REPO / ".venv" / "bin" / "dvc"

pytestmark = pytest.mark.skipif(not DVC.exists(), reason="no .venv/bin/dvc: run `make setup`")

ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_TERMINAL_PROMPT": "0"}
GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.invalid",
          "-c", "commit.gpgsign=false"]


def sh(*cmd, cwd):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_project_config():
    """The committed config: analytics off, default remote ``store`` beside the checkout."""
    cfg = configparser.ConfigParser()
    cfg.read_string((REPO / ".dvc" / "config").read_text())
    assert cfg["core"]["analytics"] == "false"
    assert cfg["core"]["remote"] == "store"
    assert cfg['\'remote "store"\'']["url"] == "../../dreamer-parity-store"
    # DVC resolves it against .dvc/, i.e. to a directory beside the checkout.
    listing = sh(DVC, "config", "--list", "--project", cwd=REPO).split()
    assert f"remote.store.url={REPO.parent / 'dreamer-parity-store'}" in listing
    assert "core.analytics=false" in listing and "core.remote=store" in listing


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """Clone ``a`` of the repository with a tiny tracked file pushed to two remotes.

    Returns ``(root, payload bytes, override remote path)``: pushed once to the
    committed default remote and once, through a ``--local`` override of ``store``, to
    ``root/override-store``.
    """
    root = tmp_path_factory.mktemp("dvcremote")
    a = root / "a"
    sh("git", "clone", "-q", REPO, a, cwd=root)
    payload = bytes(range(256)) * 37 + b"dreamer-parity\n"
    (a / "data" / "tiny").mkdir(parents=True, exist_ok=True)
    (a / "data" / "tiny" / "blob.bin").write_bytes(payload)
    sh(DVC, "add", "data/tiny/blob.bin", cwd=a)
    sh("git", "add", "data/tiny/blob.bin.dvc", "data/tiny/.gitignore", cwd=a)
    sh("git", *GIT_ID, "commit", "-q", "-m", "tiny tracked file", cwd=a)
    sh(DVC, "push", "data/tiny/blob.bin.dvc", cwd=a)         # committed default remote
    other = root / "override-store"
    sh(DVC, "remote", "modify", "--local", "store", "url", other, cwd=a)
    sh(DVC, "push", "-r", "store", "data/tiny/blob.bin.dvc", cwd=a)       # --local override
    return root, payload, other


def _md5_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "files" / "md5").rglob("*") if p.is_file())


def test_default_remote_is_beside_the_clone(pushed):
    root, payload, _ = pushed
    store = root / "dreamer-parity-store"
    files = _md5_files(store)
    assert len(files) == 1 and files[0].read_bytes() == payload
    b = root / "b"
    sh("git", "clone", "-q", root / "a", b, cwd=root)
    assert not (b / "data" / "tiny" / "blob.bin").exists()
    sh(DVC, "pull", "data/tiny/blob.bin.dvc", cwd=b)
    assert (b / "data" / "tiny" / "blob.bin").read_bytes() == payload


def test_local_override_round_trip(pushed):
    root, payload, other = pushed
    assert [p.read_bytes() for p in _md5_files(other)] == [payload]
    c = root / "c"
    sh("git", "clone", "-q", root / "a", c, cwd=root)
    sh(DVC, "remote", "modify", "--local", "store", "url", other, cwd=c)
    default = root / "dreamer-parity-store"
    hidden = root / "hidden-default-store"
    default.rename(hidden)                                   # only the override can serve it
    try:
        sh(DVC, "pull", "-r", "store", "data/tiny/blob.bin.dvc", cwd=c)
        assert not default.exists()
    finally:
        hidden.rename(default)
    assert (c / "data" / "tiny" / "blob.bin").read_bytes() == payload
