"""The outside shims of the reference on jax 0.10.2 and 0.11.2 (dreamer_parity.reference.shims),
applied in a fresh process: of the main venv, which holds jax 0.10.2 as that environment
does, and of the jax 0.11.2 environment's venv (skipped, naming its set-up command, where it
is not set up)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity.reference import shims

REPO = Path(__file__).resolve().parents[1]

_PROBE = r'''
import json, sys
import jax, jax.numpy as jnp
import jax.interpreters.xla as xla
from jax._src import core
from dreamer_parity.reference import shims

V = sys.argv[1]
out = {"version": jax.__version__, "before": {"xla": hasattr(xla, "pytype_aval_mappings"),
                  "threefry": shims.threefry_partitionable()}}
try:
    jax.jit(lambda x: x, None, None)
    out["before"]["positional"] = "accepted"
except TypeError:
    out["before"]["positional"] = "refused"
out["none_on_0.4.26"] = shims.apply("0.4.26")
original = jax.jit
out["applied"] = shims.apply(V)
out["again"] = shims.apply(V)
out["wrapped_once"] = jax.jit._dreamer_parity_original is original
out["xla_is_core"] = xla.pytype_aval_mappings is core.pytype_aval_mappings
out["threefry"] = shims.threefry_partitionable()
s = jax.sharding.SingleDeviceSharding(jax.devices()[0])
f = jax.jit(lambda x, k: x * k, (s, s), s, static_argnames=None)   # as jaxagent.py:352
out["positional"] = float(f(jnp.float32(3), jnp.float32(2)))
out["keywords"] = float(jax.jit(lambda x: x + 1, in_shardings=s)(jnp.float32(1)))
out["decorator"] = float(jax.jit(static_argnums=1)(lambda x, n: x * n)(jnp.float32(2), 3))
try:
    jax.jit(lambda x: x, s, s, None)
    out["three_positional"] = "accepted"
except TypeError as e:
    out["three_positional"] = str(e)
try:
    jax.jit(lambda x: x, s, in_shardings=s)
    out["twice_given"] = "accepted"
except TypeError as e:
    out["twice_given"] = str(e)
jax.__version__ = "0.11.0"
try:
    shims.apply(V)
except ValueError as e:
    out["other_jax"] = str(e)
print(json.dumps(out))
'''


def _python(version: str) -> str:
    """The interpreter holding jax ``version``: this one for 0.10.2, the 0.11.2
    environment's venv for 0.11.2 (skip, naming its set-up command, where it is absent)."""
    if version == "0.10.2":
        return sys.executable
    from dreamer_parity.reference import setup as rs
    try:
        return str(rs.check_setup(check_packages=False, jax=version)["python"])
    except rs.SetupError as e:
        pytest.skip(f"the jax {version} reference environment is not set up: run "
                    f"`{rs.setup_hint(version)}` ({e})")


@pytest.mark.parametrize("version", ["0.10.2", "0.11.2"])
def test_the_three_shims_on_jax(version):
    r = subprocess.run([_python(version), "-c", _PROBE, version], capture_output=True,
                       text=True, cwd=REPO, timeout=300,
                       env={**os.environ, "JAX_PLATFORMS": "cpu",
                            "PYTHONPATH": str(REPO / "src")})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["version"] == version
    # what the reference meets on this jax without them
    assert out["before"] == {"xla": False, "threefry": True, "positional": "refused"}
    assert out["none_on_0.4.26"] == []
    assert out["applied"] == out["again"] == list(shims.SHIMS) == [
        "xla_pytype_aval_mappings", "jit_keyword_shardings", "threefry_partitionable_false"]
    assert out["wrapped_once"] is True
    assert out["xla_is_core"] is True and out["threefry"] is False
    assert (out["positional"], out["keywords"], out["decorator"]) == (6.0, 2.0, 6.0)
    assert "at most 2 positional arguments" in out["three_positional"]
    assert out["twice_given"] == "jax.jit: in_shardings given positionally and as a keyword"
    assert out["other_jax"] == (f"reference.jax {version}: its shims are for jax {version}, "
                                f"but jax 0.11.0 is installed")


def test_every_shim_names_its_reason_and_the_reference_lines_it_serves():
    assert shims.FOR_JAX == {"0.4.26": (), "0.10.2": tuple(shims.SHIMS),
                             "0.11.2": tuple(shims.SHIMS)}
    checkout_files = {"dreamerv3/jaxutils.py", "dreamerv3/nets.py", "dreamerv3/jaxagent.py",
                      "dreamerv3/ninjax.py"}
    for name, s in shims.SHIMS.items():
        assert s["reason"] and len(s["reason"]) < 200, name
        for ref in s["serves"].split(", "):
            path, lines = ref.split(":")
            assert path in checkout_files and lines.replace("-", "").isdigit(), (name, ref)
    assert shims.SHIMS["jit_keyword_shardings"]["serves"] == "dreamerv3/jaxagent.py:352-365"


def test_the_cited_reference_lines_are_what_the_shims_serve():
    import pytest
    from dreamer_parity.reference import setup as rs
    checkout = rs.checkout_dir(rs.default_root())
    if not (checkout / "dreamerv3" / "jaxagent.py").is_file():
        pytest.skip("reference checkout not set up; run `make reference-setup`")

    def lines(path, first, last):
        return (checkout / path).read_text().splitlines()[first - 1:last]

    jits = lines("dreamerv3/jaxagent.py", 352, 365)
    assert sum(x.strip().startswith(("self._init_policy = jax.jit(", "self._policy = jax.jit(",
                                     "self._init_train = jax.jit(", "self._train = jax.jit(",
                                     "self._init_report = jax.jit(", "self._report = jax.jit("))
               for x in jits) == 6
    for path, line in (("dreamerv3/jaxutils.py", 9), ("dreamerv3/nets.py", 5)):
        assert "tensorflow_probability" in lines(path, line, line)[0]
    assert sum("jax.random.split(ctx.seed" in x for x in lines("dreamerv3/ninjax.py", 176, 184)) == 2
