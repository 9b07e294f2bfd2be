"""The round resolved once (dreamer_parity.round_spec): a frozen object built from
validated params, each side's seeds decided in its construction, received by the
consumers in place of the params dict."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity import records
from dreamer_parity.round_spec import Round, SourcePart

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "dreamer_parity"

UNEQUAL = {"round": "t", "seeds": [3, 1, 0, 2], "rows": 1200, "eval_every": 400,
           "eval_episodes": 2, "profile": "smoke",
           "candidate": {"seeds": [6, 5, 4, 3, 2, 1, 0],
                         "source": [{"from": "data/runs/tpu", "seeds": [6, 4, 5]},
                                    {"from": "run", "seeds": [3, 1, 2, 0]}]},
           "reference": {"source": "data/published/round1", "sampler": "per_run"},
           "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                     "concordance_range": [400, 1200], "late_rows": [800, 1200]},
           "gate": {"statistic": "late", "learns": True, "welch_p_min": 0.05}}


def _round(raw=UNEQUAL) -> Round:
    return Round.from_params(P.validate(json.loads(json.dumps(raw))))


def test_a_round_is_frozen_and_its_params_a_copy():
    r = _round()
    for obj, name, value in ((r, "name", "x"), (r.protocol, "rows", 2400),
                             (r.candidate, "seeds", (0,)), (r.stats, "s1_rows", (400,)),
                             (r.gate, "learns", False), (r.reference_run, "sampler", "stock"),
                             (r.candidate.parts[0], "origin", "run")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, value)
    assert isinstance(r.candidate.seeds, tuple) and isinstance(r.stats.late_rows, tuple)
    p = r.to_params()
    p["seeds"].append(9)
    p["stats"]["s1_rows"] = [1200]
    assert r.reference.seeds == (0, 1, 2, 3) and r.stats.s1_rows == (400, 800, 1200)
    assert r.to_params()["seeds"] == [0, 1, 2, 3]
    assert hash(r) == hash(_round())


def test_each_side_its_seeds_sources_and_decode():
    r = _round()
    assert r.name == "t"
    assert (r.reference.seeds, r.candidate.seeds) == ((0, 1, 2, 3), (0, 1, 2, 3, 4, 5, 6))
    assert r.seeds() == {"reference": [0, 1, 2, 3], "candidate": [0, 1, 2, 3, 4, 5, 6]}
    assert r.reference.parts == (SourcePart("data/published/round1", (0, 1, 2, 3)),)
    assert r.reference.listed is False and r.candidate.listed is True
    assert r.candidate.parts == (SourcePart("run", (0, 1, 2, 3)),
                                 SourcePart("data/runs/tpu", (4, 5, 6)))
    assert r.candidate.origins() == {0: "run", 1: "run", 2: "run", 3: "run",
                                     4: "data/runs/tpu", 5: "data/runs/tpu", 6: "data/runs/tpu"}
    assert r.candidate.runs_here() == (0, 1, 2, 3) and r.reference.runs_here() == ()
    assert (r.candidate.decode, r.reference.decode) == ("exact", "ref")
    assert r.side("candidate") is r.candidate and r.side("reference") is r.reference
    with pytest.raises(ValueError, match=r"^side must be one of \('reference', 'candidate'\), "
                                         r"got 'study'$"):
        r.side("study")


def test_protocol_statistics_and_gate_of_params_yaml():
    r = P.load_round(REPO / "params.yaml")
    assert r.name == "round3-candidate"
    pr = r.protocol
    assert (pr.profile, pr.rows, pr.eval_every, pr.eval_episodes) == ("full", 24000, 400, 10)
    assert pr.points == tuple(range(400, 24001, 400)) and len(pr.points) == 60
    assert (r.reference_run.sampler, r.reference_run.jax, r.reference_run.platform,
            r.reference_run.precision) == ("per_run", "0.4.26", "cpu", "default")
    st = r.stats
    assert (st.s1_rows, st.late_rows, st.good_return) == ((16000, 18000, 20000),
                                                          (12000, 24000), 400.0)
    assert (st.concordance_rows, st.concordance_range) == ((20000, 24000), (16000, 24000))
    assert (st.equivalence_margin, st.signature_rows, st.persistence_rows, st.failed_rule) == \
        (0.1, (), (), "zero")
    g = r.gate
    assert (g.statistic, g.learns, g.mean_min, g.welch_p_min, g.entropy_overlap_rows) == \
        ("late", True, None, 0.05, None)
    assert r.to_params() == P.load(REPO / "params.yaml")


def test_the_same_seeds_in_another_order_give_the_same_round():
    raw = json.loads(json.dumps(UNEQUAL))
    raw["seeds"] = [0, 1, 2, 3]
    raw["candidate"]["source"] = list(reversed(raw["candidate"]["source"]))
    assert _round(raw) == _round()


def test_kept_rounds_seeds_per_side_are_the_rounds_rule():
    """Every kept round's params.yaml (docs/rounds/index.yaml, at its own commit): the
    reference side has the round's seeds, the candidate side ``candidate.seeds`` where it
    names its own list, else the round's; each seed has one origin."""
    from dreamer_parity import rounds
    own_lists = {}
    for name, entry in rounds.load_index(REPO).items():
        text = subprocess.run(["git", "show", f"{entry['commit']}:params.yaml"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout
        raw = yaml.safe_load(text)
        listed = (raw.get("candidate") or {}).get("seeds")
        r = Round.from_params(P.validate(raw, where=f"{entry['commit'][:7]}:params.yaml"))
        assert r.reference.seeds == tuple(sorted(raw["seeds"])), name
        assert r.candidate.seeds == tuple(sorted(raw["seeds"] if listed is None else listed)), \
            name
        for side in (r.reference, r.candidate):
            assert list(side.origins()) == list(side.seeds), name
        if listed is not None:
            own_lists[name] = (r.candidate.seeds, r.reference.seeds)
    # part B of the reference's platform check is the kept round with a side list of its own
    assert own_lists.get("round3-ref-tpu-windows") == (tuple(range(10)), (5, 6, 7, 8, 9))


def test_consumers_receive_the_round():
    """The last-window metrics take each side's seeds from the round, and a run's expected
    protocol comes from it (the side's decode, the reference's sampler)."""
    from dreamer_parity.analysis.last_window import last_window_metrics

    r = _round()
    runs = {side: [SimpleNamespace(seed=s, train=pd.DataFrame({"val/std": [0.5 + s]},
                                                              index=[1200]))
                   for s in r.side(side).seeds] for side in ("reference", "candidate")}
    out = last_window_metrics(r, {k: {"runs": v} for k, v in runs.items()}, names=("val/std",))
    assert out["rows"] == 1200
    assert [k for k in out if k.startswith("val/std.candidate.s")] == [
        f"val/std.candidate.s{s}" for s in range(7)]
    assert out["val/std.reference.mean"] == pytest.approx(2.0)
    assert out["val/std.candidate.mean"] == pytest.approx(3.5)
    assert records.protocol_expected(r, "reference", 2) == {
        ("seed",): 2, ("profile",): "smoke", ("rows",): 1200, ("eval_every",): 400,
        ("eval_episodes",): 2, ("reference.decode", "decode"): "ref",
        ("reference.sampler", "sampler"): "per_run"}
    assert records.protocol_expected(r, "candidate", 5, made_by="candidate")[("decode",)] == \
        "exact"


def test_a_sides_seeds_are_decided_in_one_place():
    """``own_seeds`` (the rule) is called by the Round's construction and by the check of a
    list-form source in params.validate, nowhere else in the package."""
    callers = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name == "own_seeds":
                    callers.append(path.relative_to(SRC).as_posix())
    assert callers == ["params.py", "round_spec.py"]
    assert not hasattr(P, "side_seeds")
