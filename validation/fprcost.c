/* fprcost: what a VM guest's free page reporting costs the next first touch
 * of the memory it reported.
 *
 * A guest with virtio-balloon free page reporting (drivers/virtio/
 * virtio_balloon.c, mm/page_reporting.c) hands the hypervisor every free
 * block of at least 2^page_reporting_order pages that stays free for the
 * reporting delay (two seconds), and the hypervisor discards it. The next
 * first touch of such a page is a fault on the host too (an EPT violation,
 * the host's allocation and clearing), which the guest sees as a slow
 * clear inside its own page fault: system time of the task.
 *
 * For each backing (2 MiB THPs under MADV_HUGEPAGE, 4 KiB pages under
 * MADV_NOHUGEPAGE) it maps and writes MIB MiB once (so the host backs it),
 * unmaps it, writes a fresh mapping of the same size at once (the blocks
 * just freed, not yet reported), unmaps it, sleeps WAIT seconds (they are
 * reported and discarded meanwhile), and writes a fresh mapping again. It
 * prints, per 4 KiB written, the thread CPU time of each pass (median of
 * the rounds, with their range) and the share of the mapping THPs backed.
 * Not a calibration input: a diagnosis of the host the other probes run on
 * (docs/validation.md, "Real programs"). Needs THP enabled = madvise or
 * always for the 2 MiB passes; changes no knob. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "probe.h"

#define MiB (1024UL * 1024)
#define PMD (2 * MiB)
#define MAXR 16

static double anon_huge_fraction(const char *a, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[256];
	unsigned long lo = 0, hi = 0;
	int in = 0;
	double kib = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && line[0] != ' ') {
			in = lo <= (uintptr_t)a && (uintptr_t)a < hi;
			continue;
		}
		unsigned long v;
		if (in && sscanf(line, "AnonHugePages: %lu kB", &v) == 1)
			kib += (double)v;
	}
	fclose(f);
	return kib * 1024 / (double)len;
}

/* One pass: a fresh PMD-aligned mapping of `len`, every 4 KiB written.
 * Returns CPU ns per 4 KiB; *huge gets the share THPs backed. */
static double pass(size_t len, int thp, double *huge)
{
	char *p = mmap(NULL, len + PMD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	char *a = (char *)(((uintptr_t)p + PMD - 1) & ~(uintptr_t)(PMD - 1));
	if (madvise(a, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE))
		die("madvise");
	double t = now();
	for (size_t i = 0; i < len; i += PG)
		((volatile char *)a)[i] = 1;
	double dt = now() - t;
	if (huge)
		*huge = anon_huge_fraction(a, len);
	munmap(p, len + PMD);
	return dt / (double)(len / PG);
}

static int reporting_order(void)
{
	FILE *f = fopen("/sys/module/page_reporting/parameters/page_reporting_order", "r");
	int o = -1;
	if (f) {
		if (fscanf(f, "%d", &o) != 1)
			o = -1;
		fclose(f);
	}
	return o;
}

int main(int argc, char **argv)
{
	size_t mib = 1024;
	int wait_s = 5, rounds = 3, c;
	while ((c = getopt(argc, argv, "m:w:r:")) != -1) {
		switch (c) {
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		case 'w': wait_s = atoi(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: fprcost [-m MIB] [-w WAIT_SECONDS] [-r ROUNDS]\n");
			return 2;
		}
	}
	if (mib < 2 || rounds < 1 || rounds > MAXR || wait_s < 0) {
		fprintf(stderr, "fprcost: -m at least 2, -r 1..%d, -w at least 0\n", MAXR);
		return 2;
	}
	size_t len = mib * MiB & ~(PMD - 1);
	printf("{\"page_reporting_order\":%d,\"mib\":%zu,\"wait_s\":%d,\"rounds\":%d", reporting_order(), len / MiB, wait_s, rounds);
	for (int thp = 1; thp >= 0; thp--) {
		double at_once[MAXR], idle[MAXR], huge = 0;
		for (int r = 0; r < rounds; r++) {
			pass(len, thp, NULL);
			at_once[r] = pass(len, thp, &huge);
			sleep((unsigned)wait_s);
			idle[r] = pass(len, thp, NULL);
		}
		struct stat3 a = summarise(at_once, rounds), b = summarise(idle, rounds);
		const char *k = thp ? "thp" : "small";
		printf(",\"%s_huge_fraction\":%.3f,\"%s_at_once_ns_per_4k\":[%.1f,%.1f,%.1f],\"%s_after_idle_ns_per_4k\":[%.1f,%.1f,%.1f]",
		       k, huge, k, a.med, a.min, a.max, k, b.med, b.min, b.max);
	}
	printf("}\n");
	return 0;
}
