"""Reference launcher: bad input is refused with one line before any compute; a killed
run is removed and restarted (deviation D6); a completed run is never overwritten."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity import records
from dreamer_parity.reference import launch
from dreamer_parity.reference import setup as rs
import synthetic  # tests/synthetic.py

REPO = Path(__file__).resolve().parents[1]
#: a round that runs the reference (params.yaml's round reads the published runs)
ROUND1 = "tests/fixtures/params_round1.yaml"


def _launch(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "dreamer_parity.reference.launch", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("bad", ["-1", "1.5", "abc", "", "0x3"])
def test_parse_seed_refuses_anything_but_a_non_negative_integer(bad):
    with pytest.raises(launch.LaunchError, match="--seed must be a non-negative integer"):
        launch.parse_seed(bad)


def test_parse_seed_accepts_integers():
    assert launch.parse_seed("0") == 0 and launch.parse_seed(" 12 ") == 12


def test_cli_bad_seed_is_one_line(tmp_path):
    r = _launch("--params", "params.yaml", "--seed", "-3", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert r.stderr.strip() == ("reference launch: error: --seed must be a non-negative "
                                "integer, got '-3'")
    assert not (tmp_path / "o").exists()


def test_cli_bad_params_names_the_key(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(synthetic.params_text({"rows": 1000, "eval_every": 400}))
    r = _launch("--params", str(p), "--seed", "0", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert re.match(r"error: params: (rows|eval_every): .*1000", r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_cli_published_source_does_not_run_the_reference(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(synthetic.params_text({"reference.source": "published/round1"}))
    r = _launch("--params", str(p), "--seed", "0", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "reference.source" in r.stderr


def test_cli_missing_setup_names_the_setup_command(tmp_path):
    r = _launch("--params", ROUND1, "--seed", "0", "--out", str(tmp_path / "o"),
                "--root", str(tmp_path / "empty-root"))
    assert r.returncode == 2
    assert "reference checkout missing" in r.stderr
    assert "make reference-setup" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_venv_names_the_setup_command(tmp_path):
    root = rs.default_root()
    try:
        rs.check_checkout(rs.checkout_dir(root))
    except rs.SetupError as e:
        pytest.skip(f"reference checkout not set up ({e}); run `make reference-setup`")
    fake = tmp_path / "root"
    fake.mkdir()
    (fake / rs.checkout_dir(root).name).symlink_to(rs.checkout_dir(root))
    with pytest.raises(rs.SetupError, match=r"reference venv missing.*make reference-setup"):
        rs.check_setup(fake)


def test_completed_run_is_refused_and_kept(tmp_path):
    out = tmp_path / "s0"
    out.mkdir()
    (out / "records.jsonl").write_text("{}\n")
    records.write_json(out / "run.json", {"side": "reference", "seed": 0})
    records.write_done(out, "ok")
    with pytest.raises(launch.LaunchError, match="already holds a completed reference run"):
        launch.prepare_out_dir(out)
    assert (out / "records.jsonl").read_text() == "{}\n"
    # Through the CLI too: refused before the set-up check, so no set-up is needed.
    r = _launch("--params", ROUND1, "--seed", "0", "--out", str(out),
                "--root", str(tmp_path / "no-root"))
    assert r.returncode == 2
    assert "already holds a completed reference run (DONE.json status ok)" in r.stderr
    assert (out / records.DONE).exists()


def test_incomplete_run_is_removed_with_the_d6_message(tmp_path):
    out = tmp_path / "s1"
    (out / "logdir").mkdir(parents=True)
    (out / "logdir" / "checkpoint.ckpt").write_bytes(b"x")
    (out / "records.jsonl").write_text('{"rows": 400}\n')
    (out / "run.json").write_text("{}")
    logs = []
    assert launch.prepare_out_dir(out, log=logs.append) == "removed"
    assert not out.exists()
    assert len(logs) == 1
    assert "cannot be resumed (deviation D6" in logs[0] and "from scratch" in logs[0]


def test_out_dir_with_foreign_files_is_refused_not_deleted(tmp_path):
    out = tmp_path / "s2"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(launch.LaunchError, match="holds files no reference run writes"):
        launch.prepare_out_dir(out)
    assert (out / "notes.txt").exists()
    assert launch.prepare_out_dir(tmp_path / "absent") == "new"
    (tmp_path / "empty").mkdir()
    assert launch.prepare_out_dir(tmp_path / "empty") == "new"


#: The reference section of a validated round (the defaults of the environment keys).
_REF = {"decode": "exact", "sampler": "per_run", "jax": "0.4.26", "platform": "cpu",
        "precision": "default", "source": "run"}


def test_runner_command_uses_the_reference_venv_and_compilation_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    info = {"python": tmp_path / "refvenv/bin/python", "checkout": tmp_path / "co",
            "jaxcache": tmp_path / "jaxcache", "root": tmp_path}
    p = {"profile": "smoke", "rows": 1200, "eval_every": 400, "eval_episodes": 2,
         "reference": _REF}
    argv, env = launch.runner_command(info, 3, tmp_path / "out", p)
    assert argv[0] == str(info["python"])
    assert argv[1:4] == ["-m", "dreamer_parity.reference.runner", "--json"]
    assert json.loads(argv[4]) == {
        "seed": 3, "out": str(tmp_path / "out"), "profile": "smoke", "rows": 1200,
        "eval_every": 400, "eval_episodes": 2, "decode": "exact", "sampler": "per_run",
        "jax": "0.4.26", "platform": "cpu", "precision": "default"}
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jaxcache")
    assert env["JAX_PLATFORMS"] == "cpu" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    # the venv's own packages only: the caller's PYTHONPATH is replaced
    assert len(env["PYTHONPATH"].split(":")) == 2
    assert env["PYTHONPATH"].split(":")[1] == str(tmp_path / "co")
    assert (Path(env["PYTHONPATH"].split(":")[0]) / "dreamer_parity" / "records.py").exists()


def test_runner_command_on_the_tpu_with_a_given_interpreter(tmp_path, monkeypatch):
    """A given interpreter (the TPU machine's python3) keeps the caller's PYTHONPATH after
    src and the checkout (that machine's jax lives there); the platform reaches
    JAX_PLATFORMS with the CPU beside the chip."""
    monkeypatch.setenv("PYTHONPATH", "/machine/jax:/tmp/site")
    info = {"python": Path("/usr/bin/python3"), "checkout": tmp_path / "co",
            "jaxcache": tmp_path / "jaxcache-jax010", "root": tmp_path, "interpreter": "given"}
    p = {"profile": "full", "rows": 24000, "eval_every": 400, "eval_episodes": 10,
         "reference": {**_REF, "jax": "0.10.2", "platform": "tpu", "precision": "highest"}}
    argv, env = launch.runner_command(info, 0, tmp_path / "out", p)
    assert env["JAX_PLATFORMS"] == "tpu,cpu"
    assert env["PYTHONPATH"].split(":")[1:] == [str(tmp_path / "co"), "/machine/jax", "/tmp/site"]
    assert {k: json.loads(argv[4])[k] for k in ("jax", "platform", "precision")} == {
        "jax": "0.10.2", "platform": "tpu", "precision": "highest"}


def test_runner_reads_back_what_the_launcher_writes(tmp_path):
    """The launcher's --json object and the runner's parser use the same names
    (runner.PARAM_ARGS): every value arrives, flags override, other names are refused."""
    from dreamer_parity.reference import runner

    p = {"profile": "smoke", "rows": 1200, "eval_every": 400, "eval_episodes": 2,
         "reference": _REF}
    argv, _ = launch.runner_command({"python": "py", "checkout": tmp_path, "jaxcache": tmp_path},
                                    3, tmp_path / "out", p)
    a = runner.parse_args(argv[3:])
    assert [getattr(a, k) for k in runner.PARAM_ARGS] == [
        3, tmp_path / "out", "smoke", 1200, 400, 2, "exact", "per_run", "0.4.26", "cpu",
        "default"]
    assert a.params_subset() == {"profile": "smoke", "rows": 1200, "eval_every": 400,
                                 "eval_episodes": 2, "decode": "exact", "sampler": "per_run",
                                 "jax": "0.4.26", "platform": "cpu", "precision": "default"}
    b = runner.parse_args(argv[3:] + ["--eval-every", "240", "--decode", "ref", "--jax",
                                      "0.10.2", "--precision", "highest"])
    assert (b.eval_every, b.decode, b.rows, b.jax, b.precision) == (
        240, "ref", 1200, "0.10.2", "highest")
    with pytest.raises(SystemExit) as e:     # tpu on the 0.4.26 environment: params refuse
        runner.parse_args(argv[3:] + ["--platform", "tpu"])
    assert e.value.code == 2
    # without the environment keys (an older launcher's arguments): the defaults
    old = {k: v for k, v in json.loads(argv[4]).items() if k not in ("jax", "platform",
                                                                     "precision")}
    c = runner.parse_args(["--json", json.dumps(old)])
    assert (c.jax, c.platform, c.precision) == ("0.4.26", "cpu", "default")
    with pytest.raises(SystemExit) as e:
        runner.parse_args(["--json", json.dumps({**json.loads(argv[4]), "width": 3})])
    assert e.value.code == 2


def test_cli_missing_jax010_setup_names_its_setup_command(tmp_path):
    """reference.jax 0.10.2 checks its own venv (refvenv-jax010) and names its command."""
    try:
        rs.check_checkout(rs.checkout_dir(rs.default_root()))
    except rs.SetupError as e:
        pytest.skip(f"reference checkout not set up ({e}); run `make reference-setup`")
    fake = tmp_path / "root"
    fake.mkdir()
    (fake / rs.checkout_dir(fake).name).symlink_to(rs.checkout_dir(rs.default_root()))
    p = synthetic.write_params(tmp_path / "params.yaml",   # a complete file
                               {"reference": {"jax": "0.10.2", "source": "run"}})
    r = _launch("--params", str(p), "--seed", "0", "--out", str(tmp_path / "o"),
                "--root", str(fake))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("reference launch: error: reference venv missing "
                                "(refvenv-jax010 under the set-up root); run "
                                "`make reference-setup-jax010`")
    assert not (tmp_path / "o").exists()


def test_overrides_take_the_platform_and_keep_the_protocol_otherwise():
    from dreamer_parity.reference import runner

    cpu, tpu = runner.overrides(0, "full", 24000), runner.overrides(0, "full", 24000,
                                                                    platform="tpu")
    assert cpu["jax.platform"] == "cpu" and tpu["jax.platform"] == "tpu"
    assert {k: v for k, v in tpu.items() if k != "jax.platform"} == \
        {k: v for k, v in cpu.items() if k != "jax.platform"}
