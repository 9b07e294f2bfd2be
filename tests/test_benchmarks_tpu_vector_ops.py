"""benchmarks/tpu_vector_ops.py without the TPU compiler: the reading of its LLO dumps,
the table, and the one-line refusal when libtpu is missing (CI has no libtpu)."""

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "tpu_vector_ops.py"
_SPEC = importlib.util.spec_from_file_location("tpu_vector_ops", SCRIPT)
ops = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ops)

#: Two bundles of a final-bundles dump as libtpu 0.0.42.1 writes them (a*b+c, shortened).
BUNDLES = (
    "   0x1   :  { %5 = vsyncpa [#allocation4], 0  ;;  %s19_s1 = sshll.u32 %s225_s1, 4 }\n"
    "   0xd   :  { %v40_v0 = vld [vmem:[#allocation3] sm:$0xff]  ;;  %v41_v1 = vld "
    "[vmem:[#allocation5] sm:$0xff]  ;;  %s191_s24 = smov [#allocation6] }\n"
    "   0xe   :  { %v43_v3 = vmul.f32 %v41_v1, %v40_v0 }  /* %x = fusion(%a) */\n"
    "   0xf   :  { %v44_v4 = vadd.f32 %v43_v3, %v42_v2 ;; %v45_v5 = vfma.f32 %v1, %v2, %v3 }\n")


def test_count_ops_reads_vector_opcodes_only():
    assert ops.count_ops(BUNDLES) == Counter(
        {"vld": 2, "vsyncpa": 1, "vmul.f32": 1, "vadd.f32": 1, "vfma.f32": 1})
    assert ops.fused_multiply_adds(ops.count_ops(BUNDLES)) == {"vfma.f32": 1}
    assert ops.fused_multiply_adds(Counter({"vmul.f32": 3, "vadd.f32": 2})) == {}


def test_program_ops_takes_each_instructions_final_bundles(tmp_path):
    names = {"17-fusion.1-66-final_bundles.txt": BUNDLES,
             "17-fusion.1-65-schedule-analysis_final_bundles.txt": BUNDLES,
             "17-<late-finalization>-68-final_bundles.txt": BUNDLES,
             "17-TLP-73-final_bundles.txt": BUNDLES,
             "18-rev.1-66-final_bundles.txt": "{ %v1 = vsub.f32 %v2, %v3 }\n",
             "18-rev.1-01-original.txt": BUNDLES}
    for n, t in names.items():
        (tmp_path / n).write_text(t)
    got = ops.program_ops(tmp_path, set(names))
    assert set(got) == {"fusion.1", "rev.1"}
    assert got["fusion.1"]["vmul.f32"] == 1 and got["rev.1"] == Counter({"vsub.f32": 1})


def test_table_names_each_program_and_its_fused_multiply_adds():
    rows = [{"program": "a*b+c", "float_ops": {"vadd.f32": 1, "vmul.f32": 1},
             "fused_multiply_adds": {}},
            {"program": "x", "float_ops": {"vfma.f32": 2}, "fused_multiply_adds": {"vfma.f32": 2}}]
    lines = ops.table(rows).splitlines()
    assert lines[2] == "| `a*b+c` | vadd.f32 1, vmul.f32 1 | none |"
    assert lines[3] == "| `x` | vfma.f32 2 | vfma.f32 2 |"


def test_without_libtpu_it_refuses_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO / "src")
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o.json")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: the libtpu package"), r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "o.json").exists()


def test_the_kept_figures_have_no_fused_multiply_add():
    # docs/DEVIATIONS.md T4 and REFERENCE_RUN.md quote benchmarks/results/2026-12-07-tpu-vector-ops.json
    import json
    doc = json.loads((REPO / "benchmarks/results/2026-12-07-tpu-vector-ops.json").read_text())
    assert doc["schema"] == ops.SCHEMA and doc["libtpu"] == "0.0.42.1"
    got = {r["program"]: r for r in doc["programs"]}
    assert set(got) == {"a*b+c", "a*b-c*d", "exact_mean[1024,255]"}
    assert got["a*b+c"]["float_ops"] == {"vadd.f32": 1, "vmul.f32": 1}
    assert got["a*b-c*d"]["float_ops"] == {"vmul.f32": 2, "vsub.f32": 1}
    assert all(r["fused_multiply_adds"] == {} for r in doc["programs"])
    assert got["exact_mean[1024,255]"]["device_kind"] == "TPU v5 lite"


def test_dump_ops_reads_every_final_bundle_dump_once(tmp_path):
    names = {"1-fusion.1-01-final_bundles.txt": BUNDLES,
             "1-fusion.1-00-schedule-analysis_final_bundles.txt": BUNDLES,
             "1-TLP-01-final_bundles.txt": "{ %v1 = vsub.f32 %v2, %v3 }\n",
             "1-fusion.1-02-original.txt": BUNDLES}
    for n, t in names.items():
        (tmp_path / n).write_text(t)
    ops_, files = ops.dump_ops(tmp_path)
    assert files == 2
    assert ops_ == Counter({"vld": 2, "vsyncpa": 1, "vmul.f32": 1, "vadd.f32": 1,
                            "vfma.f32": 1, "vsub.f32": 1})
