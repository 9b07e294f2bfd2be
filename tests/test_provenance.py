"""Provenance without paths or host names; the shared modules run on stdlib + numpy only.

Second part: the modules the reference venv imports (records, schedule, provenance,
cartpole_port, params for ``validate``) are imported in a fresh interpreter of each venv
(the reference venv: numpy 1.26; the main venv: numpy 2) with ``PYTHONPATH=src``; every
module they pull in must be standard library, numpy or the package itself, and the
figures they compute must be identical in both.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity import provenance as prov

REPO = Path(__file__).resolve().parents[1]
GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.invalid",
          "-c", "commit.gpgsign=false"]


def _git(*args, cwd):
    subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path):
    """A git tree with one commit: src/a.py and notes.txt."""
    t = tmp_path / "tree"
    (t / "src").mkdir(parents=True)
    (t / "src" / "a.py").write_text("x = 1\n")
    (t / "notes.txt").write_text("n\n")
    _git("init", "-q", cwd=t)
    _git("add", ".", cwd=t)
    _git("commit", "-q", "-m", "one", cwd=t)
    return t


def _head(t):
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=t, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_git_state_clean_and_dirty(tree):
    st = prov.git_state(tree)
    assert st == {"commit": _head(tree), "dirty": False} and len(st["commit"]) == 40
    (tree / "untracked.txt").write_text("u\n")
    assert prov.git_state(tree)["dirty"] is False          # untracked files do not count
    (tree / "notes.txt").write_text("changed\n")
    assert prov.git_state(tree)["dirty"] is True
    assert prov.git_state(tree, paths=["src"])["dirty"] is False
    (tree / "src" / "a.py").write_text("x = 2\n")
    assert prov.git_state(tree / "src", paths=["src"]) == {"commit": _head(tree), "dirty": True}


def test_round_files_do_not_make_the_code_dirty(tree):
    (tree / "params.yaml").write_text("seeds: [0]\n")
    (tree / "results").mkdir()
    (tree / "results" / "r.txt").write_text("r\n")
    _git("add", ".", cwd=tree)
    _git("commit", "-q", "-m", "two", cwd=tree)
    (tree / "params.yaml").write_text("seeds: [1]\n")          # as dvc exp run -S does
    (tree / "results" / "r.txt").write_text("changed\n")
    st = prov.git_state(tree / "src", exclude=prov.ROUND_FILES)
    assert st == {"commit": _head(tree), "dirty": False}
    assert prov.git_state(tree)["dirty"] is True                  # without the exclusion
    (tree / "notes.txt").write_text("changed\n")
    assert prov.git_state(tree / "src", exclude=prov.ROUND_FILES)["dirty"] is True


def test_git_state_outside_a_tree(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    env_ceiling = os.environ.get("GIT_CEILING_DIRECTORIES")
    os.environ["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    try:
        assert prov.git_state(d) == {"commit": None, "dirty": None}
    finally:
        if env_ceiling is None:
            os.environ.pop("GIT_CEILING_DIRECTORIES")
        else:
            os.environ["GIT_CEILING_DIRECTORIES"] = env_ceiling


def test_relative_to_roots(tmp_path):
    roots = {"repo": tmp_path / "repo", "ref": tmp_path / "ref"}
    for r in roots.values():
        (r / "sub").mkdir(parents=True)
    assert prov.relative_to_roots(tmp_path / "repo" / "sub" / "f.py", roots) == "<repo>/sub/f.py"
    assert prov.relative_to_roots(tmp_path / "ref", roots) == "<ref>"
    assert prov.relative_to_roots(tmp_path / "other" / "g.json", roots) == "<elsewhere>/g.json"
    nested = {"outer": tmp_path, "repo": tmp_path / "repo"}
    assert prov.relative_to_roots(tmp_path / "repo" / "x", nested) == "<outer>/repo/x"
    (tmp_path / "link").symlink_to(tmp_path / "repo" / "sub")
    assert prov.relative_to_roots(tmp_path / "link" / "h", roots) == "<repo>/sub/h"


def test_collect_has_no_path_or_host(tree):
    p = prov.collect(extra_trees={"reference": tree}, modules=("numpy", "no_such_module_xyz"))
    assert p["repo"]["commit"] is None or len(p["repo"]["commit"]) == 40
    assert p["reference"] == {"commit": _head(tree), "dirty": False}
    import numpy
    assert p["versions"] == {"numpy": numpy.__version__, "no_such_module_xyz": None}
    assert p["python"] == ".".join(map(str, sys.version_info[:3]))
    assert p["cpu_count"] == os.cpu_count() and p["cpu"]
    assert p["argv0"] == Path(sys.argv[0]).name
    text = json.dumps(p)
    for secret in (str(REPO), str(tree), str(Path.home())):
        assert secret not in text
    host = socket.gethostname()
    if len(host) >= 6:
        assert host not in text
    assert set(p) >= {"repo", "python", "versions", "cpu", "os", "xla_flags", "threads"}


def test_collect_records_this_repository():
    st = prov.collect(modules=())["repo"]
    assert st == prov.git_state(REPO, exclude=prov.ROUND_FILES)
    assert st["commit"] == _head(REPO)


# --- the reference venv's imports: standard library + numpy only --------------------------

_PROBE = r"""
import json, sys
before = set(sys.modules)
from dreamer_parity import cartpole_port, params, provenance, records, schedule
new = {m.split(".")[0] for m in set(sys.modules) - before}
allowed = set(sys.stdlib_module_names) | {"numpy", "dreamer_parity", "cython_runtime"}
new = {m for m in new if not m.startswith("_cython_")}   # numpy.random's Cython runtime
import numpy as np, tempfile, pathlib
port = cartpole_port.CartPolePort(entropy=[3, 5])
rows = [port.reset()]
for a in [0, 1, 1, 0, 1, 0, 0, 1] * 6:
    if rows[-1]["is_last"]:
        rows.append(port.reset())
    else:
        rows.append(port.step(a))
with tempfile.TemporaryDirectory() as d:
    records.write_jsonl(pathlib.Path(d) / "r.jsonl", [{"a": np.float32(0.5)}])
    text = (pathlib.Path(d) / "r.jsonl").read_text()
states = np.random.default_rng(9).uniform(-0.2, 0.2, (500, 4)).astype(np.float32)
import hashlib
steps = np.array([cartpole_port.step_state(s, a)[0] for s in states for a in (0, 1)])
p = params.validate({})
print(json.dumps({
    "steps_dtype": str(steps.dtype),
    "steps_sha256": hashlib.sha256(steps.tobytes()).hexdigest(),
    "numpy": np.__version__,
    "foreign": sorted(new - allowed),
    "yaml_loaded": "yaml" in sys.modules,
    "rows": [[float(v) for v in r["vector"]] + [float(r["reward"]), r["is_last"]] for r in rows],
    "updates": schedule.updates_at([1040, 1200, 2000, 20000]),
    "smoke": params.smoke_params(p),
    "jsonl": text,
    "prov_keys": sorted(provenance.collect(modules=("numpy",))),
}))
"""


def _probe(python) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(REPO / "src")
    r = subprocess.run([str(python), "-c", _PROBE], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _ref_python() -> Path:
    try:
        from dreamer_parity.reference.setup import default_root, venv_python
    except ImportError:
        pytest.skip("dreamer_parity.reference.setup missing: run `make reference-setup`")
    return venv_python(default_root())


@pytest.fixture(scope="module")
def main_probe():
    return _probe(sys.executable)


def test_shared_modules_import_stdlib_and_numpy_only_in_main_venv(main_probe):
    assert main_probe["numpy"].startswith("2.")
    assert main_probe["foreign"] == []
    assert main_probe["yaml_loaded"] is False             # PyYAML only inside params.load
    assert main_probe["updates"] == [1, 81, 481, 9481]
    assert main_probe["jsonl"] == '{"a": 0.5}\n'
    assert main_probe["smoke"]["rows"] == 1200
    assert main_probe["steps_dtype"] == "float32"


def test_shared_modules_in_reference_venv(main_probe):
    python = _ref_python()
    if not python.exists():
        pytest.skip("reference venv missing: run `make reference-setup`")
    ref = _probe(python)
    assert ref["numpy"].startswith("1.")
    assert ref["foreign"] == []
    # Same numbers on numpy 1 and numpy 2: reset draws, float32 steps, schedule, params.
    for key in ("rows", "steps_dtype", "steps_sha256", "updates", "smoke", "jsonl",
                "prov_keys", "yaml_loaded"):
        assert ref[key] == main_probe[key], key


def test_one_lock_reader_and_one_name_normaliser(tmp_path):
    # PEP 503: runs of -, _ and . are one -, lower case; the reader and the wheel names agree
    from dreamer_parity import wheels
    assert prov.normalise("ML_Dtypes") == "ml-dtypes"
    assert prov.normalise("a_.b") == "a-b"
    assert wheels.wheel_name("Zope.Interface-1.0-py3-none-any.whl") == ("zope-interface", "1.0")
    lock = tmp_path / "x.lock"
    lock.write_text("# a comment\n\nRuamel.YAML==0.19.1\nfoo[extra]==1.2 ; python_version>'3'\n")
    assert prov.read_pins(lock) == {"ruamel-yaml": "0.19.1", "foo": "1.2"}
    lock.write_text("jax==0.4.26\nnumpy>=1\n")
    with pytest.raises(prov.LockError, match=r"^x.lock:2: expected name==version"):
        prov.read_pins(lock)
