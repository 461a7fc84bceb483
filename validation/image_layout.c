/* image_layout: what a will-it-scale task's address space holds when its
 * loop starts. A harness testcase (so the process is built, forked and set
 * up exactly as the others are) whose testcase() first prints, for every
 * mapping in /proc/self/smaps, its range, permissions, name and its Rss and
 * Anonymous kB, then spins like a testcase until the harness stops it.
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

static void emit(unsigned long lo, unsigned long hi, const char *perms, long rss, long anon, const char *name)
{
	dprintf(2, "%012lx-%012lx %s %8lu kB rss %6ld kB anon %6ld kB %s\n", lo, hi, perms, (hi - lo) >> 10, rss, anon, name);
}

/* smaps is read a byte at a time into a line on the stack (no stdio
 * buffer, no malloc, no static buffer that would grow the binary's bss),
 * so that reading it changes no mapping and touches next to nothing. */
static void dump(void)
{
	int fd = open("/proc/self/smaps", O_RDONLY);
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
				emit(lo, hi, perms, rss, anon, name);
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
		emit(lo, hi, perms, rss, anon, name);
}

void testcase(unsigned long long *iterations, unsigned long nr)
{
	if (nr == 0)
		dump();
	for (;;)
		(*iterations)++;
}
