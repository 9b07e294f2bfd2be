"""The side-by-side window table (src/dreamer_parity/analysis/window_table.py)."""

from pathlib import Path

import pytest

from dreamer_parity.analysis import window_table as wt

REPO = Path(__file__).resolve().parents[1]
REF_S5 = REPO / "data/runs/round3-10seeds-reference/s5"
TPU_S5 = REPO / "data/runs/round3-ref-tpu/s5"


def test_table_lines_up_rows_and_marks_what_a_run_lacks():
    a = [{"rows": 400, "updates": 0, "train": {}},
         {"rows": 800, "updates": 81, "train": {"val/std": 0.000135549, "rew/min": 0.0}}]
    b = [{"rows": 800, "updates": 81, "train": {"val/std": 0.0087131, "rew/min": float("nan")}}]
    out = wt.table([("a", a), ("b", b)], ["val/std", "rew/min"]).splitlines()
    assert out[0] == ("| rows | updates a | val/std a | rew/min a | updates b | val/std b "
                      "| rew/min b |")
    assert out[2] == "| 400 | 0 | - | - | - | - | - |"
    assert out[3] == "| 800 | 81 | 0.00013555 | 0 | 81 | 0.0087131 | - |"
    with pytest.raises(ValueError, match=r"no run has a record at rows \[1200\]"):
        wt.table([("a", a)], ["val/std"], rows=[800, 1200])
    with pytest.raises(ValueError, match="at least one run"):
        wt.table([], ["val/std"])


def test_cli_on_kept_runs_prints_their_window_values(capsys):
    # the first window after the first update (81 updates at 1,200 rows) of seed 5 on the
    # CPU and on the TPU: the values docs/DEVIATIONS.md quotes
    assert wt.main([f"cpu={REF_S5}", f"tpu={TPU_S5}", "--rows", "1200", "2000",
                    "--metrics", "val/std", "rew/min"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| 1200 | 81 | 0.00013555 | 0 | 81 | 0.0087131 | -0.48453 |"
    assert lines[3] == "| 2000 | 481 | 0.0038466 | 0 | 481 | 0.12833 | -4.6074 |"


def test_cli_refuses_bad_arguments_before_printing(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        wt.main(["no-equals-sign"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        wt.main([f"x={REF_S5}", f"x={TPU_S5}"])
    assert "labels must differ" in capsys.readouterr().err
    assert wt.main([f"ok={REF_S5}", f"empty={tmp_path}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: empty: ")


def test_the_candidate_on_the_tpu_decodes_rewards_exactly_as_deviations_t4_says(capsys):
    # docs/DEVIATIONS.md T4: in the 16 TPU candidate seeds it names (10-25) the window ending
    # at 2,000 rows has rew/min 0 and rew/max 1 exactly and val/std in 0.0033-0.0048
    runs = [REPO / "data/runs/round3-tpu-candidate" / f"s{s}" for s in range(10, 26)]
    assert all(d.is_dir() for d in runs)
    assert wt.main([f"{d.name}={d}" for d in runs] + [
        "--rows", "2000", "--metrics", "rew/min", "rew/max", "val/std"]) == 0
    row = capsys.readouterr().out.splitlines()[2].strip("| ").split(" | ")[1:]
    cells = [row[i:i + 4] for i in range(0, len(row), 4)]      # updates, rew/min, max, std
    assert len(cells) == len(runs)
    assert all(c[0] == "481" and c[1] == "0" and c[2] == "1" for c in cells), cells
    assert all(0.0033 <= float(c[3]) <= 0.0049 for c in cells), cells


@pytest.mark.parametrize("probe, first, at_2000", [
    ("mirror-ulp", "| 1200 | 81 | 0.037817 | -1.1435 | 1.3923 | 81 | 0.0087131 | -0.48453 | 1.1721 |",
     "| 2000 | 481 | 0.56854 | -2.3165 | 2.3046 | 481 | 0.12833 |"),
    ("mirror-ulp-gradient", "| 1200 | 81 | 0.019908 | -0.81402 | 1.3372 | 81 | 0.0087131 | "
     "-0.48453 | 1.1721 |", "| 2000 | 481 | 0.23886 | -1.7779 | 1.9364 | 481 | 0.12833 |"),
])
def test_the_one_ulp_probes_are_noisier_than_the_tpu_as_reference_run_says(capsys, probe, first,
                                                                              at_2000):
    # docs/REFERENCE_RUN.md "Why the TPU runs differ": seed 5 with the heads' mirror logits
    # (forward) or their gradient one ulp apart (measurements/2026-12-07-reference-cpu-mirror/) against the TPU run
    ulp = REPO / f"measurements/2026-12-07-reference-cpu-mirror/s5-2400-{probe}"
    assert wt.main([f"ulp={ulp}", f"tpu={TPU_S5}", "--rows", "1200", "1600", "2000", "2400",
                    "--metrics", "val/std", "rew/min", "rew/max"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == first
    assert lines[4].startswith(at_2000)
    for line in lines[2:]:
        cells = line.strip("| ").split(" | ")
        assert float(cells[2]) > float(cells[6]), line      # every window: above the TPU
