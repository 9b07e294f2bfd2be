"""Build ``.dvc/plots/offline.html``: the HTML template of ``dvc plots show`` and ``dvc plots
diff`` (``plots.html_template`` in ``.dvc/config``) with Vega, Vega-Lite and Vega-Embed
inline, so that every Vega panel renders without network (DVC's own page loads them from a
CDN).  The scripts are the packages' minified builds, taken from their npm tarballs::

    make plots-template                      # npm pack of the pinned versions, then this
    python tools/vega_template.py DIR        # DIR holds vega-*.tgz, vega-lite-*.tgz, vega-embed-*.tgz

The page also keeps DVC's images inside the window: in ``dvc plots diff`` each round's PNG
takes at most half the width, side by side; a plot whose files hold no rows at any
revision shown (DVC's spec ``{}``) is one line of text instead of an empty panel.  Exit status 2, with one line, when a tarball
is missing or lacks its build.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".dvc" / "plots" / "offline.html"
PACKAGES = (("vega", "build/vega.min.js"), ("vega-lite", "build/vega-lite.min.js"),
            ("vega-embed", "build/vega-embed.min.js"))

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    <!-- {versions}: BSD-3-Clause, University of Washington Interactive Data Lab;
         built by tools/vega_template.py (make plots-template). -->
{inline}
    <script>
        // DVC writes the spec {{}} for a plot whose files hold no rows at any revision
        // shown (a side without training-metric windows): one line says so instead of
        // an empty panel.
        (function () {{
            var embed = window.vegaEmbed;
            window.vegaEmbed = function (el, spec, opt) {{
                var values = spec && spec.data && spec.data.values;
                if (!spec || !spec.data || (Array.isArray(values) && values.length === 0)) {{
                    var div = document.querySelector(el);
                    div.className = "dvc-no-data";
                    div.textContent = el.slice(1) + ": no rows at the revisions shown";
                    return Promise.resolve(null);
                }}
                return embed(el, spec, opt);
            }};
        }})();
    </script>
    <style>
        table {{ border-spacing: 15px; }}
        body {{ font-family: sans-serif; }}
        .dvc-no-data {{ color: #555; font-style: italic; margin: 4px 8px; }}
        img {{ max-width: calc(100vw - 60px); height: auto; }}
        div:has(> div + div) > div > img {{ max-width: calc(50vw - 60px); }}
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def build(tar_dir: Path) -> str:
    """The template's text from the three tarballs in ``tar_dir``.

    Raises:
      SystemExit: a tarball is missing, or lacks its minified build or holds ``</script``.
    """
    scripts, versions = [], []
    for name, member in PACKAGES:
        tgz = sorted(p for p in tar_dir.glob(f"{name}-[0-9]*.tgz"))
        if len(tgz) != 1:
            raise SystemExit(f"error: {tar_dir}: needs exactly one {name}-<version>.tgz "
                             f"(found {len(tgz)})")
        with tarfile.open(tgz[0]) as tf:
            try:
                js = tf.extractfile(f"package/{member}").read().decode("utf-8")
            except KeyError:
                raise SystemExit(f"error: {tgz[0].name}: no package/{member}") from None
        js = "\n".join(line for line in js.splitlines()
                       if not line.startswith("//# sourceMappingURL="))
        if "</script" in js:
            raise SystemExit(f"error: {tgz[0].name}: {member} holds '</script', cannot be inlined")
        scripts.append(f"    <script>\n{js}\n    </script>")
        versions.append(tgz[0].name[:-len(".tgz")])
    # Placeholders DVC fills ({plot_divs}, {refresh_tag}) stay; {scripts} is left out, so
    # DVC's CDN script tags are not added.
    return (PAGE.replace("{{", "\0").replace("}}", "\1")
            .replace("{versions}", ", ".join(versions)).replace("{inline}", "\n".join(scripts))
            .replace("\0", "{").replace("\1", "}"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python tools/vega_template.py DIR (a directory with the three npm "
              "tarballs)", file=sys.stderr)
        return 2
    text = build(Path(argv[0]))
    tmp = OUT.with_name(f"{OUT.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    print(f"{OUT.relative_to(ROOT)}: {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
