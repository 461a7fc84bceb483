"""`foliosim reproduce --report`: plots, the self-contained HTML report, and
that it renders in a real browser (headless Chromium)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess

import pytest

import foliosim
from conftest import one_json, run_cli, stderr_lines
from foliosim import report

EXP = "core-pf1-scaling"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One real reproduction with --report (a few seconds), shared."""
    d = tmp_path_factory.mktemp("report")
    proc = run_cli("reproduce", EXP, "--json", "--report", str(d / "rep"), "--out", str(d / "json"))
    assert proc.returncode == 0, proc.stderr
    return one_json(proc.stdout), d / "rep"


def _png_size(data: bytes) -> tuple[int, int]:
    import matplotlib.image as mpimg

    img = mpimg.imread(io.BytesIO(data), format="png")
    return img.shape[1], img.shape[0]


def test_demo_experiment_contract(made):
    rep, _ = made
    assert rep["name"] == EXP
    assert [r["label"] for r in rep["rows"] if r["metric"] == "page_fault1 ops/s"] == \
        ["1 task", "2 tasks", "4 tasks", "8 tasks"]
    for r in rep["rows"]:
        assert {"label", "metric", "unit", "seed", "simulated"} <= set(r)
        assert r["seed"] is None and r["simulated"] > 0
    (s,) = rep["series"]
    assert s["x"] == [1, 2, 4, 8] and len(s["y"]) == 4
    # process mode shares almost nothing: more tasks, more ops/s
    assert s["y"] == sorted(s["y"]) and s["y"][-1] > 2 * s["y"][0]
    assert rep["profile"]["name"] == "generic-x86" and "nr_cpus" in rep["profile"]["toml"]
    assert [c["config"]["workload"]["tasks"] for c in rep["configs"]] == [1, 2, 4, 8]


def test_report_files_and_contents(made):
    rep, d = made
    page = (d / "report.html").read_text()
    assert (d / f"{EXP}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # self-contained: no external resource at all
    assert not re.search(r'(src|href)="(?!data:|#)', page)
    imgs = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 1
    w, h = _png_size(base64.b64decode(imgs[0]))
    assert w > 200 and h > 100
    assert base64.b64decode(imgs[0]) == (d / f"{EXP}.png").read_bytes()
    body = page.split('<table class="results">', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == 2 + len(rep["rows"])  # two header rows
    assert "no seed figure" in body
    for what in (f"foliosim reproduce {EXP}", f"foliosim {foliosim.__version__}", "generic-x86",
                 "[workload]", "nr_cpus = 64"):
        assert what in page, what
    assert re.search(r"<td>seed</td><td>1</td>", page)


def test_report_configs_rerun_to_the_same_config(made):
    rep, d = made
    for c in rep["configs"]:
        path = d / EXP / f"{report.slug(c['label'])}.toml"
        assert foliosim.load_config(path) == c["config"]


def test_report_is_deterministic(made, tmp_path):
    rep, _d = made
    report.write_report([rep], tmp_path, version="v", command="x")
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    report.write_report([rep], tmp_path, version="v", command="x")
    assert first == {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}


def test_difference_and_bar_plot(tmp_path):
    assert report.difference(100, 125) == (25.0, 25.0)
    assert report.difference(-200, -100) == (100.0, 50.0)
    assert report.difference(None, 3) == (None, None)
    assert report.difference(0, 3) == (3.0, None)
    rep = {"name": "x", "title": "t", "rows": [
        {"label": "a", "metric": "m", "unit": "ops/s", "seed": 100, "simulated": 140},
        {"label": "b", "metric": "m", "unit": "%", "seed": 10, "simulated": 11}], "notes": ["n"]}
    page = report.write_report([rep], tmp_path, version="v").read_text()
    assert "+40.0%" in page and "+10.0%" in page
    assert re.search(r'class="num bad">\+40\.0%', page)      # over 25%: flagged
    assert not re.search(r'class="num bad">\+10\.0%', page)
    w, h = _png_size((tmp_path / "x.png").read_bytes())
    assert w > 2 * h  # one panel per unit: two side by side


def test_report_dir_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    proc = run_cli("reproduce", EXP, "--report", str(f))
    assert proc.returncode == 2
    lines = stderr_lines(proc)
    assert len(lines) == 1 and "--report" in lines[0] and str(f) in lines[0]


# ------------------------------------------------------------- in a browser --
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Appended to a copy of the report: once everything has loaded, it writes
# what a reader would see into the DOM, which --dump-dom prints.
PROBE = """
<script>
window.addEventListener("load", () => {
  const imgs = [...document.images].map(i => ({w: i.naturalWidth, h: i.naturalHeight, ok: i.complete,
                                               shown: i.getBoundingClientRect().width}));
  const tables = [...document.querySelectorAll("table.results")].map(t => ({
      rows: t.tBodies[0].rows.length,
      cells: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.innerText.trim())),
      visible: t.getBoundingClientRect().height > 0}));
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({imgs, tables, title: document.title});
  document.body.appendChild(out);
});
</script>
"""


def _chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
           "--disable-dev-shm-usage", "--hide-scrollbars", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; "
                    "`make test` installs it with apt-get when run as root)")
def test_report_renders_in_headless_chromium(made, tmp_path):
    rep, d = made
    probe = tmp_path / "probe.html"
    probe.write_text((d / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    proc = _chromium("--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"no probe output; chromium stderr: {proc.stderr[-500:]}"
    import html as _html

    seen = json.loads(_html.unescape(m.group(1)))
    assert seen["imgs"] and all(i["ok"] and i["w"] > 200 and i["h"] > 100 and i["shown"] > 0 for i in seen["imgs"])
    (t,) = seen["tables"]
    assert t["visible"] and t["rows"] == len(rep["rows"])
    assert t["cells"][0][:2] == ["1 task", "page_fault1 ops/s"]
    # and a screenshot that is not blank
    shot = tmp_path / "shot.png"
    proc = _chromium("--window-size=1200,1600", f"--screenshot={shot}", (d / "report.html").as_uri())
    assert shot.exists(), proc.stderr[-500:]
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    assert img[..., :3].std() > 0.05  # text, tables and a plot, not an empty page
