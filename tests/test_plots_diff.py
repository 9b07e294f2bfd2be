"""analysis.plots_diff: rounds by name, by directory or by revision, with their
evaluation, S2 and training-metric window curves overlaid (offline, vl-convert)."""

import json
import subprocess
from pathlib import Path

import pytest

from dreamer_parity.analysis import plots_diff
from dreamer_parity.analysis.windows import WINDOW_METRICS, slug

PNG = b"\x89PNG\r\n\x1a\n"


def git(root, *args) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                            "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def write_round(root: Path, level: float, windows: bool = True, round_name: str = "ra") -> None:
    """eval_curve.csv (2 sides x 2 seeds x 3 points, S2 on the candidate only) and either
    the candidate's window CSVs (entropy = level / 1000) or an old-style entropy table."""
    plots = root / "metrics" / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    lines = ["rows,side,seed,eval_mean,s2"]
    for side in ("reference", "candidate"):
        for seed in (0, 1):
            for r in (400, 800, 1200):
                s2 = f"{level / 10 + seed}" if side == "candidate" else ""
                lines.append(f"{r},{side},{seed},{level * r / 1200 + seed},{s2}")
    (plots / "eval_curve.csv").write_text("\n".join(lines) + "\n")
    if windows:
        (plots / "windows").mkdir(exist_ok=True)
        for m in WINDOW_METRICS:
            (plots / "windows" / f"candidate_{slug(m)}.csv").write_text(
                "rows,mean,lo,hi,n,s0,s1\n"
                f"800,{level / 1000},{level / 1000 - 0.01},{level / 1000 + 0.01},2,1,1\n"
                f"1200,{level / 2000},{level / 2000 - 0.01},{level / 2000 + 0.01},2,1,1\n")
    else:
        (plots / "entropy_windows.csv").write_text(
            "rows,side,mean,lo,hi,overlap\n800,reference,0.5,0.4,0.6,True\n"
            "800,candidate,0.45,0.42,0.5,True\n")
    (root / "params.yaml").write_text(f"round: {round_name}\n")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write_round(root, 100.0, windows=False, round_name="old")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "old round")
    old = git(root, "rev-parse", "HEAD")
    write_round(root, 400.0, round_name="new")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "new round")
    new = git(root, "rev-parse", "HEAD")
    (root / "docs" / "rounds").mkdir(parents=True)
    (root / "docs" / "rounds" / "index.yaml").write_text(
        f"old:\n  commit: '{old}'\n  about: the old one\nnew:\n  commit: '{new}'\n  about: the new one\n")
    return root, old, new


def test_round_names_resolve_through_the_index(repo):
    root, old, new = repo
    assert plots_diff.resolve("old", root) == ("commit", old)
    assert plots_diff.resolve("HEAD~1", root) == ("commit", old)
    with pytest.raises(plots_diff.PlotsDiffError, match="nope: not a directory, a kept round"):
        plots_diff.resolve("nope", root)


def test_windows_of_both_rounds_overlaid(repo, tmp_path):
    root, old, new = repo
    out, spec_out = tmp_path / "d.png", tmp_path / "d.json"
    rows = plots_diff.render(["old", "new"], out, repo=root, spec_out=spec_out)
    assert out.read_bytes()[:8] == PNG
    assert {r["rev"] for r in rows} == {"old", "new"} and len(rows) == 24
    by = {(r["rev"], r["side"], r["seed"], r["rows"]): r["eval_mean"] for r in rows}
    assert by[("old", "reference", "0", 1200.0)] == 100.0
    assert by[("new", "candidate", "1", 1200.0)] == 401.0
    spec = json.loads(spec_out.read_text())
    titles = [c["title"] for c in spec["vconcat"]]
    assert titles[:2] == ["evaluation return",
                          "S2 (training-episode rolling mean; sides that have it)"]
    ent = spec["vconcat"][2]
    assert ent["title"].startswith("ent/action/mean")
    vals = {(v["rev"], v["side"], v["rows"]): v["mean"] for v in ent["data"]["values"]}
    # the old round's entropy table (both sides) and the new round's candidate windows
    assert vals == {("old", "reference", 800.0): 0.5, ("old", "candidate", 800.0): 0.45,
                    ("new", "candidate", 800.0): 0.4, ("new", "candidate", 1200.0): 0.2}
    # the four other metrics: only the new round has them
    assert len(spec["vconcat"]) == 3 + 4
    assert all({v["rev"] for v in c["data"]["values"]} == {"new"} for c in spec["vconcat"][3:])
    s2 = {(v["rev"], v["seed"]) for v in spec["vconcat"][1]["data"]["values"]}
    assert s2 == {("old", "0"), ("old", "1"), ("new", "0"), ("new", "1")}


def test_directories_and_the_workspace(repo, tmp_path):
    root, old, new = repo
    other = tmp_path / "other"
    write_round(other, 250.0)
    spec_out = tmp_path / "d.json"
    # a checkout directory, and a metrics/plots directory
    for arg in (str(other), str(other / "metrics" / "plots")):
        rows = plots_diff.render(["old", arg], tmp_path / "d.svg", repo=root, spec_out=spec_out)
        assert {r["rev"] for r in rows} == {"old", arg}
        assert max(r["eval_mean"] for r in rows if r["rev"] == arg) == 251.0
    assert (tmp_path / "d.svg").read_text().lstrip().startswith("<svg")
    # one argument: against the workspace (root holds the new round)
    rows = plots_diff.render(["old"], tmp_path / "w.png", repo=root)
    assert {r["rev"] for r in rows} == {"old", "workspace"}


def test_missing_target_is_one_line_exit_2(repo, tmp_path, capsys):
    root, old, new = repo
    empty = tmp_path / "empty"
    empty.mkdir()
    assert plots_diff.main(["old", str(empty), "--repo", str(root),
                            "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no metrics/plots/eval_curve.csv there" in err
    assert not (tmp_path / "x.png").exists()


def test_lines_identical_at_two_rounds_are_drawn_once_and_named_for_both():
    """Two rounds against the same published reference: the reference's lines are one
    series labelled 'a = b' (not one drawn over the other), the candidates stay apart."""
    def ev(rev, side, level):
        return [{"rev": rev, "rows": float(r), "side": side, "seed": str(s),
                 "eval_mean": level + r / 100 + s, "s2": None}
                for s in (0, 1) for r in (400, 800)]

    def win(rev, side, level):
        return [{"rev": rev, "metric": "val/std", "side": side, "rows": 800.0,
                 "mean": level, "lo": level / 2, "hi": level * 2}]
    sources = [{"label": "a", "eval": ev("a", "reference", 10) + ev("a", "candidate", 20),
                "windows": win("a", "reference", 0.1) + win("a", "candidate", 0.2)},
               {"label": "b", "eval": ev("b", "reference", 10) + ev("b", "candidate", 30),
                "windows": win("b", "reference", 0.1) + win("b", "candidate", 0.3)}]
    s = plots_diff.spec(sources, "a vs b")
    evals = s["vconcat"][0]["data"]["values"]
    assert sorted({(r["rev"], r["side"]) for r in evals}) == [
        ("a", "candidate"), ("a = b", "reference"), ("b", "candidate")]
    assert len(evals) == 12                 # 4 reference rows once, 4 + 4 candidate rows
    wins = next(c for c in s["vconcat"] if c["title"].startswith("val/std"))["data"]["values"]
    assert sorted((r["rev"], r["side"], r["mean"]) for r in wins) == [
        ("a", "candidate", 0.2), ("a = b", "reference", 0.1), ("b", "candidate", 0.3)]
    # one differing value keeps the two rounds' lines apart
    sources[1]["eval"][0] = {**sources[1]["eval"][0], "eval_mean": 99.0}
    evals = plots_diff.spec(sources, "a vs b")["vconcat"][0]["data"]["values"]
    assert {r["rev"] for r in evals if r["side"] == "reference"} == {"a", "b"}
