"""The HTML report opened in headless Chromium: tables and both figures are rendered."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from .drivers import run_suite, world

# A page next to the report that loads it in an iframe and writes what the browser rendered.
PROBE = """<html><body><pre id="out">pending</pre>
<iframe id="f" src="report.html" width="1400" height="3000"></iframe>
<script>
document.getElementById('f').onload = function () {
  const d = this.contentDocument;
  const q = s => [...d.querySelectorAll('.swe-residual-report ' + s)];
  document.getElementById('out').textContent = JSON.stringify({
    figs: q('svg.fig').map(s => ({label: s.getAttribute('aria-label'), w: s.getBoundingClientRect().width,
                                  h: s.getBoundingClientRect().height, bars: s.querySelectorAll('rect').length})),
    tables: q('table').map(t => [...t.rows].map(r => [...r.cells].map(c => c.textContent))),
    titles: q('h3').map(h => h.textContent)});
};
</script></body></html>"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("SWE_RESIDUAL_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required here (SWE_RESIDUAL_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return exe


@pytest.mark.browser
def test_html_report_renders_tables_and_figures(tmp_path):
    exe = chromium()
    world(tmp_path)
    run = tmp_path / "run"
    run_suite(world=tmp_path, agents=["oracle", "nop"])
    (run / "probe.html").write_text(PROBE)
    proc = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--allow-file-access-from-files",
            "--virtual-time-budget=15000",
            "--dump-dom",
            (run / "probe.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r'<pre id="out">(.*?)</pre>', proc.stdout, re.S)
    assert m and m.group(1) != "pending", proc.stdout[-1000:] + proc.stderr[-1000:]
    seen = json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    titles = seen["titles"]
    for prefix in ("Table 3", "Table 4", "Table 8", "Table 2", "Figure 1", "Figure 2"):
        assert any(t.startswith(prefix) for t in titles), (prefix, titles)
    table3 = seen["tables"][0]
    assert table3[0][:5] == ["Track", "Agent", "Residual (%)", "Ref. Clean (%)", "Gap (pts)"]
    rows = {r[1]: r for r in table3[1:]}
    assert rows["oracle"][2:5] == ["100.0", "100.0", "0.0"] and rows["nop"][2:5] == ["0.0", "0.0", "0.0"]
    assert len(seen["figs"]) == 2
    for fig in seen["figs"]:  # drawn at a readable size, with a background and bars
        assert fig["w"] > 200 and fig["h"] > 100 and fig["bars"] >= 3, fig


def test_the_pages_css_has_no_control_characters():
    """A CSS escape written in a Python string (\\25b2, the sort arrow) once became an octal escape:
    the arrow rendered as a control character and `b2`. The stylesheet holds printable text only."""
    from swe_residual.report.html.kit import CSS

    bad = sorted({hex(ord(ch)) for ch in CSS if ord(ch) < 0x20 and ch != "\n"})
    assert bad == [], bad
    assert '::after{content:" \\25b2"}' in CSS and '::after{content:" \\25bc"}' in CSS
