"""`foliosim calibrate`'s process image: validation/image_layout.c's lines
parsed, and set against the model's image piece by piece (no host needed)."""

from __future__ import annotations

from foliosim import procimage

# image_layout's lines for three pieces of the model's image (mm/exec.rs):
# the binary's .bss (its last page resident), the heap and the stack.
LINES = """\
55555555c000-555555575000 rw-p      100 kB rss      4 kB anon      4 kB  pages 24
555555575000-555555596000 rw-p      132 kB rss     12 kB anon     12 kB [heap] pages 0-1,8
7ffff7fc2000-7ffff7fc6000 r--p       16 kB rss      0 kB anon      0 kB [vvar]
7ffffffde000-7ffffffff000 rw-p      132 kB rss     24 kB anon     24 kB [stack] pages 16-18,24,31-32
ffffffffff600000-ffffffffff601000 --xp        4 kB rss      0 kB anon      0 kB [vsyscall]
{"test":"image_layout"}
"""


def model_pieces() -> dict[int, dict]:
    return {p["start"]: p for p in procimage.model_image()}


def test_lines_parse_into_mappings_with_their_resident_pages():
    maps = procimage.parse(LINES)
    assert [m["name"] for m in maps] == ["", "[heap]", "[vvar]", "[stack]", "[vsyscall]"]
    assert maps[1]["pages"] == [0, 1, 8] and maps[3]["pages"] == [16, 17, 18, 24, 31, 32]
    assert maps[0]["start"] == 0x55555555C000 and maps[0]["end"] == 0x555555575000 and maps[0]["anon_kib"] == 4


def test_the_models_image_matches_the_host_where_it_was_measured():
    host = procimage.parse(LINES)
    c = procimage.compare(host, [p for p in procimage.model_image() if p["start"] in {m["start"] for m in host}])
    assert c["misplaced_pages"] == 0 and c["residual"] == 0.0
    assert c["host_kib"] == c["model_kib"] == 4 * (1 + 3 + 6)


def test_a_page_resident_elsewhere_on_the_host_is_the_residual():
    # The host's heap has page 9 resident where the model has page 8.
    host = procimage.parse(LINES.replace("pages 0-1,8", "pages 0-1,9"))
    model = [p for p in procimage.model_image() if p["start"] in {m["start"] for m in host}]
    c = procimage.compare(host, model)
    assert c["misplaced_pages"] == 2 and c["host_kib"] == c["model_kib"]
    heap = next(r for r in c["rows"] if r["start"] == 0x555555575000)
    assert (heap["host_only"], heap["model_only"]) == (1, 1)
    assert any("[heap]" in line and "1 only on the host" in line for line in procimage.format_compare(c))


def test_a_mapping_the_model_lacks_counts_all_its_pages():
    host = procimage.parse(LINES + "7ffff0000000-7ffff0002000 rw-p 8 kB rss 8 kB anon 8 kB  pages 0-1\n")
    c = procimage.compare(host, [p for p in procimage.model_image() if p["start"] in {m["start"] for m in host}])
    assert c["misplaced_pages"] == 2 and c["host_kib"] == c["model_kib"] + 8
