"""Property tests of the readers of archives, manifests and tables (issue #69): a random
input is refused in one line, or it satisfies what the documentation promises.

* An archive of random members (names valid and not, repeated, both forms of a JSON-lines
  file, sizes around the caps, which are made small here): :func:`archive.unpack` refuses
  it with one line, extracting nothing, exactly when a member is malformed, a name repeats,
  a file is in both forms, or the count or total passes its cap; else it extracts each
  member once, byte for byte.
* A sealed directory whose manifest text, files or sub-manifests are changed at random:
  :func:`manifest.verify` refuses it, or every file present is listed once (by one
  manifest) with its SHA-256.
* A published table with rows repeated, changed or dropped: :func:`read_table` refuses it
  exactly when two rows name one cell.

Derandomized and short in the normal suite (``HYPOTHESIS_PROFILE=long``: 20x, randomized).
"""

import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamer_parity import archive, manifest, records
from dreamer_parity.analysis import published_tables
from dreamer_parity.analysis.load import AnalysisError

REPO = Path(__file__).resolve().parents[1]
settings.register_profile("entry-default", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("entry-long", derandomize=False, max_examples=1200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
PROFILE = "entry-long" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "entry-default"

CAP_MEMBERS, CAP_TOTAL, CAP_MEMBER = 6, 600, 256

# valid names drawn more often than others, so that both outcomes are common
_valid_names = st.tuples(st.sampled_from(records.SIDES), st.sampled_from(["s0", "s1", "s12"]),
                         st.sampled_from(archive.RUN_FILES))
_any_names = st.tuples(st.sampled_from(["candidate", "reference", "other"]),
                       st.sampled_from(["s0", "s1", "s12", "x1", "s01"]),
                       st.sampled_from(list(archive.RUN_FILES) + ["params.npz", "../up"]))
_names = st.one_of(_valid_names, _valid_names, _valid_names, _any_names)


def _valid(side, seed, name) -> bool:
    return (side in records.SIDES and seed in ("s0", "s1", "s12")
            and name in archive.RUN_FILES)


@settings(settings.get_profile(PROFILE))
@given(members=st.lists(st.tuples(_names, st.one_of(st.integers(0, 120), st.integers(0, 300))),
                       min_size=1, max_size=7))
def test_an_archive_is_extracted_whole_or_refused_in_one_line(tmp_path, members):
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        work = Path(work)
        path = work / "a.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for (side, seed, name), size in members:
                info = tarfile.TarInfo(f"{side}/{seed}/{name}")
                info.size = size
                tar.addfile(info, io.BytesIO(bytes([len(name) % 251]) * size))
        names = [f"{s}/{d}/{n}" for (s, d, n), _ in members]
        forms = {n[:-3] if n.endswith(".gz") else n for n in names}
        expect_ok = (all(_valid(*m) for m, _ in members) and len(set(names)) == len(names)
                     and len(forms) == len(names) and len(members) <= CAP_MEMBERS
                     and all(size <= CAP_MEMBER for _, size in members)
                     and sum(size for _, size in members) <= CAP_TOTAL)
        into = work / "into"
        with mock.patch.object(archive, "MAX_MEMBERS", CAP_MEMBERS), \
                mock.patch.object(archive, "MAX_TOTAL_BYTES", CAP_TOTAL), \
                mock.patch.object(archive, "MAX_MEMBER_BYTES", CAP_MEMBER):
            try:
                runs = archive.unpack(path, into)
            except archive.ArchiveError as e:
                msg = str(e)
                assert not expect_ok, msg
                assert "\n" not in msg and len(msg) <= 500 and msg.startswith(str(path))
                assert not into.exists()          # nothing extracted
                return
        assert expect_ok, names
        got = {p.relative_to(into).as_posix(): p.read_bytes()
               for p in into.rglob("*") if p.is_file()}
        assert sorted(got) == sorted(names)
        for (side, seed, name), size in members:
            assert got[f"{side}/{seed}/{name}"] == bytes([len(name) % 251]) * size
        assert sorted(r.relative_to(into).as_posix() for r in runs) == sorted(
            {n.rsplit("/", 1)[0] for n in names})


def _seal(root: Path) -> Path:
    d = root / "round"
    for rel, text in (("README.md", "r\n"), ("ref_s0/evals.jsonl", "{}\n"),
                      ("ajax/s0/evals.jsonl", "{\"a\": 1}\n")):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    manifest.write(d)
    return d


_mutations = st.one_of(
    st.tuples(st.just("repeat_entry"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("sub_manifest"), st.sampled_from(["ref_s0", "ajax", "ajax/s0"]),
              st.sampled_from([b"", b"{", b"[]", b'{"algorithm": "sha256", "files": {}}',
                               None, "seal"])),
    st.tuples(st.just("stray"), st.sampled_from(["x.txt", "ref_s0/x.txt", "ajax/s0/d/x",
                                                  ".hidden"]), st.just(0)),
    st.tuples(st.just("edit"), st.sampled_from(["README.md", "ajax/s0/evals.jsonl"]),
              st.binary(min_size=0, max_size=4)),
)


@settings(settings.get_profile(PROFILE))
@given(muts=st.lists(_mutations, min_size=1, max_size=3))
def test_a_changed_manifest_tree_is_refused_or_lists_every_file_once(tmp_path, muts):
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        d = _seal(Path(work))
        for kind, a, b in muts:
            if kind == "repeat_entry":
                text = (d / manifest.NAME).read_text().splitlines(keepends=True)
                entries = [i for i, line in enumerate(text) if line.startswith('  "')]
                line = text[entries[a % len(entries)]].rstrip("\n").rstrip(",")
                if b:
                    line = line[:-65] + '"' + "0" * 64 + '"'
                text.insert(entries[0], line + ",\n")
                (d / manifest.NAME).write_text("".join(text))
            elif kind == "sub_manifest":
                sub = d / a
                if b is None:
                    (sub / manifest.NAME).mkdir(exist_ok=True)
                elif b == "seal":
                    if not (sub / manifest.NAME).exists():
                        manifest.write(sub)
                elif not (sub / manifest.NAME).is_dir():
                    (sub / manifest.NAME).write_bytes(b)
            elif kind == "stray":
                (d / a).parent.mkdir(parents=True, exist_ok=True)
                (d / a).write_text("stray\n")
            else:
                with open(d / a, "ab") as f:
                    f.write(b)
        try:
            manifest.verify(d)
        except records.RecordError as e:
            assert "\n" not in str(e) and len(str(e)) <= 500
            return
        # accepted: every file below is listed exactly once, by the nearest manifest,
        # with its SHA-256
        listed = {}
        for m in d.rglob(manifest.NAME):
            assert m.is_file()
            files = json.loads(m.read_text())["files"]
            for rel, digest in files.items():
                p = m.parent / rel
                key = p.relative_to(d).as_posix()
                assert key not in listed
                listed[key] = digest
        present = {p.relative_to(d).as_posix() for p in d.rglob("*")
                   if p.is_file() and p.name != manifest.NAME}
        assert set(listed) == present
        for key, digest in listed.items():
            assert hashlib.sha256((d / key).read_bytes()).hexdigest() == digest


_TABLE = (REPO / "data" / "published" / "tables.csv").read_text().splitlines(keepends=True)


@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_a_table_is_refused_exactly_when_a_cell_repeats(tmp_path, data):
    head, body = _TABLE[0], list(_TABLE[1:40])
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["repeat", "repeat_changed", "drop", "swap"]))
        i = data.draw(st.integers(0, len(body) - 1))
        j = data.draw(st.integers(0, len(body) - 1))
        if op == "repeat":
            body.insert(j, body[i])
        elif op == "repeat_changed":
            cells = body[i].rstrip("\n").split(",")
            cells[1] = str(int(cells[1]) + 1)          # another line of the report
            cells[-1] = cells[-1] + "1"
            body.insert(j, ",".join(cells) + "\n")
        elif op == "drop" and len(body) > 2:
            body.pop(i)
        else:
            body[i], body[j] = body[j], body[i]
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        d = Path(work)
        (d / "tables.csv").write_text(head + "".join(body))
        manifest.write(d)
        keys = [tuple(line.rstrip("\n").split(",")[i] for i in (0, 2, 3, 4)) for line in body]
        repeated = len(set(keys)) != len(keys)
        try:
            df = published_tables.read_table(d / "tables.csv")
        except AnalysisError as e:
            assert repeated, str(e)
            assert "\n" not in str(e) and "given twice (lines" in str(e)
            return
        assert not repeated
        assert len(df) == len(body)
