"""params.yaml schema: defaults, one-line errors naming the key, values as DVC writes them."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity.params import ParamsError, eval_points, load, validate
import synthetic  # tests/synthetic.py
from dreamer_parity.round_spec import Round

REPO = Path(__file__).resolve().parents[1]
#: Round 1's params file: the base the tests below edit.
ROUND1 = REPO / "tests" / "fixtures" / "params_round1.yaml"


def _defaults_raw() -> dict:
    return yaml.safe_load(ROUND1.read_text())


_set = synthetic.with_key


def _error(raw) -> str:
    with pytest.raises(ParamsError) as e:
        validate(raw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_repository_params_file_is_the_round3_candidate_round():
    p = load(REPO / "params.yaml")
    assert p["round"] == "round3-candidate" and p["decode"] == "exact" and p["profile"] == "full"
    assert p["seeds"] == [0, 1, 2, 3, 4]
    assert (p["rows"], p["eval_every"], p["eval_episodes"]) == (24000, 400, 10)
    assert p["reference"] == {"decode": "exact", "sampler": "per_run", "jax": "0.4.26",
                              "platform": "cpu", "precision": "default",
                              "source": "data/published/round3"}
    assert p["stats"] == {"s1_rows": [16000, 18000, 20000], "late_rows": [12000, 24000],
                          "good_return": 400.0, "concordance_rows": [20000, 24000],
                          "concordance_range": [16000, 24000], "equivalence_margin": 0.1,
                          "signature_rows": [], "persistence_rows": [], "failed_rule": "zero"}
    assert len([r for r in eval_points(p) if 12000 <= r <= 24000]) == 31
    assert p["gate"] == {"statistic": "late", "learns": True, "mean_min": None,
                         "welch_p_min": 0.05, "entropy_overlap_rows": None}


def test_missing_keys_take_the_round1_values():
    p = validate({})
    assert p == load(ROUND1)
    assert p["round"] == "round1" and p["seeds"] == [0, 1, 2]
    assert (p["rows"], p["eval_every"], p["eval_episodes"]) == (20000, 2000, 10)
    assert p["reference"] == {"decode": "ref", "sampler": "stock", "jax": "0.4.26",
                              "platform": "cpu", "precision": "default", "source": "run"}
    assert p["stats"] == {"s1_rows": [16000, 18000, 20000], "late_rows": [],
                          "good_return": 400.0, "concordance_rows": [20000],
                          "concordance_range": [16000, 20000], "equivalence_margin": 0.1,
                          "signature_rows": [], "persistence_rows": [], "failed_rule": "zero"}
    assert isinstance(p["stats"]["good_return"], float)
    assert eval_points(p) == list(range(2000, 20001, 2000))


@pytest.mark.parametrize("key, value, expected", [
    ("decode", "ref", "ref"),
    ("profile", "smoke", "smoke"),
    ("reference.decode", "exact", "exact"),
    ("reference.sampler", "per_run", "per_run"),
    ("reference.source", "data/published/round1", "data/published/round1"),
    ("reference.jax", "0.10.2", "0.10.2"),
    ("reference.jax", "0.11.2", "0.11.2"),
    ("reference.jax", "0.4.26", "0.4.26"),
    ("reference.precision", "highest", "highest"),
    ("reference.precision", "high", "high"),
])
def test_accepted_choices(key, value, expected):
    p = validate(_set(_defaults_raw(), key, value))
    top, *rest = key.split(".")
    assert (p[top][rest[0]] if rest else p[top]) == expected


def test_reference_environment_platform_and_precision_from_yaml(tmp_path):
    """reference.jax reads as the string it is written as (0.10.2 is no number), and a
    round on the TPU names the jax 0.10.2 environment; the defaults are today's rounds'."""
    f = tmp_path / "params.yaml"
    f.write_text(synthetic.params_text({"reference.jax": "0.10.2", "reference.platform": "tpu",
                                        "reference.precision": "highest"}))
    assert "\n  jax: 0.10.2\n" in f.read_text()    # written plain, as a user would
    p = load(f)
    assert (p["reference"]["jax"], p["reference"]["platform"], p["reference"]["precision"]) \
        == ("0.10.2", "tpu", "highest")
    assert validate({})["reference"] | {"source": None} == {
        "decode": "ref", "sampler": "stock", "jax": "0.4.26", "platform": "cpu",
        "precision": "default", "source": None}


def test_tpu_needs_the_jax_0_10_2_environment():
    raw = _set(_defaults_raw(), "reference.platform", "tpu")
    assert _error(raw) == ("params: reference.platform: tpu needs reference.jax 0.10.2 or "
                           "0.11.2 (the 0.4.26 environment holds no tpu jaxlib)")
    assert validate(_set(raw, "reference.jax", "0.10.2"))["reference"]["platform"] == "tpu"
    assert validate(_set(raw, "reference.jax", "0.11.2"))["reference"]["platform"] == "tpu"


def test_gpu_needs_the_jax_0_11_2_environment():
    raw = _set(_defaults_raw(), "reference.platform", "gpu")
    assert _error(raw) == ("params: reference.platform: gpu needs reference.jax 0.11.2 (the "
                           "0.4.26 environment holds no gpu jaxlib)")
    assert _error(_set(raw, "reference.jax", "0.10.2")) == (
        "params: reference.platform: gpu needs reference.jax 0.11.2 (the 0.10.2 environment "
        "holds no gpu jaxlib)")
    assert validate(_set(raw, "reference.jax", "0.11.2"))["reference"]["platform"] == "gpu"


def test_each_platform_has_its_jax_platforms_and_needs_an_environment():
    from dreamer_parity.reference import launch
    assert set(launch.JAX_PLATFORMS) == set(P.PLATFORMS)
    assert launch.JAX_PLATFORMS["gpu"] == "cuda,cpu"
    assert set(P.PLATFORM_JAX) == set(P.PLATFORMS) - {"cpu"}
    assert all(set(v) <= set(P.REFERENCE_JAX) for v in P.PLATFORM_JAX.values())


# --- one test per error, each checking the one-line message ------------------------------

def test_unknown_top_level_key():
    raw = _defaults_raw() | {"seed": 3}
    assert _error(raw).startswith("params: seed: unknown key in params.yaml")


def test_unknown_nested_key():
    raw = _defaults_raw()
    raw["stats"]["s2_rows"] = [20000]
    assert _error(raw).startswith("params: stats.s2_rows: unknown key")


def test_section_given_as_scalar():
    assert _error(_defaults_raw() | {"reference": 3}) == \
        "params: reference: expected a mapping, got 3"


@pytest.mark.parametrize("key, value", [
    ("decode", "mean"), ("profile", "tiny"), ("reference.decode", "stock"),
    ("reference.sampler", "uniform"), ("stats.failed_rule", "drop"),
    ("reference.jax", "0.4.30"), ("reference.platform", "cuda"),
    ("reference.precision", "float32"),
])
def test_unknown_value(key, value):
    msg = _error(_set(_defaults_raw(), key, value))
    assert msg.startswith(f"params: {key}: unknown value {value!r}; expected one of ")


def test_negative_row_count():
    assert _error(_set(_defaults_raw(), "rows", -2000)) == \
        "params: rows: must be a positive integer, got -2000"


def test_zero_row_count():
    assert _error(_set(_defaults_raw(), "rows", 0)) == \
        "params: rows: must be a positive integer, got 0"


def test_non_integer_row_count():
    assert _error(_set(_defaults_raw(), "rows", 20000.5)) == \
        "params: rows: expected an integer, got 20000.5"


def test_row_count_text_that_is_not_a_number():
    assert _error(_set(_defaults_raw(), "rows", "20k")) == \
        "params: rows: expected an integer, got '20k'"


def test_boolean_is_not_an_integer():
    assert _error(_set(_defaults_raw(), "eval_episodes", True)) == \
        "params: eval_episodes: expected an integer, got True"


def test_interval_not_a_multiple_of_16():
    raw = _set(_set(_defaults_raw(), "eval_every", 1000), "rows", 20000)
    assert _error(raw) == "params: eval_every: 1000 is not a multiple of 16"


def test_interval_that_does_not_divide_rows():
    raw = _set(_defaults_raw(), "eval_every", 3200)
    assert _error(raw) == "params: eval_every: 3200 does not divide rows=20000"


def test_negative_interval():
    assert _error(_set(_defaults_raw(), "eval_every", -2000)) == \
        "params: eval_every: must be a positive integer, got -2000"


def test_zero_eval_episodes():
    assert _error(_set(_defaults_raw(), "eval_episodes", 0)) == \
        "params: eval_episodes: must be a positive integer, got 0"


def test_duplicate_seeds():
    assert _error(_set(_defaults_raw(), "seeds", [0, 1, 1, 2, 2])) == \
        "params: seeds: duplicate seeds [1, 2]"


def test_negative_seed():
    assert _error(_set(_defaults_raw(), "seeds", [0, -1])) == \
        "params: seeds: seeds must be non-negative, got [0, -1]"


def test_no_seed():
    assert _error(_set(_defaults_raw(), "seeds", [])) == "params: seeds: needs at least one seed"


def test_seeds_not_a_list():
    assert _error(_set(_defaults_raw(), "seeds", 3)) == \
        "params: seeds: expected a list of integers, got 3"


def test_s1_rows_not_evaluation_points():
    msg = _error(_set(_defaults_raw(), "stats.s1_rows", [16000, 17000, 20000]))
    assert msg.startswith("params: stats.s1_rows: rows [17000] are not evaluation points")


def test_s1_rows_beyond_rows():
    msg = _error(_set(_defaults_raw(), "stats.s1_rows", [18000, 20000, 22000]))
    assert msg.startswith("params: stats.s1_rows: rows [22000] are not evaluation points")


def test_s1_rows_empty():
    assert _error(_set(_defaults_raw(), "stats.s1_rows", [])) == \
        "params: stats.s1_rows: needs at least one row"


def test_s1_rows_repeated():
    assert _error(_set(_defaults_raw(), "stats.s1_rows", [18000, 20000, 20000])) == \
        "params: stats.s1_rows: duplicate rows in [18000, 20000, 20000]"


def test_concordance_rows_not_evaluation_points():
    msg = _error(_set(_defaults_raw(), "stats.concordance_rows", [19000]))
    assert msg.startswith("params: stats.concordance_rows: rows [19000] are not evaluation")


def test_late_range_reversed():
    assert _error(_set(_defaults_raw(), "stats.late_rows", [20000, 16000])) == \
        "params: stats.late_rows: first row 20000 is after last row 16000"


def test_late_range_with_no_evaluation_point():
    assert _error(_set(_defaults_raw(), "stats.late_rows", [16100, 17900])) == \
        "params: stats.late_rows: range [16100, 17900] holds no evaluation point"


def test_concordance_range_past_rows():
    assert _error(_set(_defaults_raw(), "stats.concordance_range", [16000, 24000])) == \
        "params: stats.concordance_range: range [16000, 24000] ends after rows=20000"


def test_range_with_three_values():
    assert _error(_set(_defaults_raw(), "stats.concordance_range", [1, 2, 3])) == \
        "params: stats.concordance_range: expected [first, last] or [], got [1, 2, 3]"


def test_good_return_not_a_number():
    assert _error(_set(_defaults_raw(), "stats.good_return", "high")) == \
        "params: stats.good_return: expected a number, got 'high'"


def test_good_return_not_finite():
    assert _error(_set(_defaults_raw(), "stats.good_return", float("nan"))) == \
        "params: stats.good_return: must be finite, got nan"


def test_empty_source():
    assert _error(_set(_defaults_raw(), "reference.source", "")) == \
        "params: reference.source: must be 'run', a directory of runs or a list of " \
        "{from, seeds} (docs/SIDES.md)"


def test_root_not_a_mapping():
    assert _error([1, 2]) == "params: <root>: params.yaml must hold a mapping, got list"


# --- files as `dvc exp run -S` writes them -----------------------------------------------

def test_load_reads_strings_written_back_by_dvc(tmp_path):
    text = ROUND1.read_text()
    text = text.replace("rows: 20000", "rows: '20000'")
    text = text.replace("good_return: 400", "good_return: '4e2'")
    text = text.replace("eval_episodes: 10", "eval_episodes: 10.0")
    f = tmp_path / "params.yaml"
    f.write_text(text)
    p = load(f)
    assert p["rows"] == 20000 and type(p["rows"]) is int
    assert p["stats"]["good_return"] == 400.0 and type(p["stats"]["good_return"]) is float
    assert p["eval_episodes"] == 10 and type(p["eval_episodes"]) is int


def test_load_reads_pyyaml_string_exponent(tmp_path):
    """PyYAML reads ``3e-05`` (no dot) as a string; the loader gives the float."""
    f = tmp_path / "params.yaml"
    text = ROUND1.read_text().replace("rows: 20000", "rows: 1.2e3").replace(
        "eval_every: 2000", "eval_every: 400").replace("good_return: 400", "good_return: 3e-05")
    text = text.replace("  - 16000\n  - 18000\n  - 20000\n", "  - 400\n  - 800\n  - 1200\n")
    text = text.replace("  - 20000\n  concordance_range:\n  - 16000\n  - 20000\n",
                        "  - 1200\n  concordance_range:\n  - 400\n  - 1200\n")
    f.write_text(text)
    assert yaml.safe_load(f.read_text())["stats"]["good_return"] == "3e-05"
    p = load(f)
    assert p["stats"]["good_return"] == 3e-05 and p["rows"] == 1200 and type(p["rows"]) is int


def test_load_yaml_syntax_error_names_the_line(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("rows: 1200\nseeds: [0, 1\n")
    with pytest.raises(ParamsError, match=r"^params: <root>: params.yaml:\d+: invalid YAML"):
        load(f)


def test_dvc_set_param_rewrite_is_read_back(tmp_path):
    """The exact writer of ``dvc exp run -S`` (dvc.utils.hydra.apply_overrides)."""
    from dvc.utils import hydra
    f = tmp_path / "params.yaml"
    f.write_text(ROUND1.read_text())
    hydra.apply_overrides(f, ["stats.good_return=3e-05", "rows='24000'", "eval_episodes=5.0",
                              "seeds=[3,4]"])
    text = f.read_text()
    assert "good_return: 3e-05" in text and "rows: '24000'" in text
    p = load(f)
    assert p["stats"]["good_return"] == 3e-05
    assert p["rows"] == 24000 and p["eval_episodes"] == 5 and p["seeds"] == [3, 4]


# --- the smoke round -------------------------------------------------------------------

def test_smoke_overrides_give_the_smoke_round(tmp_path):
    from dvc.utils import hydra
    out = subprocess.run([sys.executable, "-m", "dreamer_parity.params", "smoke-overrides"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0::2] == ["-S"] * (len(out) // 2)
    f = tmp_path / "params.yaml"
    f.write_text(ROUND1.read_text())
    hydra.apply_overrides(f, out[1::2])
    p = load(f)
    assert p["profile"] == "smoke" and p["round"] == "smoke"
    assert (p["rows"], p["eval_every"], p["eval_episodes"]) == (1200, 400, 2)
    assert eval_points(p) == [400, 800, 1200]
    assert p["stats"]["s1_rows"] == eval_points(p)[-3:]
    assert p["decode"] == "exact" and p["reference"]["decode"] == "ref"
    assert p == P.smoke_params(load(ROUND1))
    # the smoke round is the same whichever round params.yaml holds
    assert P.smoke_params(load(REPO / "params.yaml")) == p


def test_cli_check_reports_the_key(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(ROUND1.read_text().replace("eval_every: 2000", "eval_every: 1000"))
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.params", "check", "--file", str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: params: eval_every: 1000 is not a multiple of 16"


def test_profiles_have_the_declared_widths():
    assert P.PROFILES["full"]["deter"] == 512 and P.PROFILES["smoke"]["deter"] == 64
    assert set(P.PROFILES["full"]) == set(P.PROFILES["smoke"])


def test_lists_written_as_text_are_read_as_lists():
    raw = _set(_set(_defaults_raw(), "seeds", "[3, 4]"), "stats.late_rows", "[16000, 20000]")
    p = validate(raw)
    assert p["seeds"] == [3, 4] and p["stats"]["late_rows"] == [16000, 20000]
    assert _error(_set(_defaults_raw(), "seeds", "0,1")) == \
        "params: seeds: expected a list of integers, got '0,1'"


# --- the gate --------------------------------------------------------------------------

@pytest.mark.parametrize("gate, expected", [
    ({"statistic": "none", "learns": True},
     "params: gate.learns: is a gate part, but gate.statistic is none"),
    ({"statistic": "s1"},
     "params: gate.statistic: s1 names no gate part (gate.learns, gate.mean_min, "
     "gate.welch_p_min, gate.entropy_overlap_rows)"),
    ({"statistic": "late", "learns": True},
     "params: gate.statistic: late needs stats.late_rows"),
    ({"statistic": "s1", "welch_p_min": 1.5}, "params: gate.welch_p_min: must lie in (0, 1), got 1.5"),
    ({"statistic": "s1", "entropy_overlap_rows": 3000},
     "params: gate.entropy_overlap_rows: 3000 is not an evaluation point"),
    ({"statistic": "s1", "learns": "yes"}, "params: gate.learns: expected true or false, got 'yes'"),
])
def test_gate_parts_must_agree(gate, expected):
    with pytest.raises(ParamsError) as e:
        validate({"gate": gate})
    assert str(e.value) == expected


def test_gate_of_the_round1_learning_check_validates():
    p = validate({"reference": {"source": "data/published/round2"},
                  "gate": {"statistic": "s1", "mean_min": 156, "welch_p_min": "0.05",
                           "entropy_overlap_rows": 4000}})
    assert p["gate"] == {"statistic": "s1", "learns": False, "mean_min": 156.0,
                         "welch_p_min": 0.05, "entropy_overlap_rows": 4000}


# --- a params file names every parameter; the work it implies is bounded ----------------

@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n"])
def test_empty_params_file_is_refused_never_filled_with_defaults(tmp_path, text):
    f = tmp_path / "params.yaml"
    f.write_text(text)
    with pytest.raises(ParamsError) as e:
        load(f)
    assert str(e.value).startswith("params: <root>: params.yaml: empty; see README")
    assert validate({})["round"] == "round1"   # an in-memory dict: the library's defaults


def test_params_file_lacking_a_key_names_it(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(ROUND1.read_text().replace("  signature_rows: []\n", ""))
    with pytest.raises(ParamsError, match=r"^params: stats\.signature_rows: missing from "
                                          r"params\.yaml; .*see README; 1 missing\)$"):
        load(f)
    f.write_text(ROUND1.read_text().replace("candidate:\n  source: run\n  seeds:\n", ""))
    with pytest.raises(ParamsError, match=r"^params: candidate\.source: missing from"):
        load(f)
    # candidate.seeds too: a file names it, null where the candidate takes the round's seeds
    f.write_text(ROUND1.read_text().replace("  source: run\n  seeds:\n", "  source: run\n"))
    with pytest.raises(ParamsError, match=r"^params: candidate\.seeds: missing from "
                                          r"params\.yaml; .*1 missing\)$"):
        load(f)


def test_every_key_a_stage_declares_is_a_required_key():
    """dvc.yaml's stages read parameters by these names: a params file must hold each."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    declared = set()
    for st in stages.values():
        body = st.get("do", st)
        for item in body.get("params", []):
            declared.update(item if isinstance(item, dict) else [item])
    declared.discard("params.yaml")
    for key in declared:
        assert any(k == key or k.startswith(key + ".") for k in P.SCHEMA), key
    full = yaml.safe_load((REPO / "params.yaml").read_text())
    assert set(P._flatten(full)) == set(P.SCHEMA)


@pytest.mark.parametrize("value", ["README", "readme", "index", "Index", "INDEX"])
def test_reserved_round_names_are_refused(value):
    assert _error(_set(_defaults_raw(), "round", value)).startswith(
        f"params: round: {value!r} names no pre-registration: docs/rounds/README.md and "
        f"docs/rounds/index.yaml are not rounds")


@pytest.mark.parametrize("dotted, value, expected", [
    ("rows", 24016, "params: rows: 24016 is over 24000, the protocol's largest round"),
    ("rows", 16 * 10 ** 9, "params: rows: 16000000000 is over 24000"),
    ("eval_episodes", 101, "params: eval_episodes: 101 is over 100 episodes per evaluation point"),
    ("seeds", list(range(129)), "params: seeds: 129 seeds, more than 128"),
    ("seeds", [0, 2 ** 31], "params: seeds: seed 2147483648 is over 2147483647"),
    ("candidate.seeds", list(range(129)), "params: candidate.seeds: 129 seeds, more than 128"),
    ("candidate.seeds", [0, 2 ** 31], "params: candidate.seeds: seed 2147483648 is over 2147483647"),
])
def test_parameters_implying_absurd_work_are_refused(dotted, value, expected):
    assert _error(_set(_defaults_raw(), dotted, value)).startswith(expected)


def test_seeds_are_sorted_once_where_they_are_validated():
    p = validate(_set(_defaults_raw(), "seeds", [2, 0, 1]))
    assert p["seeds"] == [0, 1, 2]
    p = validate({**_set(_defaults_raw(), "seeds", [4, 3, 2, 1, 0]),
                  "reference": {"source": [{"from": "run", "seeds": [4, 2]},
                                           {"from": "data/x", "seeds": [3, 1, 0]}]}})
    assert p["seeds"] == [0, 1, 2, 3, 4]
    assert p["reference"]["source"] == [{"from": "data/x", "seeds": [0, 1, 3]},
                                        {"from": "run", "seeds": [2, 4]}]


# --- each side's own seeds (candidate.seeds; docs/SIDES.md, "Sides of unequal size") -------

def test_candidate_seeds_null_are_the_rounds_seeds():
    p = load(ROUND1)
    assert p["candidate"]["seeds"] is None
    r = P.load_round(ROUND1)
    assert r.candidate.seeds == r.reference.seeds == (0, 1, 2) and p["seeds"] == [0, 1, 2]
    assert load(REPO / "params.yaml")["candidate"]["seeds"] is None
    with pytest.raises(ValueError, match="side must be one of"):
        r.side("study")


def test_candidate_seeds_give_the_candidate_its_own_list_sorted_once():
    p = validate(_set(_set(_defaults_raw(), "candidate.seeds", [6, 0, 3, 1, 5, 2, 4]),
                      "seeds", [3, 0, 2, 1]))
    assert p["candidate"]["seeds"] == [0, 1, 2, 3, 4, 5, 6] and p["seeds"] == [0, 1, 2, 3]
    r = Round.from_params(p)
    assert r.candidate.seeds == (0, 1, 2, 3, 4, 5, 6)
    assert r.reference.seeds == (0, 1, 2, 3)
    # 110 candidate seeds against 10 reference seeds (round3-tpu's sides) validate
    r = Round.from_params(validate(_set(_set(_defaults_raw(), "candidate.seeds",
                                             list(range(110))), "seeds", list(range(10)))))
    assert r.candidate.seeds == tuple(range(110)) and r.reference.seeds == tuple(range(10))
    # as DVC writes them back (-S candidate.seeds=[..] and a null)
    assert validate(_set(_defaults_raw(), "candidate.seeds", "[5, 4]"))["candidate"]["seeds"] == [4, 5]
    assert validate(_set(_defaults_raw(), "candidate.seeds", "null"))["candidate"]["seeds"] is None


@pytest.mark.parametrize("value, expected", [
    ([0, 1, 1, 2, 2], "params: candidate.seeds: duplicate seeds [1, 2]"),
    ([0, -1], "params: candidate.seeds: seeds must be non-negative, got [0, -1]"),
    ([], "params: candidate.seeds: needs at least one seed"),
    (3, "params: candidate.seeds: expected a list of integers, got 3"),
    ("0,1", "params: candidate.seeds: expected a list of integers, got '0,1'"),
])
def test_bad_candidate_seeds_are_refused_in_one_line(value, expected):
    assert _error(_set(_defaults_raw(), "candidate.seeds", value)) == expected


@pytest.mark.parametrize("source, expected", [
    ([{"from": "run", "seeds": [0, 1, 2, 3]}, {"from": "data/x", "seeds": [4, 5]}],
     "params: candidate.source: candidate.seeds [6] have no source"),
    ([{"from": "run", "seeds": [0, 1, 2, 3, 4, 5, 6, 7]}],
     "params: candidate.source: seeds [7] are not in candidate.seeds [0, 1, 2, 3, 4, 5, 6]"),
    ([{"from": "run", "seeds": [0, 1, 2]}, {"from": "data/x", "seeds": [2, 3, 4, 5, 6]}],
     "params: candidate.source: seeds [2] listed more than once (each seed exactly once)"),
])
def test_a_list_form_source_is_checked_against_its_sides_own_seeds(source, expected):
    raw = _set(_set(_defaults_raw(), "candidate.seeds", list(range(7))), "candidate.source", source)
    assert _error(raw) == expected
    ok = [{"from": "run", "seeds": [0, 1, 2, 3]}, {"from": "data/x", "seeds": [6, 5, 4]}]
    p = validate(_set(_set(_defaults_raw(), "candidate.seeds", list(range(7))), "candidate.source", ok))
    assert p["candidate"]["source"] == [{"from": "run", "seeds": [0, 1, 2, 3]},
                                        {"from": "data/x", "seeds": [4, 5, 6]}]
    # the reference side's list form covers the round's seeds, whatever the candidate holds
    raw = _set(_set(_defaults_raw(), "candidate.seeds", list(range(7))), "reference.source",
               [{"from": "run", "seeds": [0, 1, 2, 3]}])
    assert _error(raw) == "params: reference.source: seeds [3] are not round seeds [0, 1, 2]"


# --- the migration of older rounds' parameter files (params.migrate) ------------------------

def test_migrate_fills_exactly_the_added_keys_that_are_missing():
    assert set(P.ADDED_KEYS) <= set(P.SCHEMA)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    full, filled = P.migrate(raw)
    assert filled == [] and full == raw                      # nothing to fill at HEAD
    del raw["reference"]["jax"], raw["candidate"]["seeds"], raw["stats"]["persistence_rows"]
    out, filled = P.migrate(raw)
    assert filled == ["candidate.seeds", "reference.jax", "stats.persistence_rows"]
    assert (out["reference"]["jax"], out["candidate"]["seeds"],
            out["stats"]["persistence_rows"]) == ("0.4.26", None, [])
    assert "jax" not in raw["reference"]                     # the input is not changed
    P.validate(out, complete=True)
    del out["rows"]                                           # not an added key: still refused
    with pytest.raises(P.ParamsError, match=r"^params: rows: missing from"):
        P.validate(P.migrate(out)[0], complete=True)


def test_every_kept_round_validates_through_the_migration():
    """Every entry of docs/rounds/index.yaml, its params.yaml as its commit holds it."""
    from dreamer_parity import rounds

    idx = rounds.load_index(REPO)
    if any(subprocess.run(["git", "cat-file", "-e", f"{e['commit']}^{{commit}}"], cwd=REPO,
                          capture_output=True).returncode for e in idx.values()):
        pytest.skip("shallow clone: the kept rounds' commits are not here")
    for name in idx:
        commit, raw, filled = rounds.round_params(REPO, name)
        assert P.validate(raw, complete=True)["round"] == name
        assert set(filled) <= set(P.ADDED_KEYS)
