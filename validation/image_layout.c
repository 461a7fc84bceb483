/* image_layout: what a will-it-scale task's address space holds when its
 * loop starts. A harness testcase (so the process is built, forked and set
 * up exactly as the others are) whose testcase() first prints, for every
 * mapping in /proc/self/smaps, its range, permissions, name, its Rss and
 * Anonymous kB and which of its pages are resident (page indices from its
 * start, from /proc/self/pagemap), then spins like a testcase until the
 * harness stops it.
 * foliosim's process image (crates/foliosim/src/mm/exec.rs) takes its
 * sizes and resident pages from this output; rerun it with
 *
 *     make -C validation && setarch -R validation/bin/image_layout -s 0.1 -w 0
 *
 * (setarch -R: ASLR off, the addresses foliosim uses). The lines go to
 * stderr; the harness's JSON line to stdout. */
#define _GNU_SOURCE
#include "harness.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *testcase_name = "image_layout";
const char *testcase_description = "address space at the start of the loop";

/* The resident pages of [lo, hi) as ranges of page indices ("0-3,25"):
 * pagemap's present (bit 63) or swapped (bit 62) entries. */
static void resident_pages(int pm, unsigned long lo, unsigned long hi)
{
	long first = -1, i = 0;
	int any = 0;
	for (unsigned long a = lo; a <= hi; a += 4096, i++) {
		unsigned long long e = 0;
		int on = a < hi && pread(pm, &e, sizeof(e), (off_t)(a / 4096 * sizeof(e))) == sizeof(e) && (e >> 62);
		if (on && first < 0)
			first = i;
		if (!on && first >= 0) {
			dprintf(2, "%s%ld", any ? "," : " pages ", first);
			if (i - 1 > first)
				dprintf(2, "-%ld", i - 1);
			any = 1;
			first = -1;
		}
	}
}

static void emit(int pm, unsigned long lo, unsigned long hi, const char *perms, long rss, long anon, const char *name)
{
	dprintf(2, "%012lx-%012lx %s %8lu kB rss %6ld kB anon %6ld kB %s", lo, hi, perms, (hi - lo) >> 10, rss, anon, name);
	if (pm >= 0 && rss > 0)
		resident_pages(pm, lo, hi);
	dprintf(2, "\n");
}

/* smaps is read a byte at a time into a line on the stack (no stdio
 * buffer, no malloc, no static buffer that would grow the binary's bss),
 * so that reading it changes no mapping and touches next to nothing. */
static void dump(void)
{
	int fd = open("/proc/self/smaps", O_RDONLY), pmfd = open("/proc/self/pagemap", O_RDONLY);
	if (fd < 0)
		harness_die("open /proc/self/smaps");
	char line[512], c;
	size_t len = 0;
	int have = 0, more = 1;
	unsigned long lo = 0, hi = 0;
	long rss = -1, anon = -1;
	char perms[8] = "", name[256] = "";
	while (more) {
		more = read(fd, &c, 1) == 1;
		if (more && c != '\n') {
			if (len < sizeof(line) - 1)
				line[len++] = c;
			continue;
		}
		line[len] = 0;
		len = 0;
		unsigned long a, b;
		long v;
		char pm[8], nm[256] = "";
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &a, &b, pm, nm) >= 3) {
			if (have)
				emit(pmfd, lo, hi, perms, rss, anon, name);
			have = 1;
			lo = a;
			hi = b;
			snprintf(perms, sizeof(perms), "%s", pm);
			snprintf(name, sizeof(name), "%s", nm);
			rss = anon = -1;
		} else if (sscanf(line, "Rss: %ld kB", &v) == 1) {
			rss = v;
		} else if (sscanf(line, "Anonymous: %ld kB", &v) == 1) {
			anon = v;
		}
	}
	close(fd);
	if (have)
		emit(pmfd, lo, hi, perms, rss, anon, name);
	if (pmfd >= 0)
		close(pmfd);
}

void testcase(unsigned long long *iterations, unsigned long nr)
{
	if (nr == 0)
		dump();
	for (;;)
		(*iterations)++;
}
