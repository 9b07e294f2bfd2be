"""The tracked tree stays small enough to copy to an accelerator's machine with every run.

Such a copy holds the whole working tree, at most 64 MiB, and the reference's wheels and
checkout need about 21 MiB of that (docs/REFERENCE_RUN.md).  The
files git tracks are therefore held to :data:`LIMIT` (40 MiB), measured as
``git ls-files -z | xargs -0 du -cb`` measures them (apparent sizes), with room for
:data:`ROOM_RUNS` more kept runs of the size the largest kept run has now.
"""

import subprocess
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
MIB = 2 ** 20
#: Most bytes the tracked files may take (40 MiB).
LIMIT = 40 * MIB
#: Kept runs (data/runs/<name>/s<S>/) the tree must still have room for.
ROOM_RUNS = 150


def tracked_sizes(root: Path = REPO) -> dict[str, int]:
    """``{path: bytes}`` of every file git tracks in ``root``'s work tree (apparent size;
    a tracked file deleted in the work tree counts 0)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         capture_output=True).stdout
    sizes = {}
    for name in out.decode().split("\0"):
        if name:
            p = root / name
            sizes[name] = p.lstat().st_size if p.is_file() or p.is_symlink() else 0
    return sizes


def largest(sizes: dict[str, int], n: int = 5) -> str:
    return ", ".join(f"{p} ({s / MIB:.2f} MiB)" for p, s in
                     sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:n])


def over_limit(root: Path = REPO) -> str | None:
    """None when the tracked tree of ``root`` is at most :data:`LIMIT`; else the failure
    message, naming the five largest paths."""
    sizes = tracked_sizes(root)
    total = sum(sizes.values())
    if total <= LIMIT:
        return None
    return (f"tracked tree {total / MIB:.2f} MiB > {LIMIT / MIB:.0f} MiB; "
            f"largest: {largest(sizes)}")


def test_the_tracked_tree_is_at_most_40_mib():
    assert over_limit() is None


def test_room_for_150_more_kept_runs():
    sizes = tracked_sizes()
    runs: dict[str, int] = {}
    for path, size in sizes.items():
        parts = Path(path).parts
        if parts[:2] == ("data", "runs") and len(parts) == 5:
            runs["/".join(parts[:4])] = runs.get("/".join(parts[:4]), 0) + size
    assert len(runs) >= 20
    per_run = max(runs.values())
    need = sum(sizes.values()) + ROOM_RUNS * per_run
    assert need <= LIMIT, (f"{ROOM_RUNS} more kept runs of {per_run / 1024:.0f} KiB would take "
                           f"the tree to {need / MIB:.2f} MiB; largest: {largest(sizes)}")


def test_the_message_names_the_five_largest_paths():
    got = largest({"a": 3 * MIB, "b": MIB, "c": 2 * MIB, "d": 5, "e": 7, "f": 1})
    assert got == "a (3.00 MiB), c (2.00 MiB), b (1.00 MiB), e (0.00 MiB), d (0.00 MiB)"


def test_a_tree_over_the_limit_fails_naming_the_largest(tmp_path):
    """The check itself: a repository with one tracked file over the limit (sparse, so it
    costs no disk) fails it, and the message names that file."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(LIMIT + 1)
    (tmp_path / "small.txt").write_text("x\n")
    subprocess.run(["git", "add", "-N", "big.bin", "small.txt"], cwd=tmp_path, check=True)
    assert sum(tracked_sizes(tmp_path).values()) == LIMIT + 3
    msg = over_limit(tmp_path)
    assert msg.startswith("tracked tree 40.00 MiB > 40 MiB; largest: big.bin (40.00 MiB), "
                          "small.txt (0.00 MiB)")
    big.unlink()
    assert over_limit(tmp_path) is None
