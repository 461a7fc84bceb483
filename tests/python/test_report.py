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
    assert "not published" in body
    for what in (f"foliosim reproduce {EXP}", f"foliosim {foliosim.__version__}", "generic-x86",
                 "[workload]", "nr_cpus = 64"):
        assert what in page, what
    assert re.search(r"<td>RNG seed</td><td>1</td>", page)


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


# ----------------------------------------------------------- plot layout --
def _rows(label_fmt: str, n: int, unit: str, metric: str = "m", **kw) -> list[dict]:
    return [{"label": label_fmt.format(i), "metric": metric, "unit": unit, "published": 1000.0 * (i + 1),
             "simulated": 900.0 * (i + 1), **kw} for i in range(n)]


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[i + 1:], i + 1)
            if a.width and b.width and a.overlaps(b)]


def test_published_key_and_the_old_seed_key_read_alike(tmp_path):
    new = {"name": "a", "title": "t", "seed": 3, "rows": [
        {"label": "x", "metric": "m", "unit": "%", "published": 10.0, "simulated": 12.0},
        {"label": "y", "metric": "m", "unit": "%", "published": None, "simulated": 1.0}]}
    old = {**new, "rows": [{**{k: v for k, v in r.items() if k != "published"}, "seed": r["published"]}
                           for r in new["rows"]]}
    assert [report.published(r) for r in old["rows"]] == [10.0, None]
    assert report.plot_png(new) == report.plot_png(old)
    a = report.render_html([new], [b""], version="v")
    assert a == report.render_html([old], [b""], version="v")
    assert '<th class="group">published</th>' in a and "+20.0%" in a and "— (not published)" in a
    assert "<td>RNG seed</td><td>3</td>" in a
    assert "seed (published)" not in a and "no seed figure" not in a


def test_bar_labels_and_values_do_not_overlap():
    # mthp-will-it-scale's shape: ten tests, two units, long labels, values
    # from -47 to +410 and a missing one.
    names = ["page_fault1", "malloc1", "mmap1", "tlb_flush2", "page_fault2", "page_fault3", "read1", "read2",
             "tlb_flush1", "context_switch1 with a much longer label than the others"]
    rows = [{"label": n, "metric": "baseline ops/s", "unit": "ops/s", "published": 1e5 * (i + 1),
             "simulated": 1.1e5 * (i + 1)} for i, n in enumerate(names)]
    rows += [{"label": n, "metric": "ops/s change", "unit": "%", "published": p, "simulated": m}
             for n, p, m in zip(names, [410, -47, -8.4, 21, 34, 59, 5.5, 230, 5.7, 6.8],
                                [367, -42, 0.0, 63, 0.0, 0.0, 0.0, 0.0, 0.0, None], strict=True)]
    fig = report.plot_figure({"name": "w", "title": "t", "rows": rows})
    r = _drawn(fig)
    axes = [ax for ax in fig.axes if ax.get_yticklabels()]
    assert len(axes) == 2
    fig_box = fig.bbox
    for ax in axes:
        ticks = [t.get_window_extent(r) for t in ax.get_yticklabels() if t.get_text()]
        assert len(ticks) == 10 and not _overlaps(ticks)
        values = [t.get_window_extent(r) for t in ax.texts]
        assert len(values) == 20 and not _overlaps(values)
        for b in ticks + values:  # nothing drawn outside the picture
            assert fig_box.x0 - 1 <= b.x0 and b.x1 <= fig_box.x1 + 1, b


def test_many_units_make_a_grid_not_a_strip():
    # luf-llama's shape: seven units, two or more rows each.
    rows = [r for u in ("IPIs", "count", "misses", "%", "ratio", "events", "s") for r in _rows(u + " {}", 3, u)]
    png = report.plot_png({"name": "l", "title": "t", "rows": rows})
    w, h = _png_size(png)
    assert w <= 1300 and 0.3 <= w / h <= 2.5, (w, h)
    fig = report.plot_figure({"name": "l", "title": "t", "rows": rows})
    r = _drawn(fig)
    lefts = {round(ax.get_window_extent(r).x0, -2) for ax in fig.axes}
    assert len(fig.axes) == 7 and len(lefts) == 2  # two columns


def test_line_plots_draw_the_published_points():
    # mthp-patches' shape: a curve of 4 steps, 12 published rows, 4 of them on it.
    ys = [-34.8, -35.0, -34.7, -38.2]
    rows = []
    for i, y in enumerate(ys):
        rows += [{"label": f"+{i}", "metric": "real change vs baseline", "unit": "%", "published": -6.0 - i,
                  "simulated": -12.0 - i},
                 {"label": f"+{i}", "metric": "sys change vs baseline", "unit": "%", "published": -24.0 - i,
                  "simulated": y}]
    rows.append({"label": "other", "metric": "MiB", "unit": "MiB", "published": 4.0, "simulated": ys[0]})
    series = [{"name": "sys change", "x": [1, 2, 3, 4], "y": ys, "xlabel": "step",
               "ylabel": "sys change vs baseline (%)"}]
    pts, placed = report.place_published(series, rows)
    assert pts == {(0, i): -24.0 - i for i in range(4)}
    assert placed == {1, 3, 5, 7}  # not the MiB row, whose value only happens to equal a point
    fig = report.plot_figure({"name": "p", "title": "t", "rows": rows, "series": series})
    line_ax = next(ax for ax in fig.axes if ax.get_xlabel() == "step")
    diamonds = [ln for ln in line_ax.get_lines() if ln.get_marker() == "D"]
    assert len(diamonds) == 1 and list(diamonds[0].get_ydata()) == [-24.0, -25.0, -26.0, -27.0]
    assert list(diamonds[0].get_xdata()) == [1, 2, 3, 4]
    assert line_ax.get_ylim()[1] > -24.0 > line_ax.get_ylim()[0]  # negative values are in view
    # the rows not on the curve (4 real + the MiB one) are bars in two more panels
    assert sorted(len(ax.get_yticklabels()) for ax in fig.axes if ax is not line_ax) == [1, 4]
    # a series may carry its published figures itself
    explicit = [{**series[0], "published": [None, -1.0, None, -2.0]}]
    assert report.place_published(explicit, [])[0] == {(0, 1): -1.0, (0, 3): -2.0}


def test_zero_and_missing_are_told_apart():
    rows = [{"label": "zero", "metric": "m", "unit": "%", "published": 5.0, "simulated": 0.0},
            {"label": "missing", "metric": "m", "unit": "%", "published": 5.0, "simulated": None},
            {"label": "unpublished", "metric": "m", "unit": "%", "published": None, "simulated": 3.0}]
    fig = report.plot_figure({"name": "z", "title": "t", "rows": rows})
    (ax,) = fig.axes
    texts = [t.get_text().strip() for t in ax.texts]
    assert texts.count("0") == 1 and "no value" in texts and "not published" in texts
    ticks = [ln for ln in ax.get_lines() if ln.get_marker() == "|"]
    assert len(ticks) == 1 and list(ticks[0].get_xdata()) == [0]  # the zero is marked on the axis


def test_long_title_is_not_clipped():
    title = ("Memory cost of large anon folios: the sparse-touch pathology and a kernel build in 4 GB, "
             "with a title long enough to run off the side of any single line of the figure")
    for rows in (_rows("r{}", 2, "MiB"), _rows("r{}", 2, "MiB") + _rows("q{}", 2, "%")):
        fig = report.plot_figure({"name": "t", "title": title, "rows": rows})
        r = _drawn(fig)
        b = fig._suptitle.get_window_extent(r)
        assert fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 and b.y1 <= fig.bbox.y1, (b, fig.bbox)


# ------------------------------------------------------------- in a browser --
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Appended to a copy of the report: once everything has loaded, it writes
# what a reader would see into the DOM, which --dump-dom prints.
PROBE = """
<script>
window.addEventListener("load", () => {
  const box = e => e.getBoundingClientRect();
  const imgs = [...document.images].map(i => ({w: i.naturalWidth, h: i.naturalHeight, ok: i.complete,
      shown: box(i).width, shownH: box(i).height, room: box(i.closest("section") || document.body).width}));
  const tables = [...document.querySelectorAll("table.results")].map(t => ({
      rows: t.tBodies[0].rows.length,
      cells: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.innerText.trim())),
      head: t.tHead.innerText,
      visible: box(t).height > 0}));
  const headings = [...document.querySelectorAll("h1, h2")].map(h => ({
      text: h.innerText, scroll: h.scrollWidth, client: h.clientWidth, right: box(h).right}));
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({imgs, tables, headings, title: document.title,
      pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth});
  document.body.appendChild(out);
});
</script>
"""

VIEWPORT = (1280, 1000)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
           "--disable-dev-shm-usage", "--hide-scrollbars", "--virtual-time-budget=5000",
           f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def _shapes() -> list[dict]:
    """Experiments shaped like the ones whose plots went wrong: many labelled
    bars in two units, seven units, a curve with published figures, zero and
    missing values, and a title too long for one line."""
    names = [f"will-it-scale test number {i} with a long name" for i in range(10)]
    wis = [{"label": n, "metric": "ops/s change", "unit": "%", "published": 10.0 * i - 40,
            "simulated": 0.0 if i % 3 == 0 else None if i == 4 else 9.0 * i - 30} for i, n in enumerate(names)]
    luf = [r for u in ("IPIs", "count", "misses", "%", "ratio", "events", "s") for r in _rows(u + " {}", 3, u)]
    ys = [-34.8, -35.0, -34.7, -38.2]
    patches = [{"label": f"step {i}", "metric": "sys change vs baseline", "unit": "%", "published": -24.0 - i,
                "simulated": y} for i, y in enumerate(ys)]
    return [
        {"name": "shape-bars", "title": "Bars " * 30 + "_".join(["nr_tlb_remote_flush_received"] * 8), "rows": wis},
        {"name": "shape-grid", "title": "Seven units", "rows": luf},
        {"name": "shape-curve", "title": "A curve", "rows": patches,
         "series": [{"name": "sys", "x": [1, 2, 3, 4], "y": ys, "xlabel": "step", "ylabel": "sys change (%)"}]},
    ]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; "
                    "`make test` installs it with apt-get when run as root)")
def test_report_renders_in_headless_chromium(made, tmp_path):
    rep, _ = made
    reps = [rep, *_shapes()]
    page = report.write_report(reps, tmp_path / "rep", version="v", command="test")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = _chromium("--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"no probe output; chromium stderr: {proc.stderr[-500:]}"
    import html as _html

    seen = json.loads(_html.unescape(m.group(1)))
    # the page fits the viewport: nothing pushes it sideways
    assert seen["viewport"] == VIEWPORT[0] and seen["pageWidth"] <= seen["viewport"], seen["pageWidth"]
    # every plot loaded, has a sane shape (no 4004x396 strip), and is shown
    # at (nearly) its natural width within its section, not squeezed
    assert len(seen["imgs"]) == len(reps)
    for i in seen["imgs"]:
        assert i["ok"] and i["w"] > 200 and i["h"] > 100, i
        assert 0.3 <= i["w"] / i["h"] <= 3.5, i
        assert i["shown"] <= i["room"] + 0.5 and i["shown"] >= 0.8 * min(i["w"], i["room"]), i
        assert abs(i["shownH"] / i["shown"] - i["h"] / i["w"]) < 0.02, i  # not distorted
    # headings do not overflow their box (the long title wraps)
    for h in seen["headings"]:
        assert h["scroll"] <= h["client"] + 1 and h["right"] <= seen["viewport"], h
    t = seen["tables"][0]
    assert t["visible"] and t["rows"] == len(rep["rows"]) and "published" in t["head"]
    assert t["cells"][0][:2] == ["1 task", "page_fault1 ops/s"]
    assert [x["rows"] for x in seen["tables"][1:]] == [len(r["rows"]) for r in reps[1:]]
    # and a screenshot that is not blank
    shot = tmp_path / "shot.png"
    proc = _chromium(f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), proc.stderr[-500:]
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))
    assert img.shape[1] == VIEWPORT[0] and img.shape[0] == VIEWPORT[1]
    assert img[..., :3].std() > 0.05  # text, tables and a plot, not an empty page
