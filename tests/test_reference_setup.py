"""Reference set-up: lock parsing, venv check, verified checkout, clear failures."""

import subprocess
import sys

import pytest

from dreamer_parity.reference import setup as rs

SETUP_CMD = "make reference-setup"


def _existing_checkout():
    path = rs.checkout_dir(rs.default_root())
    try:
        rs.check_checkout(path)
    except rs.SetupError as e:
        pytest.skip(f"reference checkout not set up ({e}); run `{SETUP_CMD}`")
    return path


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def test_read_lock_pins_the_reference_versions():
    pins = rs.read_lock()
    assert pins["jax"] == "0.4.26" and pins["jaxlib"] == "0.4.26"
    assert pins["numpy"] == "1.26.4" and pins["optax"] == "0.2.2"
    assert pins["tensorflow-probability"] == "0.24.0"
    assert pins["ml-dtypes"] == "0.5.4"          # names are normalised
    assert "tensorflow" not in pins
    assert len(pins) == 25


def test_read_lock_names_a_bad_line(tmp_path):
    lock = tmp_path / "x.lock"
    lock.write_text("jax==0.4.26\nnumpy>=1\n")
    with pytest.raises(rs.SetupError, match=r"x.lock:2: expected name==version"):
        rs.read_lock(lock)


def test_venv_matches_lock_and_reports_differences(tmp_path):
    if not rs.venv_python(rs.default_root()).exists():
        pytest.skip(f"reference venv not set up; run `{SETUP_CMD}`")
    root = rs.default_root()
    assert rs.venv_mismatches(root) == []
    text = rs.lock_file().read_text().replace("jax==0.4.26", "jax==0.0.1")
    text = text.replace("six==1.17.0\n", "")
    lock = tmp_path / "changed.lock"
    lock.write_text(text + "notinstalled==1.0\n")
    diff = rs.venv_mismatches(root, lock)
    assert "jax 0.4.26 != lock 0.0.1" in diff
    assert "missing notinstalled==1.0" in diff
    assert "extra six==1.17.0" in diff
    assert rs.venv_mismatches(tmp_path / "nothing") == ["venv missing"]


def test_checkout_is_made_verified_and_idempotent(tmp_path):
    source = _existing_checkout()
    root = tmp_path / "root"
    logs = []
    assert rs.ensure_checkout(root, str(source), log=logs.append) is True
    made = rs.checkout_dir(root)
    assert _git("rev-parse", "HEAD", cwd=made).stdout.strip() == rs.REF_COMMIT
    assert _git("status", "--porcelain", cwd=made).stdout == ""
    mtime = made.stat().st_mtime_ns
    # Second run: nothing to do, nothing touched, not even the source consulted.
    assert rs.ensure_checkout(root, str(tmp_path / "no-such-source"), log=logs.append) is False
    assert made.stat().st_mtime_ns == mtime
    assert len(logs) == 1
    assert [p.name for p in root.iterdir()] == [made.name]   # no temporary clone left


def test_checkout_with_local_changes_or_other_commit_is_refused(tmp_path):
    source = _existing_checkout()
    root = tmp_path / "root"
    rs.ensure_checkout(root, str(source), log=lambda m: None)
    made = rs.checkout_dir(root)
    agent = made / "dreamerv3" / "agent.py"
    original = agent.read_text()
    agent.write_text(original + "\n# edited\n")
    with pytest.raises(rs.SetupError, match=r"1 local change.*make reference-setup"):
        rs.ensure_checkout(root, str(source), log=lambda m: None)
    assert agent.read_text().endswith("# edited\n")          # refused, not repaired
    agent.write_text(original)
    (made / "untracked.py").write_text("x = 1\n")
    with pytest.raises(rs.SetupError, match="local change"):
        rs.check_checkout(made)
    (made / "untracked.py").unlink()
    rs.check_checkout(made)
    _git("checkout", "--quiet", "--detach", "HEAD~1", cwd=made)
    with pytest.raises(rs.SetupError, match=r"is at commit \w{12}, not 29eb964e2918"):
        rs.check_checkout(made)


def test_unreachable_source_gives_a_message_and_leaves_nothing(tmp_path):
    root = tmp_path / "root"
    with pytest.raises(rs.SetupError) as err:
        rs.ensure_checkout(root, str(tmp_path / "missing-mirror"), log=lambda m: None)
    msg = str(err.value)
    assert "cannot clone the reference" in msg
    assert "DREAMER_PARITY_REF_SOURCE" in msg and SETUP_CMD in msg
    assert "\n" not in msg
    assert not rs.checkout_dir(root).exists()
    assert [p.name for p in root.iterdir()] == []


def test_source_without_the_commit_is_refused(tmp_path):
    src = tmp_path / "other"
    src.mkdir()
    _git("init", "-q", cwd=src)
    (src / "f").write_text("x")
    _git("add", "f", cwd=src)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=src)
    with pytest.raises(rs.SetupError, match="does not hold commit 29eb964e"):
        rs.ensure_checkout(tmp_path / "root", str(src), log=lambda m: None)
    assert not rs.checkout_dir(tmp_path / "root").exists()


def test_cli_without_network_prints_one_line_not_a_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dreamer_parity.reference.setup", "--root", str(tmp_path / "r"),
         "--source", str(tmp_path / "unreachable")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("reference setup: error: cannot clone the reference")
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_check_on_a_missing_setup_names_the_command(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dreamer_parity.reference.setup", "--root", str(tmp_path),
         "--check"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "reference checkout missing" in r.stderr and SETUP_CMD in r.stderr


def test_default_root_and_source_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DREAMER_PARITY_REF_ROOT", str(tmp_path / "a"))
    assert rs.default_root() == tmp_path / "a"
    monkeypatch.delenv("DREAMER_PARITY_REF_ROOT")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert rs.default_root() == tmp_path / "cache" / "dreamer-parity"
    monkeypatch.delenv("DREAMER_PARITY_REF_SOURCE", raising=False)
    assert rs.default_source() == "https://github.com/danijar/dreamerv3"
    monkeypatch.setenv("DREAMER_PARITY_REF_SOURCE", str(tmp_path / "m"))
    assert rs.default_source() == str(tmp_path / "m")
    assert rs.checkout_dir(tmp_path).name == "dreamerv3-29eb964"
