"""What the accelerator check's phases came to: a child's outcome, the device-CPU
differences of the training metrics, the summary of ``accel_check.json`` and its table.

Standard library only.
"""

from __future__ import annotations

import json

#: stderr text that names an exhausted device memory.
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM when allocating")


def classify(returncode: int | None, stdout: str, stderr: str, stopped: bool,
             seconds: float) -> dict:
    """A finished child's outcome: ``{"status": "ok", "result": {...}}`` (its last
    ``PHASE {json}`` line, exit 0), ``"stopped"`` (killed at the budget's end, after
    ``seconds``), ``"oom"`` (stderr names an exhausted device memory, :data:`OOM_MARKERS`) or
    ``"error"``; the last two with ``reason`` (the last unindented stderr line, 300
    characters at most) and ``stderr_tail`` (its last 20 non-empty lines)."""
    lines = [x for x in stdout.splitlines() if x.startswith("PHASE ")]
    if stopped:
        return {"status": "stopped", "reason": f"budget ended after {seconds:.0f} s of this phase"}
    if returncode == 0 and lines:
        return {"status": "ok", "result": json.loads(lines[-1][len("PHASE "):])}
    tail = [x for x in stderr.strip().splitlines() if x.strip()][-20:]
    last = next((x.strip() for x in reversed(tail) if not x.startswith(" ")),
                tail[-1].strip() if tail else f"exit {returncode}")
    return {"status": "oom" if any(m in stderr for m in OOM_MARKERS) else "error",
            "reason": last[:300], "stderr_tail": tail}


def metric_differences(device: dict, cpu: dict) -> dict:
    """The largest differences between two ``{metric: [value per update]}`` series.

    Returns ``{"max_abs": float, "max_abs_metric": str, "max_abs_update": int, "max_rel":
    float, "max_rel_metric": str, "per_metric": {name: {"max_abs", "max_rel"}}, "metrics":
    int, "only_one_side": [names]}``; the relative difference is
    ``|a - b| / max(|a|, |b|)`` (0 where both are 0); the ``*_metric`` and ``*_update``
    fields are None where every difference is 0.  Non-finite values (None read as NaN) on
    either side count as an infinite difference unless both are the same non-finite value
    (NaN and NaN included).
    """
    per, best_abs, best_rel = {}, (0.0, None, None), (0.0, None)
    for name in sorted(set(device) & set(cpu)):
        ma = mr = 0.0
        for i, (x, y) in enumerate(zip(device[name], cpu[name])):
            x = float("nan") if x is None else float(x)
            y = float("nan") if y is None else float(y)
            if x == y or (x != x and y != y):
                d = r = 0.0
            elif not (abs(x) < float("inf") and abs(y) < float("inf")):
                d = r = float("inf")
            else:
                d = abs(x - y)
                r = d / max(abs(x), abs(y))
            ma, mr = max(ma, d), max(mr, r)
            if d > best_abs[0]:
                best_abs = (d, name, i)
        if mr > best_rel[0]:
            best_rel = (mr, name)
        per[name] = {"max_abs": ma, "max_rel": mr}
    return {"max_abs": best_abs[0], "max_abs_metric": best_abs[1],
            "max_abs_update": best_abs[2], "max_rel": best_rel[0],
            "max_rel_metric": best_rel[1], "per_metric": per, "metrics": len(per),
            "only_one_side": sorted(set(device) ^ set(cpu))}


def brief(ph: dict) -> str:
    """``": <rate>, compile <s>, peak <MiB>"`` of a finished phase (empty without figures)."""
    r = ph.get("result") or {}
    bits = []
    if "seed_updates_per_s" in r:
        bits.append(f"{r['seed_updates_per_s']:.2f} seed-updates/s")
    if "compile_s" in r:
        bits.append(f"compile {r['compile_s']:.1f} s")
    mem = r.get("memory") or {}
    if mem.get("peak_bytes"):
        bits.append(f"peak {mem['peak_bytes'] / 2**20:.0f} MiB ({mem['source']})")
    return ": " + ", ".join(bits) if bits else ""


def summarise(phases: list[dict]) -> dict:
    """The ``summary`` of ``accel_check.json`` from its ``phases``: per kind (``step``,
    ``loop``) and seed count (a string) the device's figures (seed-updates per second,
    seconds per update and to compile, peak bytes); ``largest_ok`` per kind; ``compare`` per
    precision (:func:`metric_differences`, device against the CPU backend); ``cpu_step_1``;
    ``skipped`` and ``failed`` (one line each)."""
    out = {"step": {}, "loop": {}, "largest_ok": {}, "compare": {}, "skipped": [],
           "failed": []}
    cpu = next((p for p in phases if p["name"] == "compare-cpu" and p["status"] == "ok"), None)
    for p in phases:
        r = p.get("result") or {}
        if p["status"] in ("skipped", "stopped"):
            out["skipped"].append(f"{p['name']}: {p['reason']}")
        elif p["status"] != "ok":
            out["failed"].append(f"{p['name']}: {p['status']}: {p.get('reason', '')}")
        if p["status"] != "ok" or p["kind"] not in ("step", "loop"):
            continue
        if p["side"] == "device" and "seed_updates_per_s" in r:
            out[p["kind"]][str(p["seeds"])] = {
                "seed_updates_per_s": r["seed_updates_per_s"], "update_s": r["update_s"],
                "compile_s": r["compile_s"], "peak_bytes": r["memory"]["peak_bytes"],
                "memory_source": r["memory"]["source"], "seed_batch": r.get("seed_batch")}
            out["largest_ok"][p["kind"]] = max(out["largest_ok"].get(p["kind"], 0), p["seeds"])
        if p["side"] == "device" and "metrics" in r and cpu is not None:
            d = metric_differences(r["metrics"], cpu["result"]["metrics"])
            d["device_platform"] = (r.get("backend") or {}).get("platform")
            d["cpu_platform"] = (cpu["result"].get("backend") or {}).get("platform")
            out["compare"][p["compare"]] = d
    if cpu is not None and "seed_updates_per_s" in cpu["result"]:
        out["cpu_step_1"] = {k: cpu["result"][k] for k in ("seed_updates_per_s", "compile_s")}
    return out


def print_table(res: dict) -> None:
    """The figures of ``accel_check.json``'s content ``res`` as a Markdown table on stdout,
    then the comparisons and the skipped and failed phases."""
    s = res["summary"]
    dev = (res.get("device") or {}).get("backend") or {}
    print(f"\naccel_check: {dev.get('device_kind')} ({dev.get('platform')}), "
          f"{res['date_utc']}, {res['elapsed_s']:.0f} s of {res['budget_s']:.0f}, "
          f"--seed-batch {res['settings'].get('seed_batch', 'auto')}")
    print("\n| seeds | step: seed-updates/s | step compile s | step peak MiB "
          "| loop: seed-updates/s | loop compile s | loop peak MiB |")
    print("|---|---|---|---|---|---|---|")
    counts = sorted({int(k) for kind in ("step", "loop") for k in s[kind]})
    for n in counts:
        cells = []
        for kind in ("step", "loop"):
            f = s[kind].get(str(n))
            cells += ([f"{f['seed_updates_per_s']:.2f}", f"{f['compile_s']:.1f}",
                       f"{f['peak_bytes'] / 2**20:.0f}"] if f else ["-", "-", "-"])
        print(f"| {n} | " + " | ".join(cells) + " |")
    for prec, d in s["compare"].items():
        head = (f"\ncompare ({prec} precision, {d['device_platform']} against "
                f"{d['cpu_platform']}, {d['metrics']} metrics over the updates): ")
        if d["max_abs_metric"] is None:
            print(head + "every value equal")
        else:
            print(head + f"largest difference {d['max_abs']:.3g} ({d['max_abs_metric']}, "
                  f"update {d['max_abs_update']}), largest relative {d['max_rel']:.3g} "
                  f"({d['max_rel_metric']})")
    for line in s["skipped"] + s["failed"]:
        print(f"- {line}")
