"""Property test: a mutated input file is refused with one line, or it satisfies the invariants.

Valid examples of every kind of file the project reads (a synthetic round's records.jsonl,
episodes.jsonl, DONE.json and run.json; a published evals.jsonl from data/published; the
repository's params.yaml) get one random mutation: drop, duplicate or swap a line; change
a value's type or value; insert NaN or Infinity; truncate at a byte; flip a byte; remove or
add a key.  The readers must then either refuse the input with the project's own error
(RecordError / AnalysisError / ParamsError), one line naming the file (and its line where
there is one), or accept it, and then a small checker here (reading the raw text, not
calling the readers) confirms what the documentation promises: all numbers finite, means
equal to the mean of their lists, counts equal to eval_episodes (unless the round's check
fails that run), rows strictly increasing on the round's grid.

Beyond those (issue #57): a value the environment cannot produce (a return, a length, a
mean) is refused exactly when it lies outside CartPole-v1's ranges, naming the file, the
line and the field; every file kind a round reads (a kept run's files and manifest, the
study's evaluations and auxiliary files, tables.csv, params.yaml, the index, a
pre-registration) replaced by a directory, a fifo, a link to /dev/zero or out of the
repository, a dangling link, a file over its cap (a sparse 2-10 GB one included), an
empty file or a gzip bomb is refused before it is read, in one line naming it; any change
to a kept file or a published file is refused by its manifest, and, resealed, by the
readers behind it or shown harmless; a changed index is refused or keeps each name once.

Derandomized and short in the normal suite; ``HYPOTHESIS_PROFILE=long`` runs 20x longer
(randomized).  Run with ``-s`` to see how many mutations were tried and refused per kind.
"""

import collections
import json
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamer_parity import params as params_mod
from dreamer_parity import records, sides
from dreamer_parity.analysis import checks, load, published
import synthetic  # tests/synthetic.py
from dreamer_parity.analysis.load import AnalysisError
from dreamer_parity.round_spec import Round

REPO = Path(__file__).resolve().parents[1]
REF_EVALS = REPO / "data" / "published" / "round3" / "ref_s0" / "evals.jsonl"

settings.register_profile("default", derandomize=True, max_examples=120, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", derandomize=False, max_examples=2400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")

PARAMS = params_mod.validate({
    "round": "t", "seeds": [0, 1], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
    "profile": "smoke", "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                                  "concordance_range": [400, 1200]}})
#: the published round 3 grid (reference seed 0)
PUB_PARAMS = params_mod.validate({
    "round": "t", "seeds": [0], "rows": 24000, "eval_every": 400, "eval_episodes": 10,
    "stats": {"s1_rows": [16000], "concordance_rows": [24000], "concordance_range": [16000, 24000]}})
ROUND, PUB_ROUND = Round.from_params(PARAMS), Round.from_params(PUB_PARAMS)

TRIED = collections.Counter()
REFUSED = collections.Counter()

# ------------------------------------------------------------------------------- mutations

_OTHER_VALUES = [None, True, False, "x", "", [], {}, 0, -1, 1, 7, 2 ** 70, -(2 ** 70), 0.5, 1e308,
                 [1, "a"], {"k": 1}]
_NON_FINITE = [math.nan, math.inf, -math.inf]


def _paths(obj, prefix=()):
    """Every (path, value) inside a JSON value, the root included."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    if not path:
        return value
    node = obj
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return obj


def _mutate_value(data, obj):
    """One structural or value mutation of a parsed JSON/YAML value."""
    paths = list(_paths(obj))
    op = data.draw(st.sampled_from(["type", "number", "nonfinite", "remove", "add"]))
    path, value = data.draw(st.sampled_from(paths))
    if op == "type":
        return _set(obj, path, data.draw(st.sampled_from(_OTHER_VALUES)))
    if op == "number":
        nums = [(p, v) for p, v in paths if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if nums:
            path, value = data.draw(st.sampled_from(nums))
            new = data.draw(st.sampled_from([value + 1, value - 1, -value, value * 10, 0,
                                             value + 0.5, value * (1 + 1e-6)]))
            return _set(obj, path, new)
        return obj
    if op == "nonfinite":
        nums = [p for p, v in paths if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if nums:
            path = data.draw(st.sampled_from(nums))
        return _set(obj, path, data.draw(st.sampled_from(_NON_FINITE)))
    dicts = [(p, v) for p, v in paths if isinstance(v, dict) and v]
    if op == "remove" and dicts:
        path, d = data.draw(st.sampled_from(dicts))
        del d[data.draw(st.sampled_from(sorted(d, key=str)))]
        return obj
    dicts = [(p, v) for p, v in paths if isinstance(v, dict)]
    if dicts:
        path, d = data.draw(st.sampled_from(dicts))
        d[data.draw(st.sampled_from(["extra", "status", "seed", "rows", "returns"]))] = \
            data.draw(st.sampled_from(_OTHER_VALUES))
    return obj


def mutate(data, raw: bytes, kind: str) -> tuple[bytes, str]:
    """(mutated bytes, name of the mutation)."""
    lines = raw.decode().splitlines(keepends=True)
    ops = ["truncate", "flip", "value"] + (["drop", "duplicate", "swap"] if kind == "jsonl" else [])
    op = data.draw(st.sampled_from(ops))
    if op == "truncate":
        return raw[:data.draw(st.integers(0, len(raw) - 1))], op
    if op == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        b = raw[i] ^ data.draw(st.integers(1, 255))
        return raw[:i] + bytes([b]) + raw[i + 1:], op
    if op in ("drop", "duplicate", "swap"):
        i = data.draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        else:
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines).encode(), op
    if kind == "jsonl":
        i = data.draw(st.integers(0, len(lines) - 1))
        obj = _mutate_value(data, json.loads(lines[i]))
        lines[i] = json.dumps(obj) + "\n"
        return "".join(lines).encode(), op
    if kind == "json":
        return (json.dumps(_mutate_value(data, json.loads(raw)), indent=1) + "\n").encode(), op
    obj = _mutate_value(data, yaml.safe_load(raw))
    return yaml.safe_dump(obj, sort_keys=False).encode(), op


# --------------------------------------------------------------- independent invariants

def _finite(x) -> bool:
    return all(not isinstance(v, float) or math.isfinite(v) for _, v in _paths(x))


def _mean_ok(mean, values) -> bool:
    return abs(mean - math.fsum(values) / len(values)) <= 1e-9 * max(1.0, abs(mean))


def _raw_jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _env_value(v) -> bool:
    """What CartPole-v1 produces as a return or a length (written out here, independent
    of dreamer_parity.environment): a whole number in [1, 500]."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and float(v).is_integer() and 1 <= v <= 500)


def _bounded(x) -> bool:
    return all(not isinstance(v, (int, float)) or isinstance(v, bool) or abs(v) <= 1e30
               for _, v in _paths(x))


def check_records_invariants(path: Path, params: dict, eval_fail: bool):
    grid = params_mod.eval_points(params)
    recs = _raw_jsonl(path)
    rows = [r["rows"] for r in recs]
    assert rows == grid, rows                     # the round's grid, strictly increasing
    for r in recs:
        assert _finite(r) and _bounded(r)
        assert _mean_ok(r["eval_mean"], r["eval_returns"])
        assert _mean_ok(r["eval_len_mean"], r["eval_lengths"])
        assert all(map(_env_value, r["eval_returns"] + r["eval_lengths"]))
        assert eval_fail or len(r["eval_returns"]) == params["eval_episodes"]


def check_episodes_invariants(path: Path):
    for e in _raw_jsonl(path):
        assert _finite(e) and _bounded(e)
        for k in ("seed", "worker", "row_last", "length"):
            assert isinstance(e[k], int) and 0 <= e[k] <= 2 ** 53
        assert _env_value(e["length"]) and _env_value(e["score"])


def check_published_invariants(path: Path, params: dict, eval_fail: bool):
    rows = _raw_jsonl(path)
    assert [r["rows"] for r in rows] == params_mod.eval_points(params)
    for r in rows:
        assert _finite(r) and _bounded(r)
        assert 1 <= r["mean"] <= 500
        if r.get("returns") is not None:
            assert _mean_ok(r["mean"], r["returns"])
            assert all(map(_env_value, r["returns"] + (r.get("lengths") or [])))
            assert eval_fail or len(r["returns"]) == params["eval_episodes"]


def check_params_invariants(p: dict):
    assert p["rows"] > 0 and p["eval_every"] > 0 and p["eval_episodes"] > 0
    assert p["eval_every"] % 16 == 0 and p["rows"] % p["eval_every"] == 0
    assert p["seeds"] and len(set(p["seeds"])) == len(p["seeds"]) and min(p["seeds"]) >= 0
    grid = set(range(p["eval_every"], p["rows"] + 1, p["eval_every"]))
    assert set(p["stats"]["s1_rows"]) <= grid and set(p["stats"]["concordance_rows"]) <= grid
    src = p["reference"]["source"]
    assert src == "run" or not (src.startswith("/") or src.startswith("~"))
    assert math.isfinite(p["stats"]["good_return"])


def assert_one_line(e: Exception, names: tuple[str, ...], n_lines: int | None):
    msg = str(e)
    assert "\n" not in msg, msg
    assert any(n in msg for n in names), (names, msg)
    m = re.search(r"\.(?:jsonl|json|yaml):(\d+):", msg)
    if m and n_lines is not None:
        assert 1 <= int(m.group(1)) <= n_lines + 1, msg


# ------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def round_dir():
    with tempfile.TemporaryDirectory() as d:
        synthetic.write_round(Path(d), PARAMS)
        yield Path(d)


@pytest.fixture(scope="module")
def pub_dir():
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "ref_s0").mkdir()
        shutil.copy(REF_EVALS, Path(d) / "ref_s0" / "evals.jsonl")
        synthetic.reseal(Path(d))        # the study's files come with their manifest
        yield Path(d)


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    for kind in sorted(TRIED):
        print(f"\n{kind}: {TRIED[kind]} mutations tried, {REFUSED[kind]} refused")


def _load_round(root: Path):
    ref = load.load_side(root / "reference", "reference", PARAMS["seeds"])
    cand = load.load_side(root / "candidate", "candidate", PARAMS["seeds"])
    load.check_eval_rows(ref + cand, params_mod.eval_points(PARAMS))
    return checks.run_checks(ROUND, ref, cand)


def test_the_unmutated_inputs_are_accepted_and_hold_the_invariants(round_dir, pub_dir):
    """What the properties below mutate is accepted as it is, every check passing and every
    invariant holding: a reader that refused every input fails here."""
    cs = _load_round(round_dir)
    mine = [c for c in cs if c.side == "candidate" and c.seed == 0]
    assert mine and [c for c in mine if c.status == "FAIL"] == []
    check_records_invariants(round_dir / "candidate" / "s0" / "records.jsonl", PARAMS, False)
    check_episodes_invariants(round_dir / "candidate" / "s0" / "episodes.jsonl")
    run = published.load_run(pub_dir, "reference", 0)
    load.check_eval_rows([run], params_mod.eval_points(PUB_PARAMS))
    # the study's files record no reference commit: provenance is the one check failing
    assert [(c.name, c.detail) for c in checks.run_checks(PUB_ROUND, [run], [])
            if c.status == "FAIL"] == [("provenance", "no reference commit recorded")]
    check_published_invariants(pub_dir / "ref_s0" / "evals.jsonl", PUB_PARAMS, False)
    check_params_invariants(params_mod.load(REPO / "params.yaml"))


RUN_FILES = {"records.jsonl": "jsonl", "episodes.jsonl": "jsonl", "DONE.json": "json",
             "run.json": "json"}


@pytest.mark.parametrize("name", list(RUN_FILES))
@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_mutated_run_file(round_dir, name, data):
    path = round_dir / "candidate" / "s0" / name
    original = path.read_bytes()
    mutated, op = mutate(data, original, RUN_FILES[name])
    TRIED[name] += 1
    try:
        path.write_bytes(mutated)
        try:
            cs = _load_round(round_dir)
        except (records.RecordError, AnalysisError, sides.SideError) as e:
            REFUSED[name] += 1
            assert_one_line(e, (name, "candidate/s0", "candidate seed 0"),
                            mutated.count(b"\n"))
            return
        mine = [c for c in cs if c.side == "candidate" and c.seed == 0]
        eval_fail = any(c.status == "FAIL" and "episodes" in c.name for c in mine)
        check_records_invariants(round_dir / "candidate" / "s0" / "records.jsonl", PARAMS, eval_fail)
        check_episodes_invariants(round_dir / "candidate" / "s0" / "episodes.jsonl")
        done = json.loads((round_dir / "candidate" / "s0" / "DONE.json").read_text())
        assert done["status"] in ("ok", "failed")
    finally:
        path.write_bytes(original)


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_mutated_published_evals(pub_dir, data):
    path = pub_dir / "ref_s0" / "evals.jsonl"
    original = path.read_bytes()
    mutated, op = mutate(data, original, "jsonl")
    TRIED["evals.jsonl"] += 1
    try:
        path.write_bytes(mutated)
        if mutated != original:          # the manifest refuses any change, in range or not
            with pytest.raises(records.RecordError, match=r"ref_s0/evals\.jsonl: its SHA-256 "
                                                          r"is not the one .*MANIFEST\.json"):
                published.load_run(pub_dir, "reference", 0)
        synthetic.reseal(pub_dir)        # resealed: the readers behind it decide
        try:
            run = published.load_run(pub_dir, "reference", 0)
            load.check_eval_rows([run], params_mod.eval_points(PUB_PARAMS))
        except (records.RecordError, AnalysisError) as e:
            REFUSED["evals.jsonl"] += 1
            assert_one_line(e, ("evals.jsonl", "ref_s0"), mutated.count(b"\n"))
            return
        cs = checks.run_checks(PUB_ROUND, [run], [])
        eval_fail = any(c.status == "FAIL" and "episodes" in c.name for c in cs)
        check_published_invariants(path, PUB_PARAMS, eval_fail)
    finally:
        path.write_bytes(original)
        synthetic.reseal(pub_dir)


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_mutated_params_yaml(tmp_path_factory, data):
    original = (REPO / "params.yaml").read_bytes()
    mutated, op = mutate(data, original, "yaml")
    TRIED["params.yaml"] += 1
    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_bytes(mutated)
    try:
        p = params_mod.load(path)
    except params_mod.ParamsError as e:
        REFUSED["params.yaml"] += 1
        assert_one_line(e, ("params",), None)
        return
    check_params_invariants(p)


@pytest.mark.parametrize("text, expected", [
    (b"round: t\nd\nrows: 1\n", "params: <root>: params.yaml:3: invalid YAML: could not find expected ':'"),
    (b"\xa3 comment\nround: t\n", "params: <root>: params.yaml:1: not UTF-8 text (byte 0)")])
def test_params_load_refuses_in_one_line(tmp_path, text, expected):
    path = tmp_path / "params.yaml"
    path.write_bytes(text)
    with pytest.raises(params_mod.ParamsError) as e:
        params_mod.load(path)
    assert str(e.value) == expected


# ------------------------------------------------- params.yaml structure (issue: one spelling)

_KEY_LINE = re.compile(r"^( *)([A-Za-z_]\w*):(.*)$")
_SECTIONS = ("reference", "gate", "stats")


def _scalar_lines(text: str) -> list[int]:
    """Indices of the lines ``key: value`` holding a scalar value (not a block opener)."""
    return [i for i, line in enumerate(text.splitlines())
            if (m := _KEY_LINE.match(line)) and m.group(3).strip()]


def structure_edit(data, text: str) -> tuple[str, str]:
    """One change to the structure of params.yaml text: (new text, kind of change)."""
    lines = text.splitlines(keepends=True)
    kind = data.draw(st.sampled_from(["duplicate", "nested_duplicate", "dotted", "alias",
                                      "long", "path", "round"]))
    value = data.draw(st.sampled_from(["exact", "ref", "1", "[1, 2]", "''", "run", "smoke"]))
    if kind == "duplicate":
        top = [m.group(2) for line in lines if (m := _KEY_LINE.match(line)) and not m.group(1)]
        key = data.draw(st.sampled_from(top))
        at = data.draw(st.integers(0, len(lines)))
        where = at if at == len(lines) or not lines[at].startswith(" ") else len(lines)
        lines.insert(where, f"{key}: {value}\n")
    elif kind == "nested_duplicate":
        nested = [i for i, line in enumerate(lines) if line.startswith("  ")
                  and _KEY_LINE.match(line)]
        i = data.draw(st.sampled_from(nested))
        key = _KEY_LINE.match(lines[i]).group(2)
        j = i + 1
        while j < len(lines) and lines[j].startswith("  -"):
            j += 1
        lines.insert(j, f"  {key}: {value}\n")
    elif kind == "dotted":
        sec = data.draw(st.sampled_from(_SECTIONS))
        key = data.draw(st.sampled_from([k.split(".", 1)[1] for k in params_mod.SCHEMA
                                         if k.startswith(sec + ".")]))
        q = data.draw(st.sampled_from(['"', "'", ""]))
        lines.append(f"{q}{sec}.{key}{q}: {value}\n")
    elif kind == "alias":
        idx = _scalar_lines(text)
        i = data.draw(st.sampled_from(idx))
        m = _KEY_LINE.match(lines[i].rstrip("\n"))
        name = data.draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True))
        lines[i] = f"{m.group(1)}{m.group(2)}: &{name} {m.group(3).strip()}\n"
        if data.draw(st.booleans()):
            j = data.draw(st.sampled_from([k for k in idx if k != i]))
            m2 = _KEY_LINE.match(lines[j].rstrip("\n"))
            lines[j] = f"{m2.group(1)}{m2.group(2)}: *{name}\n"
    elif kind == "long":
        i = data.draw(st.sampled_from(_scalar_lines(text)))
        m = _KEY_LINE.match(lines[i].rstrip("\n"))
        n = data.draw(st.sampled_from([100, 1000, 30000, 70000]))
        ch = data.draw(st.sampled_from(["x", "1", "\u00e9", " "]))
        lines[i] = f"{m.group(1)}{m.group(2)}: {json.dumps(ch * n)}\n"
    elif kind == "path":
        parts = data.draw(st.lists(st.sampled_from(["..", ".", "data", "published", "round3",
                                                    "x", "", "~", "/", "a\\b", "tests"]),
                                   min_size=1, max_size=6))
        src = "/".join(parts)
        lines = [f"  source: {json.dumps(src)}\n" if line.startswith("  source:") else line
                 for line in lines]
    else:
        name = data.draw(st.one_of(
            st.from_regex(r"[A-Za-z0-9_-]{1,70}", fullmatch=True),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]),
                    max_size=90)))
        lines = [f"round: {json.dumps(name)}\n" if line.startswith("round:") else line
                 for line in lines]
    return "".join(lines), kind


def check_structure_invariants(raw: bytes):
    """Independent of params.load: the accepted text has one spelling per parameter."""
    events = list(yaml.parse(raw.decode()))
    assert not any(isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None) for e in events)

    def walk(node, depth=1):
        assert depth <= params_mod.MAX_DEPTH
        if isinstance(node, yaml.MappingNode):
            keys = [k.value for k, _ in node.value]
            assert all(isinstance(k, yaml.ScalarNode) for k, _ in node.value)
            assert len(keys) == len(set(keys)), keys
            assert not any("." in k or k == "<<" for k in keys), keys
            for _, v in node.value:
                walk(v, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                walk(v, depth + 1)
    walk(yaml.compose(raw.decode()))


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_params_yaml_structure(tmp_path_factory, data):
    text, kind = structure_edit(data, (REPO / "params.yaml").read_text())
    key = f"params.yaml {kind}"
    TRIED[key] += 1
    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_bytes(text.encode())
    t0 = time.monotonic()
    try:
        p = params_mod.load(path)
    except params_mod.ParamsError as e:
        REFUSED[key] += 1
        assert time.monotonic() - t0 < 5
        msg = str(e)
        assert "\n" not in msg and msg.startswith("params: ") and len(msg) <= 400, msg
        return
    check_structure_invariants(path.read_bytes())
    check_params_invariants(p)
    assert params_mod.ROUND_PATTERN.fullmatch(p["round"])
    src = p["reference"]["source"]
    assert src == "run" or (".." not in src.split("/") and not src.startswith(("/", "~"))
                            and "\\" not in src)


# ------------------------------------------------- a run's files against each other and the round

_PROTOCOL = {"rows": [1200, 2400, 800], "eval_every": [400, 800], "eval_episodes": [2, 3],
             "profile": ["smoke", "full"], "decode": ["exact", "ref"], "seed": [0, 1, 2]}


def agreement_edit(data, d: Path) -> str:
    """One change that may make a run's files disagree; returns its kind."""
    kind = data.draw(st.sampled_from(["done_failed", "run_seed", "run_side", "run_param",
                                      "done_keys", "done_value"]))
    run = json.loads((d / "run.json").read_text())
    done = json.loads((d / records.DONE).read_text())
    reclose = data.draw(st.booleans())
    if kind == "done_failed":
        records.write_done(d, "failed", "non-finite loss")
        return kind
    if kind == "run_seed":
        run["seed"] = data.draw(st.sampled_from([0, 1, 2]))
    elif kind == "run_side":
        run["side"] = data.draw(st.sampled_from(list(records.SIDES)))
    elif kind == "run_param":
        k = data.draw(st.sampled_from(sorted(_PROTOCOL)))
        run["args"][k] = data.draw(st.sampled_from(_PROTOCOL[k]))
    elif kind == "done_keys":
        for k in data.draw(st.lists(st.sampled_from(records.DONE_RUN_KEYS), unique=True)):
            done.pop(k, None)
        records.write_json(d / records.DONE, done)
        return kind
    else:
        k = data.draw(st.sampled_from(records.DONE_RUN_KEYS))
        done[k] = data.draw(st.sampled_from({"side": list(records.SIDES), "seed": [0, 1, 2],
                                             "run_sha256": ["0" * 64, done["run_sha256"]]}[k]))
        records.write_json(d / records.DONE, done)
        return kind
    records.write_json(d / "run.json", run)
    if reclose:
        try:
            records.write_done(d, done["status"], done.get("reason"))
        except records.RecordError:
            pass
    return kind


def check_agreement_invariants(d: Path, side: str, seed: int, params: dict):
    """Independent of the readers: what an accepted run's raw files must say."""
    run = json.loads((d / "run.json").read_text())
    done = json.loads((d / records.DONE).read_text())
    assert run.get("side", side) == side and run.get("seed", seed) == seed
    named = [k for k in records.DONE_RUN_KEYS if k in done]
    if named:
        assert (done["side"], done["seed"]) == (side, seed)
        import hashlib
        assert done["run_sha256"] == hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    for k in ("rows", "eval_every", "eval_episodes", "profile", "decode"):
        assert run["args"][k] == params[k], k
    recs = _raw_jsonl(d / "records.jsonl")
    complete = [r["rows"] for r in recs] == params_mod.eval_points(params) and all(
        r["status"] == "ok" for r in recs)
    assert not (done["status"] == "failed" and complete)
    return not named


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_run_files_agree_or_are_refused(round_dir, data):
    d = round_dir / "candidate" / "s1"
    saved = {name: (d / name).read_bytes() for name in ("run.json", records.DONE)}
    try:
        kind = agreement_edit(data, d)
        key = f"run agreement {kind}"
        TRIED[key] += 1
        try:
            runs = load.load_side(round_dir / "candidate", "candidate", PARAMS["seeds"],
                                  round_=ROUND)
            load.check_eval_rows(runs, params_mod.eval_points(PARAMS))
        except (records.RecordError, AnalysisError) as e:
            REFUSED[key] += 1
            assert_one_line(e, ("candidate/s1/run.json", "candidate/s1/DONE.json"), None)
            return
        legacy = check_agreement_invariants(d, "candidate", 1, PARAMS)
        ref = load.load_side(round_dir / "reference", "reference", PARAMS["seeds"])
        mine = [c for c in checks.run_checks(ROUND, ref, runs)
                if c.side == "candidate" and c.seed == 1 and c.name == "completion marker"]
        assert mine[0].status == ("FLAG" if legacy else "PASS"), mine[0].line()
    finally:
        for name, b in saved.items():
            (d / name).write_bytes(b)


# ------------------------------------------------- the environment's ranges (issue #57, 1)

_NUMBERS = st.one_of(st.integers(-10 ** 6, 10 ** 6), st.integers(-2 ** 80, 2 ** 80),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from([0, 1, 500, 501, 600, 1e308, -1e308, 499.5, 1.0, 500.0]))


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_returns_and_lengths_outside_the_environment_are_refused(data, tmp_path_factory):
    """A consistent record (the mean recomputed) whose return or length the environment
    cannot produce is refused naming the file, the line and the field; one it can produce
    is read.  The same for a published evaluation and a training episode."""
    root = tmp_path_factory.mktemp("env")
    where = data.draw(st.sampled_from(["eval_returns", "eval_lengths", "published returns",
                                       "published lengths", "published mean only",
                                       "episode length", "episode score"]))
    v = data.draw(_NUMBERS)
    TRIED[f"range {where}"] += 1
    ok = _env_value(v) if where != "published mean only" else (
        math.isfinite(v) and 1 <= v <= 500)
    if "length" in where:        # a length is also an integer by type
        ok = ok and isinstance(v, int)
    if where.startswith("episode"):
        d = synthetic.write_run(root, "candidate", 0, PARAMS)
        path = d / "episodes.jsonl"
        eps = _raw_jsonl(path)
        field = where.split()[1]
        eps[1][field] = v
        if field == "length":
            eps[1]["score"] = float(v) if isinstance(v, (int, float)) else v
        records.write_jsonl(path, eps)
        read = lambda: records.read_episodes(d)                      # noqa: E731
        line, name = 2, field
    elif where.startswith("published"):
        src = _raw_jsonl(REF_EVALS)[:3]
        obj = src[1]
        if where == "published mean only":
            obj["returns"], obj["lengths"], obj["len_mean"] = None, None, None
            obj["mean"], name = v, "mean"
        else:
            key = where.split()[1]
            obj[key][0] = v
            mean_key = "mean" if key == "returns" else "len_mean"
            if all(isinstance(x, (int, float)) for x in obj[key]):
                obj[mean_key] = math.fsum(obj[key]) / len(obj[key]) if abs(v) < 1e300 else v
            name = key
        path = root / "evals.jsonl"
        path.write_text("".join(json.dumps(o) + "\n" for o in src))
        read = lambda: published.read_evals(path)                    # noqa: E731
        line = 2
    else:
        d = synthetic.write_run(root, "candidate", 0, PARAMS)
        path = d / "records.jsonl"
        recs = _raw_jsonl(path)
        recs[1][where][0] = v
        mean_key = "eval_mean" if where == "eval_returns" else "eval_len_mean"
        if abs(v) < 1e300:
            recs[1][mean_key] = math.fsum(recs[1][where]) / len(recs[1][where])
        records.write_jsonl(path, recs)
        read = lambda: records.read_records(d)                       # noqa: E731
        line, name = 2, where
    t0 = time.monotonic()
    try:
        read()
    except records.RecordError as e:
        REFUSED[f"range {where}"] += 1
        msg = str(e)
        assert not ok, msg
        assert "\n" not in msg, msg
        # the file, the line and the field named (a number past the bound of every number
        # read: the first in the line, the list item 'eval_returns[0]' or its mean)
        also = {"eval_returns": "eval_mean", "eval_lengths": "eval_len_mean",
                "returns": "mean", "lengths": "len_mean", "length": "score"}.get(name, name)
        assert re.search(rf"{re.escape(path.name)}:{line}: field '({name}|{also})", msg), msg
        assert time.monotonic() - t0 < 5
        return
    assert ok, (where, v)


# ---------------------------------------- a file's type and size (issue #57, 2): every kind

def _kept_round(root: Path) -> dict:
    """A repository stand-in: a kept candidate run, the published round 3's reference
    seed 0 with its round's auxiliary files, tables.csv, params.yaml, the index and a
    pre-registration; ``{kind: (path, read)}`` for every file kind a round reads."""
    from dreamer_parity import keep, manifest, preflight, rounds
    from dreamer_parity.analysis import published_tables

    made = synthetic.write_run(root / "made", "candidate", 0, PARAMS)
    kept, _ = keep.keep(made, root / "data" / "runs" / "k")
    pub = root / "data" / "published"
    r3 = REPO / "data" / "published" / "round3"
    for rel in ("ref_s0/evals.jsonl", "ref_s0/run_args.json", "ref_s0/timing.json",
                "ref_s0/PATCH.txt", "launch_info.txt", "ajax/config.json", "ajax/timing.json",
                "ajax/s0/evals.jsonl"):
        (pub / "round3" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(r3 / rel, pub / "round3" / rel)
    shutil.copy(REPO / "data" / "published" / "tables.csv", pub / "tables.csv")
    manifest.write(pub / "round3")
    manifest.write(pub)
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    (root / "docs" / "rounds").mkdir(parents=True)
    shutil.copy(REPO / "docs" / "rounds" / "index.yaml", root / "docs" / "rounds" / "index.yaml")
    (root / "docs" / "rounds" / "t.md").write_text("# t\n")
    kept_read = lambda: sides.locate(kept.parent, "candidate", 0, "k",   # noqa: E731
                                     require_manifest=True) and records.read_run(kept)
    pub_read = lambda: published.load_run(pub / "round3", "reference", 0)  # noqa: E731
    return {
        "records.jsonl.gz": (kept / "records.jsonl.gz", kept_read),
        "episodes.jsonl.gz": (kept / "episodes.jsonl.gz", kept_read),
        "run.json": (kept / "run.json", kept_read),
        "DONE.json": (kept / "DONE.json", kept_read),
        "timing.json": (kept / "timing.json", kept_read),
        "MANIFEST.json": (kept / "MANIFEST.json", kept_read),
        "published evals.jsonl": (pub / "round3" / "ref_s0" / "evals.jsonl", pub_read),
        "run_args.json": (pub / "round3" / "ref_s0" / "run_args.json", pub_read),
        "published timing.json": (pub / "round3" / "ref_s0" / "timing.json", pub_read),
        "PATCH.txt": (pub / "round3" / "ref_s0" / "PATCH.txt", pub_read),
        "launch_info.txt": (pub / "round3" / "launch_info.txt", pub_read),
        "config.json": (pub / "round3" / "ajax" / "config.json",
                        lambda: published.load_run(pub / "round3", "candidate", 0)),
        "published MANIFEST.json": (pub / "round3" / "MANIFEST.json", pub_read),
        "tables.csv": (pub / "tables.csv",
                       lambda: published_tables.read_table(pub / "tables.csv")),
        "params.yaml": (root / "params.yaml", lambda: preflight.load("params.yaml", root)),
        "index.yaml": (root / "docs" / "rounds" / "index.yaml",
                       lambda: rounds.load_index(root)),
        "pre-registration": (root / "docs" / "rounds" / "t.md",
                             lambda: preflight.check_prereg("t", root)),
    }


_REFUSALS = (records.RecordError, AnalysisError, sides.SideError, params_mod.ParamsError)


def _refusal_types():
    from dreamer_parity import preflight, rounds
    return _REFUSALS + (rounds.RoundsError, preflight.PreflightError)


@pytest.fixture(scope="module")
def kept_round():
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        kinds = _kept_round(root)
        os.chdir(root)     # the stand-in is the repository the stages run in
        try:
            for path, read in kinds.values():
                read()     # every kind reads as it is
            yield root, kinds
        finally:
            os.chdir(cwd)


_CORRUPTIONS = ["directory", "fifo", "dev_zero", "outside", "dangling", "sparse", "grown",
                "empty", "gzip_bomb"]


@pytest.mark.parametrize("kind", ["records.jsonl.gz", "episodes.jsonl.gz", "run.json",
                                  "DONE.json", "timing.json", "MANIFEST.json",
                                  "published evals.jsonl", "run_args.json",
                                  "published timing.json", "PATCH.txt", "launch_info.txt",
                                  "config.json", "published MANIFEST.json", "tables.csv",
                                  "params.yaml", "index.yaml", "pre-registration"])
@settings(settings.get_profile(PROFILE), max_examples=12)
@given(data=st.data())
def test_a_file_of_another_type_or_size_is_refused_before_it_is_read(kept_round, kind, data):
    """Each file kind a round reads, replaced by a directory, a fifo, a link to /dev/zero,
    a link out of the repository, a dangling link, a sparse file far over its cap, a file
    just over its cap, an empty file, or (compressed kinds) a gzip bomb: refused with one
    line naming the file, within seconds, never read whole; or (an empty file) harmless."""
    root, kinds = kept_round
    path, read = kinds[kind]
    how = data.draw(st.sampled_from(_CORRUPTIONS))
    if how == "gzip_bomb" and not path.name.endswith(".gz"):
        how = "sparse"
    TRIED[f"type {how}"] += 1
    saved = path.read_bytes()
    outside = Path(tempfile.mkdtemp())
    try:
        path.unlink()
        if how == "directory":
            path.mkdir()
        elif how == "fifo":
            os.mkfifo(path)
        elif how == "dev_zero":
            path.symlink_to("/dev/zero")
        elif how == "outside":
            (outside / path.name).write_bytes(saved)
            path.symlink_to(outside / path.name)
        elif how == "dangling":
            path.symlink_to(root / "no-such-file")
        elif how == "sparse":
            with open(path, "wb") as f:
                f.truncate(data.draw(st.sampled_from([2 ** 31, 10 ** 10])))
        elif how == "grown":
            cap = params_mod.MAX_FILE_BYTES if kind == "params.yaml" else \
                records.MAX_BYTES[records.file_kind(path)]
            path.write_bytes(saved + b" " * (cap + 1 - len(saved)))
        elif how == "empty":
            path.write_bytes(b"")
        else:
            import gzip
            path.write_bytes(gzip.compress(b"\n" * (records.MAX_DECOMPRESSED + 10)))
        t0 = time.monotonic()
        try:
            read()
        except _refusal_types() as e:
            REFUSED[f"type {how}"] += 1
            msg = str(e)
            assert "\n" not in msg and len(msg) <= 500, msg
            assert path.name in msg or str(path.parent.name) in msg, (how, msg)
            assert time.monotonic() - t0 < 10, how
            return
        assert how == "empty" and kind in ("PATCH.txt", "launch_info.txt",
                                           "pre-registration"), (kind, how)
    finally:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        elif path.exists() or path.is_symlink():
            path.unlink()
        path.write_bytes(saved)
        shutil.rmtree(outside)


# ------------------------- a kept run and the study's files cannot change unseen (#57, 6)

KEPT_FILES = {"records.jsonl.gz": "jsonl", "episodes.jsonl.gz": "jsonl", "run.json": "json",
              "DONE.json": "json", "timing.json": "json"}


@pytest.fixture(scope="module")
def kept_dir():
    from dreamer_parity import keep
    with tempfile.TemporaryDirectory() as d:
        made = synthetic.write_run(Path(d) / "made", "candidate", 0, PARAMS)
        kept, _ = keep.keep(made, Path(d) / "data" / "runs" / "k")
        yield kept


@pytest.mark.parametrize("name", list(KEPT_FILES))
@settings(settings.get_profile(PROFILE), max_examples=40)
@given(data=st.data())
def test_a_kept_file_changed_is_refused_by_its_manifest(kept_dir, name, data):
    """Any change to a kept file (a value in range, a line, a byte) is refused by the
    manifest, naming the file; resealed, the change meets the readers behind it, which
    refuse it or read a run that satisfies the invariants."""
    import gzip
    from dreamer_parity import manifest

    path = kept_dir / name
    original = path.read_bytes()
    plain = gzip.decompress(original) if name.endswith(".gz") else original
    mutated, op = mutate(data, plain, KEPT_FILES[name])
    stored = records.gzip_bytes(mutated) if name.endswith(".gz") else mutated
    key = f"kept {name}"
    TRIED[key] += 1
    try:
        path.write_bytes(stored)
        if stored != original:
            with pytest.raises(records.RecordError) as e:
                sides.locate(kept_dir.parent, "candidate", 0, "k", require_manifest=True)
            assert str(e.value).startswith(f"{kept_dir}/{name}: its SHA-256 is not the one")
            REFUSED[key] += 1
        synthetic.reseal(kept_dir)
        try:
            sides.locate(kept_dir.parent, "candidate", 0, "k", require_manifest=True)
            run = records.read_run(kept_dir)
        except (records.RecordError, sides.SideError):
            return
        assert manifest.verify(kept_dir)
        for r in run["records"]:
            assert all(map(_env_value, r["eval_returns"] + r["eval_lengths"]))
            assert _mean_ok(r["eval_mean"], r["eval_returns"])
        for e in run["episodes"]:
            assert _env_value(e["length"]) and _env_value(e["score"])
    finally:
        path.write_bytes(original)
        synthetic.reseal(kept_dir)


@settings(settings.get_profile(PROFILE), max_examples=60)
@given(data=st.data())
def test_a_mutated_manifest_is_refused_or_still_names_every_file(kept_dir, data):
    """A changed MANIFEST.json is refused in one line, or (a change that keeps it
    meaning the same) lists every file of the directory with its SHA-256."""
    import hashlib
    from dreamer_parity import manifest

    path = kept_dir / manifest.NAME
    original = path.read_bytes()
    mutated, op = mutate(data, original, "json")
    TRIED["MANIFEST.json"] += 1
    try:
        path.write_bytes(mutated)
        try:
            manifest.verify(kept_dir)
        except records.RecordError as e:
            REFUSED["MANIFEST.json"] += 1
            assert "\n" not in str(e) and str(kept_dir) in str(e)
            return
        files = json.loads(mutated)["files"]
        assert sorted(files) == sorted(p.name for p in kept_dir.iterdir()
                                       if p.name != manifest.NAME)
        for n, digest in files.items():
            assert hashlib.sha256((kept_dir / n).read_bytes()).hexdigest() == digest
    finally:
        path.write_bytes(original)


# ------------------------------------------ the study's auxiliary files (issue #57, 2)

PUB_AUX = {"ref_s0/run_args.json": "json", "ref_s0/timing.json": "json",
           "ref_s0/PATCH.txt": "text", "launch_info.txt": "text",
           "ajax/config.json": "json", "ajax/timing.json": "json"}


@pytest.fixture(scope="module")
def pub_round():
    with tempfile.TemporaryDirectory() as d:
        dest = Path(d) / "round3"
        shutil.copytree(REPO / "data" / "published" / "round3", dest)
        yield dest


def _mutate_text(data, raw: bytes) -> bytes:
    op = data.draw(st.sampled_from(["truncate", "flip", "insert", "bom", "crlf", "nul"]))
    if op == "truncate":
        return raw[:data.draw(st.integers(0, max(0, len(raw) - 1)))]
    i = data.draw(st.integers(0, max(0, len(raw) - 1)))
    if op == "flip":
        return raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1:]
    if op == "insert":
        return raw[:i] + data.draw(st.binary(min_size=1, max_size=8)) + raw[i:]
    if op == "bom":
        return b"\xef\xbb\xbf" + raw
    if op == "crlf":
        return raw.replace(b"\n", b"\r\n")
    return raw[:i] + b"\x00" + raw[i:]


@pytest.mark.parametrize("rel", list(PUB_AUX))
@settings(settings.get_profile(PROFILE), max_examples=30)
@given(data=st.data())
def test_a_published_auxiliary_file_corrupted_is_refused_or_harmless(pub_round, rel, data):
    """run_args.json, timing.json, PATCH.txt, launch_info.txt, config.json: a changed
    field, line or byte is refused by the round's manifest; resealed, it is refused in
    one line naming the file, or it is harmless: the run reads with the same evaluations
    and its checks run."""
    path = pub_round / rel
    original = path.read_bytes()
    if PUB_AUX[rel] == "json" and data.draw(st.booleans()):
        mutated, op = mutate(data, original, "json")
    else:
        mutated = _mutate_text(data, original)
    made_by = "candidate" if rel.startswith("ajax") else "reference"
    key = f"published {rel}"
    TRIED[key] += 1
    before = published.load_run(pub_round, made_by, 0).evals
    try:
        path.write_bytes(mutated)
        if mutated != original:
            with pytest.raises(records.RecordError, match=r"its SHA-256 is not the one"):
                published.load_run(pub_round, made_by, 0)
        synthetic.reseal(pub_round)
        try:
            run = published.load_run(pub_round, made_by, 0)
        except (records.RecordError, AnalysisError) as e:
            REFUSED[key] += 1
            assert "\n" not in str(e) and path.name in str(e), str(e)
            return
        assert run.evals.equals(before)
        checks.run_checks(PUB_ROUND, [run] if made_by == "reference" else [],
                          [run] if made_by == "candidate" else [])
    finally:
        path.write_bytes(original)
        synthetic.reseal(pub_round)


# ------------------------------------------------ the index of kept rounds (issue #57, 4)

@settings(settings.get_profile(PROFILE), max_examples=80)
@given(data=st.data())
def test_index_mutations_are_refused_or_keep_one_entry_per_name(tmp_path_factory, data):
    """docs/rounds/index.yaml with an entry repeated, a line dropped or a byte changed:
    refused in one line naming the file (a repeated name with both entries' lines), or
    read with each name once (checked on the raw YAML nodes)."""
    from dreamer_parity import rounds

    root = tmp_path_factory.mktemp("idx")
    (root / "docs" / "rounds").mkdir(parents=True)
    text = (REPO / rounds.INDEX).read_text()
    lines = text.splitlines(keepends=True)
    op = data.draw(st.sampled_from(["repeat", "drop", "flip", "swap"]))
    entries = [i for i, line in enumerate(lines) if line[:1].isalnum()]
    if op == "repeat":
        i = data.draw(st.sampled_from(entries))
        block = lines[i:i + 3]
        lines += block if data.draw(st.booleans()) else []
        lines.insert(data.draw(st.sampled_from(entries + [len(lines)])), "".join(block))
        mutated = "".join(lines).encode()
    elif op == "drop":
        del lines[data.draw(st.integers(0, len(lines) - 1))]
        mutated = "".join(lines).encode()
    elif op == "swap":
        i, j = data.draw(st.integers(0, len(lines) - 1)), data.draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        mutated = "".join(lines).encode()
    else:
        raw = text.encode()
        i = data.draw(st.integers(0, len(raw) - 1))
        mutated = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1:]
    (root / rounds.INDEX).write_bytes(mutated)
    TRIED[f"index {op}"] += 1
    try:
        idx = rounds.load_index(root)
    except rounds.RoundsError as e:
        REFUSED[f"index {op}"] += 1
        msg = str(e)
        assert "\n" not in msg and msg.startswith(rounds.INDEX), msg
        m = re.search(r"round '([^']+)' given twice \(first at line (\d+)\)", msg)
        if m:
            assert re.match(rf"{re.escape(rounds.INDEX)}:(\d+): ", msg)
        return
    node = yaml.compose(mutated.decode())
    names = [k.value for k, _ in node.value]
    assert len(names) == len(set(names)) == len(idx), names
