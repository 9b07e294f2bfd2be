"""Reference set-up: lock parsing, venv check, verified checkout, clear failures; the jax
0.10.2 environment, the export that proves its commit, a given interpreter."""

import base64
import json
import subprocess
import sys
from pathlib import Path

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


# --- the jax 0.10.2 environment -----------------------------------------------------------

def test_the_jax010_environment_has_its_own_lock_venv_and_cache(tmp_path):
    pins = rs.read_lock(rs.lock_file("0.10.2"))
    assert (pins["jax"], pins["jaxlib"], pins["numpy"]) == ("0.10.2", "0.10.2", "2.4.6")
    assert (pins["tensorflow-probability"], pins["chex"], pins["ruamel-yaml"],
            pins["dm-tree"]) == ("0.24.0", "0.1.92", "0.19.1", "0.1.10")
    assert set(pins) == set(rs.read_lock())     # the same packages as the 0.4.26 lock
    from dreamer_parity import provenance
    main = provenance.read_pins(rs._REPO_ROOT / "requirements.lock")
    assert all(pins[n] == main[n] for n in pins if n in main)   # shared ones as the main venv
    vset = provenance.VERSION_SETS[rs.ENVIRONMENTS["0.10.2"]["version_set"]]
    assert vset["kind"] == "environment" and vset["lock"] == rs.lock_file("0.10.2").name
    assert vset["versions"] == {p: pins[p] for p in provenance.PINNED_PACKAGES}
    assert rs.venv_dir(tmp_path, "0.10.2") == tmp_path / "refvenv-jax010"
    assert rs.jaxcache_dir(tmp_path, "0.10.2") == tmp_path / "jaxcache-jax010"
    assert rs.venv_dir(tmp_path) == tmp_path / "refvenv"          # the default is unchanged
    assert rs.lock_file().name == "requirements-reference.lock"
    with pytest.raises(rs.SetupError, match="reference.jax: unknown value '0.5'"):
        rs.venv_dir(tmp_path, "0.5")


def test_the_jax011_environment_is_the_gpu_machines_versions_with_python_3_12(tmp_path):
    """reference.jax 0.11.2: its own lock (the same 25 packages; jax, jaxlib, numpy those of
    the GPU machine; every package the GPU image's lock pins at its version there), venv,
    cache and set-up command, and a Python 3.12 venv."""
    from dreamer_parity import provenance
    pins = rs.read_lock(rs.lock_file("0.11.2"))
    assert (pins["jax"], pins["jaxlib"], pins["numpy"], pins["ml-dtypes"]) == (
        "0.11.2", "0.11.2", "2.5.2", "0.7.0")
    # what the GPU machine lacks for the reference, at the versions it will be given
    assert {n: pins[n] for n in ("tensorflow-probability", "dm-tree", "pyzmq", "ruamel-yaml",
                                 "gast", "colored", "decorator")} == {
        "tensorflow-probability": "0.24.0", "dm-tree": "0.1.10", "pyzmq": "27.3.0",
        "ruamel-yaml": "0.19.1", "gast": "0.7.0", "colored": "2.3.2", "decorator": "5.3.2"}
    assert set(pins) == set(rs.read_lock()) == set(rs.read_lock(rs.lock_file("0.10.2")))
    gpu = provenance.read_pins(rs._REPO_ROOT / "requirements-gpu-cpu312.lock")
    assert all(pins[n] == gpu[n] for n in pins if n in gpu)
    env = rs.ENVIRONMENTS["0.11.2"]
    vset = provenance.VERSION_SETS[env["version_set"]]
    assert (env["version_set"], vset["kind"], vset["lock"], vset["selected_by"]) == (
        "reference-jax011", "environment", rs.lock_file("0.11.2").name, "reference.jax: 0.11.2")
    assert vset["versions"] == {p: pins[p] for p in provenance.PINNED_PACKAGES} \
        == provenance.VERSION_SETS["gpu-h200"]["versions"]
    assert (env["python"], env["hint"], vset["also"]) == (
        "3.12", "make reference-setup-jax011", {"python": "3.12"})
    assert rs.venv_dir(tmp_path, "0.11.2") == tmp_path / "refvenv-jax011"
    assert rs.jaxcache_dir(tmp_path, "0.11.2") == tmp_path / "jaxcache-jax011"
    assert [rs.ENVIRONMENTS[j]["python"] for j in ("0.4.26", "0.10.2")] == ["3.11", "3.11"]
    make = (rs._REPO_ROOT / "Makefile").read_text()
    assert "reference-setup-jax011: $(STAMP)\n\t$(PY) -m dreamer_parity.reference.setup " \
           "--jax 0.11.2\n" in make


def test_find_python_takes_the_named_interpreter_and_refuses_unknown_versions(monkeypatch,
                                                                              tmp_path):
    monkeypatch.delenv(rs.INTERPRETER_ENV, raising=False)
    monkeypatch.setenv("DREAMER_PARITY_PYTHON312", "/nowhere/python3.12")
    assert rs.find_python("3.12") == "/nowhere/python3.12"      # named: taken as given
    with pytest.raises(ValueError, match="Python '3.9': expected one of 3.11, 3.12"):
        rs.find_python("3.9")
    # no Python of the version anywhere: the set-up names the variable and its command
    monkeypatch.setattr(rs, "find_python", lambda version: None)
    with pytest.raises(rs.SetupError) as e:
        rs.ensure_venv(tmp_path, jax="0.11.2", log=lambda m: None)
    assert str(e.value) == ("python3.12 not found (the lock of reference.jax 0.11.2 needs "
                            "Python 3.12; PATH, pyenv); set DREAMER_PARITY_PYTHON312 to a "
                            "Python 3.12 and rerun `make reference-setup-jax011`")
    assert not (tmp_path / "refvenv-jax011").exists()


def _git_source():
    """A local git directory holding the reference commit, or skip."""
    import os
    for cand in (os.environ.get("DREAMER_PARITY_REF_SOURCE"), rs.checkout_dir(rs.default_root())):
        if cand and (subprocess.run(["git", "cat-file", "-e", f"{rs.REF_COMMIT}^{{commit}}"],
                                    cwd=cand, capture_output=True).returncode == 0
                     if Path(cand).is_dir() else False):
            return str(cand)
    pytest.skip(f"no local git directory holds the reference commit; run `{SETUP_CMD}`")


def test_export_proves_its_commit_without_git(tmp_path, monkeypatch):
    """The export is deterministic and small; a checkout made from it is verified by git's
    own hashes (no git run: PATH without git), and any edit, extra, missing or re-moded
    file is refused; only scores/ may be absent, whatever the objects file says."""
    archive = rs.export(tmp_path / "carry", _git_source(), log=lambda m: None)
    again = rs.export(tmp_path / "again", _git_source(), log=lambda m: None)
    assert archive.read_bytes() == again.read_bytes() and archive.name == rs.EXPORT_NAME
    assert archive.stat().st_size < 300_000
    monkeypatch.setenv("PATH", str(tmp_path / "no-git"))      # nothing below runs git
    root = tmp_path / "root"
    assert rs.ensure_checkout(root, str(tmp_path / "carry"), log=lambda m: None) is True
    made = rs.checkout_dir(root)
    assert sorted(p.name for p in root.iterdir()) == [made.name, rs.objects_file(root).name]
    assert not (made / ".git").exists() and not (made / "scores").exists()
    assert (made / "dreamerv3" / "jaxagent.py").is_file()
    rs.check_checkout(made)
    assert rs.checkout_state(made) == {"commit": rs.REF_COMMIT, "dirty": False,
                                       "verified": "git objects of the export (no .git)",
                                       "omitted": ["scores"]}
    assert rs.ensure_checkout(root, str(tmp_path / "nothing"), log=lambda m: None) is False
    agent = made / "dreamerv3" / "agent.py"
    original = agent.read_bytes()
    agent.write_bytes(original + b"# edited\n")
    with pytest.raises(rs.SetupError, match=r"dreamerv3/agent.py differs from commit 29eb964"):
        rs.check_checkout(made)
    assert rs.checkout_state(made)["commit"] is None
    agent.write_bytes(original)
    (made / "extra.py").write_text("x = 1\n")
    with pytest.raises(rs.SetupError, match=r"1 file\(s\) the commit does not hold \(extra.py\)"):
        rs.check_checkout(made)
    (made / "extra.py").unlink()
    agent.chmod(0o755)
    with pytest.raises(rs.SetupError, match="another executable bit"):
        rs.check_checkout(made)
    agent.chmod(0o644)
    objects = json.loads(rs.objects_file(root).read_text())
    rs.objects_file(root).write_text(json.dumps({**objects, "omit": ["scores", "dreamerv3"]}))
    agent.rename(tmp_path / "agent.py")
    with pytest.raises(rs.SetupError, match=r"dreamerv3/agent.py is missing"):
        rs.check_checkout(made)
    (tmp_path / "agent.py").rename(agent)
    rs.check_checkout(made)
    # an object that does not hash to its name
    bad = dict(objects["objects"])
    some_tree = next(k for k in bad if k != rs.REF_COMMIT)
    bad[some_tree] = base64.b64encode(base64.b64decode(bad[some_tree]) + b"x").decode()
    with pytest.raises(rs.SetupError, match="does not hash to"):
        rs.verify_export_tree(made, {**objects, "objects": bad})


def test_an_export_that_is_not_one_is_refused_and_leaves_nothing(tmp_path):
    import tarfile
    carry = tmp_path / "carry"
    carry.mkdir()
    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    with tarfile.open(carry / rs.EXPORT_NAME, "w:gz") as tar:
        tar.add(evil, arcname="../evil.txt")
    root = tmp_path / "root"
    with pytest.raises(rs.SetupError, match="is not part of an export"):
        rs.ensure_checkout(root, str(carry), log=lambda m: None)
    assert not rs.checkout_dir(root).exists() and list(root.iterdir()) == []


def test_a_given_interpreter_is_checked_against_the_lock(tmp_path, monkeypatch):
    """DREAMER_PARITY_REF_INTERPRETER: no venv; a missing package or other jax, jaxlib or
    numpy refuses, other versions are listed (the runner records them)."""
    from dreamer_parity import provenance
    here = provenance._installed(provenance.PINNED_PACKAGES)
    lock = tmp_path / "x.lock"
    lock.write_text("".join(f"{k}=={v}\n" for k, v in here.items()) + "PyYAML==0.0.1\n")
    monkeypatch.setenv(rs.INTERPRETER_ENV, sys.executable)
    assert rs.venv_python(tmp_path) == Path(sys.executable)
    diff = rs.interpreter_differences(sys.executable, lock)
    assert diff["refused"] == [] and diff["off_lock"][0].startswith("pyyaml ")
    assert diff["off_lock"][0].endswith(" != lock 0.0.1")
    logs = []
    assert rs.ensure_venv(tmp_path, lock, log=logs.append) is False
    assert not rs.venv_dir(tmp_path).exists() and "versions off x.lock" in logs[0]
    lock.write_text(lock.read_text() + "notinstalled==1.0\n")
    with pytest.raises(rs.SetupError, match=r"does not hold x.lock \(missing notinstalled==1.0\)"):
        rs.ensure_venv(tmp_path, lock, log=lambda m: None)
    lock.write_text(lock.read_text().replace(f"numpy=={here['numpy']}", "numpy==0.0.1"))
    assert f"numpy {here['numpy']} != lock 0.0.1" in rs.interpreter_differences(
        sys.executable, lock)["refused"]
    monkeypatch.setenv(rs.INTERPRETER_ENV, str(tmp_path / "no-python"))
    with pytest.raises(rs.SetupError, match="no such interpreter"):
        rs.venv_python(tmp_path)
