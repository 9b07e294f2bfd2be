"""What an XLA profile says per op: the trace's op events and the source line of each op.

Read by ``benchmarks/profile_candidate.py`` (the candidate's per-op profile on the CPU or an
accelerator).  Standard library only; nothing here runs jax.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re

__all__ = ["trace_file", "op_events", "source_of_ops", "SRC_FILES"]


def trace_file(trace_dir: str) -> str:
    """The trace viewer's JSON (``*.trace.json.gz``) that ``jax.profiler.trace`` wrote under
    ``trace_dir``; FileNotFoundError when there is none."""
    files = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    if not files:
        raise FileNotFoundError("no *.trace.json.gz under the trace directory")
    return files[0]


def op_events(trace_dir: str, device: bool = False):
    """(name, duration s, thread id, start s) of the complete events (``"ph": "X"``) of the
    trace under ``trace_dir``.

    With ``device`` False: every complete event (on CPU the ops run on host threads).  With
    ``device`` True: only the events of processes named ``/device:...`` (an accelerator's
    plane in the trace), and of those only the threads named ``XLA Ops`` when the process
    has such a thread (the per-op line; the module and step lines above it would count each
    op twice).  Raises FileNotFoundError when there is no trace, and ValueError when
    ``device`` is True and the trace has no device process (a trace taken on the CPU)."""
    with gzip.open(trace_file(trace_dir), "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    keep = None
    if device:
        procs, threads = {}, collections.defaultdict(dict)
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "process_name":
                procs[e.get("pid")] = str(e.get("args", {}).get("name", ""))
            elif e.get("ph") == "M" and e.get("name") == "thread_name":
                threads[e.get("pid")][e.get("tid")] = str(e.get("args", {}).get("name", ""))
        keep = set()
        for pid, name in procs.items():
            if not name.startswith("/device:"):
                continue
            ops = {tid for tid, tname in threads[pid].items() if tname == "XLA Ops"}
            tids = ops or set(threads[pid]) | {None}
            keep |= {(pid, tid) for tid in tids}
        if not keep:
            raise ValueError("op_events: the trace has no /device: process (taken on the CPU?)")
    out = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        if keep is not None and (e.get("pid"), e.get("tid")) not in keep \
                and (e.get("pid"), None) not in keep:
            continue
        out.append((e.get("name", "?"), e["dur"] * 1e-6, e.get("tid"), e["ts"] * 1e-6))
    return out


SRC_FILES = ("agent.py", "rssm.py", "heads.py", "nets.py", "dists.py", "twohot.py",
              "optim.py", "loop.py", "replay.py", "env.py", "evaluate.py", "seedmap.py")


def source_of_ops(hlo_text: str) -> dict[str, tuple[str, bool]]:
    """HLO instruction name -> (innermost ``file:line function`` of this package's candidate
    code that the op was traced from, whether it belongs to a backward pass), read from
    the ``FileNames`` / ``FunctionNames`` / ``FileLocations`` / ``StackFrames`` tables and the
    ops' ``metadata`` in an optimised HLO text (jax 0.10).  Ops without a stack frame in
    those files map to the last component of their ``op_name``; ops whose metadata has no
    ``op_name`` (made by an XLA pass) map to their name without the numeric suffix, and ops
    without metadata are absent.  Raises ValueError when the text has no stack-frame
    tables."""
    tables = {"FileNames": {}, "FunctionNames": {}, "FileLocations": {}, "StackFrames": {}}
    section = None
    for line in hlo_text.split("\n"):
        if line in tables:
            section = line
            continue
        m = re.match(r"^(\d+) (.*)$", line)
        if section is None or not m:
            if section == "StackFrames":
                break
            continue
        tables[section][int(m.group(1))] = m.group(2)
    if not tables["StackFrames"]:
        raise ValueError("source_of_ops: the HLO text has no StackFrames table")
    fields = lambda t: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", t)}
    files = {i: v.strip('"').rsplit("/", 1)[-1] for i, v in tables["FileNames"].items()}
    funcs = {i: v.strip('"').rsplit(".", 1)[-1] for i, v in tables["FunctionNames"].items()}
    locs = {}
    for i, v in tables["FileLocations"].items():
        f = fields(v)
        locs[i] = (files[f["file_name_id"]], funcs[f["function_name_id"]], f["line"])
    frames = {i: fields(v) for i, v in tables["StackFrames"].items()}

    def innermost(fid):
        seen = set()
        while fid in frames and fid not in seen:
            seen.add(fid)
            fname, func, line = locs[frames[fid]["file_location_id"]]
            if fname in SRC_FILES:
                return f"{fname}:{line} {func}"
            fid = frames[fid].get("parent_frame_id", 0)
        return None

    out = {}
    for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = [^\n]*?metadata=\{([^}]*)\}", hlo_text,
                         re.M):
        op = re.search(r'op_name="([^"]*)"', m.group(2))
        sf = re.search(r"stack_frame_id=(\d+)", m.group(2))
        if not op:       # made by an XLA pass (e.g. a reduce-window): group by its kind
            out[m.group(1)] = (re.sub(r"\.\d+$", "", m.group(1)) + " (no op_name)", False)
            continue
        where = innermost(int(sf.group(1))) if sf else None
        out[m.group(1)] = (where or op.group(1).rsplit("/", 1)[-1] or "?",
                           "transpose(jvp" in op.group(1))
    return out
