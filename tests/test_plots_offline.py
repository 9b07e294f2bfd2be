"""`dvc plots show` and `dvc plots diff` render offline: the page DVC writes (the template
.dvc/plots/offline.html with Vega inline) is opened in headless Chromium with every host
unreachable, and every panel must have drawn content: each Vega panel its lines, with the
y axis named by the metric (log for the standard deviations), each image loaded.

Chromium is Debian's `chromium` (.ci/run installs it where it can); without it the tests
skip, saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DVC = REPO / ".venv" / "bin" / "dvc"
ROUND3 = "round3-candidate"
STD_PANELS = {"val_std": "val/std", "ret_std": "ret/std", "adv_std": "adv/std"}
PANELS = {**STD_PANELS, "ent_action_mean": "ent/action/mean", "rew_min": "rew/min"}
IMAGES = 6

# Wraps vegaEmbed (after the template's own wrapper) to render SVG and record each
# panel; at the page's load, writes what each panel drew into <pre id="probe">.
PROBE_HEAD = """<script>
window.__embeds = [];
(function () {
  const embed = window.vegaEmbed;
  window.vegaEmbed = function (el, spec, opt) {
    const p = embed(el, spec, Object.assign({}, opt || {}, {renderer: 'svg', actions: false}));
    window.__embeds.push(p.then(res => ({el: el, empty: res === null,
      ytype: res && res.view.scale('y') ? res.view.scale('y').type : null})));
    return p;
  };
})();
</script>
"""
PROBE_TAIL = """<pre id="probe"></pre>
<script>
window.addEventListener('load', () => Promise.allSettled(window.__embeds).then(rs => {
  const out = {vega: [], images: [], errors: []};
  for (const r of rs) {
    if (r.status !== 'fulfilled') { out.errors.push(String(r.reason)); continue; }
    const div = document.querySelector(r.value.el);
    const lines = [...div.querySelectorAll('.mark-line path')]
      .filter(p => (p.getAttribute('d') || '').length > 20).length;
    const titles = [...div.querySelectorAll('.role-axis-title text')].map(t => t.textContent);
    out.vega.push({id: r.value.el.slice(1), lines: lines, titles: titles, ytype: r.value.ytype,
                   empty: r.value.empty, text: r.value.empty ? div.textContent.trim() : null});
  }
  for (const img of document.querySelectorAll('img'))
    out.images.push({src: img.getAttribute('src'), width: img.naturalWidth});
  document.getElementById('probe').textContent = JSON.stringify(out);
}));
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium (Debian: apt-get install chromium; .ci/run installs it)")


def _render(html_path: Path) -> dict:
    """What each panel of the page drew, from headless Chromium with no network."""
    html = html_path.read_text(encoding="utf-8")
    assert "cdn.jsdelivr" not in html and "<script src=" not in html
    # the inline scripts contain '</head>' and '</body>' in strings: the page's are the last
    head, _, rest = html.rpartition("</head>")
    body, _, end = rest.rpartition("</body>")
    probe = html_path.with_name("probe.html")
    probe.write_text(head + PROBE_HEAD + "</head>" + body + PROBE_TAIL + "</body>" + end,
                     encoding="utf-8")
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
                        "--virtual-time-budget=30000", "--dump-dom", probe.as_uri()],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m and m.group(1), f"the page did not finish: {r.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


def _dvc(*args, cwd=REPO):
    if not DVC.exists():
        pytest.skip("no .venv/bin/dvc: run `make venv`")
    r = subprocess.run([str(DVC), *args], cwd=cwd, capture_output=True, text=True,
                       env={"PATH": f"{DVC.parent}:/usr/bin:/bin", "DVC_NO_ANALYTICS": "1",
                            "HOME": str(Path.home())})
    assert r.returncode == 0, r.stderr


def test_dvc_plots_show_draws_every_panel_offline(tmp_path):
    _chromium()
    _dvc("plots", "show", "-o", str(tmp_path / "show"))
    got = _render(tmp_path / "show" / "index.html")
    assert got["errors"] == []
    vega = {p["id"]: p for p in got["vega"]}
    assert set(vega) == set(PANELS)
    for pid, metric in PANELS.items():
        p = vega[pid]
        assert p["lines"] >= 1, p                     # the candidate's windows at least
        assert p["titles"][0] == "rows at the window's end" and p["titles"][1].startswith(metric)
        assert p["ytype"] == ("log" if pid in STD_PANELS else "linear"), p
    assert len(got["images"]) == IMAGES and all(i["width"] > 0 for i in got["images"]), got["images"]


def test_dvc_plots_diff_with_a_kept_round_draws_or_names_every_panel(tmp_path):
    """Against round3-candidate's commit (whose dvc.yaml plots each window CSV): no panel
    is blank, the empty CSVs' panels say in one line that they hold no rows, and both
    rounds' images load."""
    _chromium()
    import subprocess as sp
    if sp.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
              text=True).stdout.strip() == "true":
        pytest.skip("shallow clone: the kept rounds' commits are not here (git fetch --unshallow)")
    from dreamer_parity import rounds
    _dvc("plots", "diff", rounds.rev(REPO, ROUND3), "-o", str(tmp_path / "diff"))
    got = _render(tmp_path / "diff" / "index.html")
    assert got["errors"] == []
    drawn = [p for p in got["vega"] if p["lines"] >= 1]
    named = [p for p in got["vega"] if p["empty"]]
    assert len(drawn) + len(named) == len(got["vega"]), got["vega"]
    assert set(PANELS) <= {p["id"] for p in drawn}
    assert all(p["text"].endswith("no rows at the revisions shown") for p in named), \
        [p["text"] for p in named]
    assert {p["id"] for p in named} == {f"metrics_plots_windows_reference_{k}_csv" for k in PANELS}
    assert len(got["images"]) == 2 * IMAGES and all(i["width"] > 0 for i in got["images"])
