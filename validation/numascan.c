/* numascan: what the real kernel's NUMA-balancing scan (task_numa_work,
 * kernel/sched/fair.c) costs the task it runs on, per PTE walked, for
 * checking the model's change_pte_scan_ns (what foliosim charges a scan for
 * each present PTE it looks at).
 *
 *   numascan [-m MIB] [-s SECONDS] [-g GAP_US]
 *
 * Maps -m MiB (default 1024) of anonymous memory in 4 KiB pages
 * (MADV_NOHUGEPAGE: the scanner skips PMD-mapped THPs), writes every page,
 * then spins in user space for -s seconds (default 20) reading
 * CLOCK_MONOTONIC. task_numa_work runs as task work on the return to user
 * space after the tick that finds the scan due, so each scan shows as a gap
 * in the spinning loop. Every gap above -g microseconds (default 300) is
 * printed; the caller runs it with kernel.numa_balancing 0 and then 2 and
 * compares. On a host with one NUMA node, memory tiering mode (2) finds
 * every page on the top tier and changes none: each scan walks the whole
 * mapping through change_pte_range's skip path (the same walk foliosim's
 * change_pte_scan_ns prices), up to 8 x scan_size_mb of address space.
 *
 * One JSON line: the mapping's pages, the gaps (us) in order, and the
 * per-PTE cost of the median gap. A gap is also a tick, a preemption or
 * steal time; the run with balancing off gives their size. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024UL * 1024)
#define MAX_GAPS 4096

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	unsigned long mib = 1024, secs = 20, gap_us = 300;
	int c;
	while ((c = getopt(argc, argv, "m:s:g:")) != -1) {
		switch (c) {
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		case 's': secs = strtoul(optarg, NULL, 0); break;
		case 'g': gap_us = strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: numascan [-m MIB] [-s SECONDS] [-g GAP_US]\n");
			return 2;
		}
	}
	if (mib == 0 || secs == 0) {
		fprintf(stderr, "numascan: -m and -s must be positive\n");
		return 2;
	}
	size_t len = mib * MiB;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("numascan: mmap");
		return 1;
	}
	madvise(p, len, MADV_NOHUGEPAGE);
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;

	static uint64_t gaps[MAX_GAPS];
	size_t n = 0;
	uint64_t end = mono_ns() + secs * 1000000000ull, prev = mono_ns();
	for (;;) {
		uint64_t now = mono_ns();
		if (now - prev > gap_us * 1000ull && n < MAX_GAPS)
			gaps[n++] = now - prev;
		prev = now;
		if (now > end)
			break;
	}
	printf("{\"pages\": %zu, \"gaps_us\": [", len / 4096);
	for (size_t i = 0; i < n; i++)
		printf("%s%.1f", i ? ", " : "", gaps[i] / 1e3);
	qsort(gaps, n, sizeof gaps[0], cmp_u64);
	double med = n ? gaps[n / 2] : 0;
	printf("], \"median_gap_us\": %.1f, \"ns_per_pte_of_median\": %.1f}\n", med / 1e3, med / (len / 4096));
	munmap(p, len);
	return 0;
}
