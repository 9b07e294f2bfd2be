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


def check_records_invariants(path: Path, params: dict, eval_fail: bool):
    grid = params_mod.eval_points(params)
    recs = _raw_jsonl(path)
    rows = [r["rows"] for r in recs]
    assert rows == grid, rows                     # the round's grid, strictly increasing
    for r in recs:
        assert _finite(r)
        assert _mean_ok(r["eval_mean"], r["eval_returns"])
        assert _mean_ok(r["eval_len_mean"], r["eval_lengths"])
        assert eval_fail or len(r["eval_returns"]) == params["eval_episodes"]


def check_episodes_invariants(path: Path):
    for e in _raw_jsonl(path):
        assert _finite(e)
        for k in ("seed", "worker", "row_last", "length"):
            assert isinstance(e[k], int) and 0 <= e[k] <= 2 ** 53


def check_published_invariants(path: Path, params: dict, eval_fail: bool):
    rows = _raw_jsonl(path)
    assert [r["rows"] for r in rows] == params_mod.eval_points(params)
    for r in rows:
        assert _finite(r)
        if r.get("returns") is not None:
            assert _mean_ok(r["mean"], r["returns"])
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
    if not REF_EVALS.is_file():
        pytest.skip("data/published/round3 not present (make published)")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "ref_s0").mkdir()
        shutil.copy(REF_EVALS, Path(d) / "ref_s0" / "evals.jsonl")
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
    return checks.run_checks(PARAMS, ref, cand)


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
        try:
            run = published.load_run(pub_dir, "reference", 0)
            load.check_eval_rows([run], params_mod.eval_points(PUB_PARAMS))
        except (records.RecordError, AnalysisError) as e:
            REFUSED["evals.jsonl"] += 1
            assert_one_line(e, ("evals.jsonl", "ref_s0"), mutated.count(b"\n"))
            return
        cs = checks.run_checks(PUB_PARAMS, [run], [])
        eval_fail = any(c.status == "FAIL" and "episodes" in c.name for c in cs)
        check_published_invariants(path, PUB_PARAMS, eval_fail)
    finally:
        path.write_bytes(original)


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
                                  params=PARAMS)
            load.check_eval_rows(runs, params_mod.eval_points(PARAMS))
        except (records.RecordError, AnalysisError) as e:
            REFUSED[key] += 1
            assert_one_line(e, ("candidate/s1/run.json", "candidate/s1/DONE.json"), None)
            return
        legacy = check_agreement_invariants(d, "candidate", 1, PARAMS)
        ref = load.load_side(round_dir / "reference", "reference", PARAMS["seeds"])
        mine = [c for c in checks.run_checks(PARAMS, ref, runs)
                if c.side == "candidate" and c.seed == 1 and c.name == "completion marker"]
        assert mine[0].status == ("FLAG" if legacy else "PASS"), mine[0].line()
    finally:
        for name, b in saved.items():
            (d / name).write_bytes(b)
