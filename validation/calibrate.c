/* Host calibration microbenchmarks for `foliosim calibrate`. Prints one JSON
 * object; every figure is the median of REPS repetitions, in ns or GB/s.
 * Regions that must use 4 KiB pages are madvise(MADV_NOHUGEPAGE)d (which
 * disables every anonymous THP size for the VMA); the 2 MiB latency run uses
 * MADV_HUGEPAGE on a 2 MiB-aligned region and reports the fraction of it that
 * was really backed by PMD mappings (AnonHugePages in /proc/self/smaps). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REPS 5
#include "probe.h"
#define MiB (1024UL * 1024)

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmpd);
	return v[n / 2];
}

static void *map_region(size_t len, int advice, size_t align)
{
	size_t over = len + align;
	char *p = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "calibrate: mmap: %s\n", strerror(errno));
		exit(1);
	}
	char *a = align ? (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1)) : p;
	if (advice >= 0)
		madvise(a, len, advice);
	return a;
}

static volatile uint64_t sink;

static double syscall_ns(void)
{
	double v[REPS];
	for (int r = 0; r < REPS; r++) {
		long n = 200000;
		double t = now();
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		v[r] = (now() - t) / (double)n;
	}
	return median(v, REPS);
}

/* First-touch faults over a fresh 4 KiB-page region: write (do_anonymous_page:
 * alloc + clear + map) or read (maps the shared zero page). (What a fault
 * right after a system call costs beyond these: fault_after_ns.) */
static double fault_ns(int write)
{
	double v[REPS];
	size_t len = 256 * MiB;
	for (int r = 0; r < REPS; r++) {
		volatile char *p = map_region(len, MADV_NOHUGEPAGE, 0);
		double t = now();
		for (size_t i = 0; i < len; i += PG) {
			if (write)
				p[i] = 1;
			else
				sink += p[i];
		}
		v[r] = (now() - t) / (double)(len / PG);
		munmap((void *)p, len);
	}
	return median(v, REPS);
}

/* memset / memcpy / sum in 4 KiB chunks over 256 MiB (beyond the caches). */
static double bw_gbps(int kind)
{
	double v[REPS];
	size_t len = 256 * MiB;
	char *a = map_region(len, MADV_NOHUGEPAGE, 0), *b = map_region(len, MADV_NOHUGEPAGE, 0);
	memset(a, 1, len);
	memset(b, 2, len);
	for (int r = 0; r < REPS; r++) {
		double t = now();
		if (kind == 0)
			for (size_t i = 0; i < len; i += PG)
				memset(a + i, 0, PG);
		else if (kind == 1)
			for (size_t i = 0; i < len; i += PG)
				memcpy(a + i, b + i, PG);
		else {
			uint64_t s = 0;
			const uint64_t *q = (const uint64_t *)b;
			for (size_t i = 0; i < len / 8; i++)
				s += q[i];
			sink += s;
		}
		double dt = now() - t;
		__asm__ volatile("" : : "r"(a), "r"(b) : "memory");
		v[r] = (double)len / dt; /* bytes per ns = GB/s */
	}
	munmap(a, len);
	munmap(b, len);
	return median(v, REPS);
}

static long anon_huge_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = 0, x;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &x) == 1)
			kib = x;
	fclose(f);
	return kib;
}

/* Clearing one 4 KiB page whose lines are in this CPU's caches: the
 * instruction the kernel's clear_page uses on x86 with ERMS (rep stosb over
 * 4096 bytes), over a 1 MiB working set rewritten again and again (it stays
 * in L2); other architectures use memset. Reported in ns per page. */
static double clear_warm_ns(void)
{
	double v[REPS];
	size_t ws = 1 * MiB, total = 512 * MiB;
	char *a = map_region(ws, MADV_NOHUGEPAGE, 0);
	for (int r = 0; r < REPS; r++) {
		for (size_t i = 0; i < ws; i += PG)
			clear4k(a + i);
		double t = now();
		for (size_t done = 0; done < total; done += ws)
			for (size_t i = 0; i < ws; i += PG)
				clear4k(a + i);
		v[r] = (now() - t) / (double)(total / PG);
	}
	munmap(a, ws);
	return median(v, REPS);
}

/* Copying one 4 KiB page whose lines are in this CPU's caches into a 4 KiB
 * buffer, as read() copies a page-cache page of a file it read lately
 * (copy_page_to_iter: rep movsb on x86 with FSRM/ERMS, memcpy elsewhere):
 * the pages of a 512 KiB working set in turn (it stays in L2), again and
 * again. Reported in ns per page. */
static void copy4k(void *d, const void *s)
{
#if defined(__x86_64__)
	unsigned long c = PG;
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
#else
	memcpy(d, s, PG);
#endif
}

static double copy_warm_ns(void)
{
	double v[REPS];
	size_t ws = 512 * 1024, total = 512 * MiB;
	char *a = map_region(ws, MADV_NOHUGEPAGE, 0), *b = map_region(PG, MADV_NOHUGEPAGE, 0);
	memset(a, 1, ws);
	memset(b, 2, PG);
	for (int r = 0; r < REPS; r++) {
		for (size_t i = 0; i < ws; i += PG)
			copy4k(b, a + i);
		double t = now();
		for (size_t done = 0; done < total; done += ws)
			for (size_t i = 0; i < ws; i += PG)
				copy4k(b, a + i);
		v[r] = (now() - t) / (double)(total / PG);
	}
	munmap(a, ws);
	munmap(b, PG);
	return median(v, REPS);
}

/* Dependent loads over a random cyclic permutation of one cache line per
 * 4 KiB page of a 1 GiB region: every load misses the caches, and with 4 KiB
 * pages also the STLB (262144 pages >> STLB entries); with 2 MiB pages 512
 * entries cover the region, so the difference is the page-walk cost. */
static double chase_ns(int huge, double *huge_frac)
{
	size_t len = 1024 * MiB, n = len / PG;
	char *p = map_region(len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE, 2 * MiB);
	long before = anon_huge_kib();
	size_t *perm = malloc(n * sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	uint64_t seed = 88172645463325252ULL;
	for (size_t i = n - 1; i > 0; i--) {
		seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
		size_t j = seed % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	/* a different line offset in each page so cache sets spread */
	for (size_t i = 0; i < n; i++) {
		size_t cur = perm[i], nxt = perm[(i + 1) % n];
		*(char **)(p + cur * PG + (cur % 64) * 64) = p + nxt * PG + (nxt % 64) * 64;
	}
	free(perm);
	if (huge_frac)
		*huge_frac = before >= 0 ? (double)(anon_huge_kib() - before) * 1024.0 / (double)len : -1;
	double v[REPS];
	char **q = (char **)(p + (perm ? 0 : 0));
	q = (char **)(p + 0 * PG + 0);
	long steps = 2000000;
	for (int r = 0; r < REPS; r++) {
		double t = now();
		for (long i = 0; i < steps; i++)
			q = (char **)*q;
		v[r] = (now() - t) / (double)steps;
	}
	sink += (uintptr_t)q;
	munmap(p, len);
	return median(v, REPS);
}

/* The clock the core runs at: a chain of dependent register-register adds
 * retires one per cycle on every core foliosim profiles (x86-64 and arm64
 * alike), timed in this thread's CPU time so that a busy machine does not
 * stretch it. The addend is a register the compiler cannot see the value
 * of: since Golden Cove, Intel's renamer folds chains of add-immediate into
 * one another, and `add $1` chains ran at four a cycle (14.9 "GHz" on a
 * 3.8 GHz Granite Rapids guest). */
static double clock_ghz(void)
{
	double v[REPS];
	volatile uint64_t opaque = 1;
	uint64_t one = opaque;
	for (int r = 0; r < REPS; r++) {
		uint64_t x = 1;
		long n = 50000000;
		double t = now();
		for (long i = 0; i < n; i++) {
#if defined(__x86_64__)
			__asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0" : "+r"(x) : "r"(one));
#elif defined(__aarch64__)
			__asm__ volatile("add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1" : "+r"(x) : "r"(one));
#else
			x = x * 3 + one;
			__asm__ volatile("" : "+r"(x));
#endif
		}
		v[r] = 4.0 * (double)n / (now() - t);
		sink += x;
	}
	return median(v, REPS);
}

/* The CPU's model as /proc/cpuinfo names it (x86: "model name"; arm64
 * kernels print no name, so the implementer and part numbers), JSON-safe. */
static void cpu_model(char *out, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	out[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && !out[0]) {
		char *v = strchr(line, ':');
		if (!v || !(strncmp(line, "model name", 10) == 0 || strncmp(line, "CPU part", 8) == 0))
			continue;
		v++;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t n = 0;
		for (; *v && *v != '\n' && n + 1 < len; v++)
			if (*v != '"' && *v != '\\')
				out[n++] = *v;
		out[n] = 0;
	}
	fclose(f);
}

/* MADV_DONTNEED: per page of a large populated range, and per one-page call
 * (the tlb_flush2 pattern: zap, free, flush one page). */
static double dontneed_ns(int single)
{
	double v[REPS];
	size_t len = 128 * MiB;
	for (int r = 0; r < REPS; r++) {
		char *p = map_region(len, MADV_NOHUGEPAGE, 0);
		memset(p, 1, len);
		double t;
		if (single) {
			size_t n = 16384;
			t = now();
			for (size_t i = 0; i < n; i++)
				madvise(p + i * PG, PG, MADV_DONTNEED);
			v[r] = (now() - t) / (double)n;
		} else {
			t = now();
			madvise(p, len, MADV_DONTNEED);
			v[r] = (now() - t) / (double)(len / PG);
		}
		munmap(p, len);
	}
	return median(v, REPS);
}

/* What comes right before each timed fault. */
enum prefix { BACK_TO_BACK, AFTER_GETPPID, AFTER_EMPTY_MADVISE, AFTER_FREEING_MADVISE };

/* Faults over a fresh 4 KiB-page region, each timed alone (the median of
 * its region's; a loop's total would also count what the fault changes in
 * the calls around it), right after `prefix`: nothing (faults back to
 * back), a getppid(), or a madvise(MADV_DONTNEED) of one page of another
 * region: a page never touched, which the madvise finds empty, or a page
 * just written there, which it zaps, frees and flushes from the TLB.
 * Differences between them are what the call before a fault leaves it to
 * pay: fault_after_syscall_ns (read faults after a getppid against back to
 * back), fault_after_free_ns (read faults after the freeing madvise
 * against the empty one) and alloc_after_free_ns (what a write fault,
 * which allocates, pays beyond that). */
static double fault_after_ns(int write, enum prefix prefix)
{
	enum { N = 4096 };
	static double d[N];
	double v[REPS];
	char *q = map_region(64 * PG, MADV_NOHUGEPAGE, 0);
	for (int r = 0; r < REPS; r++) {
		volatile char *p = map_region(N * PG, MADV_NOHUGEPAGE, 0);
		for (size_t i = 0; i < N; i++) {
			switch (prefix) {
			case BACK_TO_BACK:
				break;
			case AFTER_GETPPID:
				syscall(SYS_getppid);
				break;
			case AFTER_EMPTY_MADVISE:
				madvise(q + 8 * PG, PG, MADV_DONTNEED);
				break;
			case AFTER_FREEING_MADVISE:
				q[0] = 1;
				madvise(q, PG, MADV_DONTNEED);
				break;
			}
			double t = wall_ns();
			if (write)
				p[i * PG] = 1;
			else
				sink += p[i * PG];
			d[i] = wall_ns() - t;
		}
		munmap((void *)p, N * PG);
		v[r] = median(d, N);
	}
	munmap(q, 64 * PG);
	return median(v, REPS);
}

static void mmap_munmap_ns(double *m, double *u)
{
	double vm[REPS], vu[REPS];
	size_t len = 128 * MiB;
	int n = 20000;
	void **addrs = malloc((size_t)n * sizeof(void *));
	for (int r = 0; r < REPS; r++) {
		/* one at a time, as mmap1 does: the VMA tree stays small */
		double tm = 0, tu = 0;
		for (int i = 0; i < n; i++) {
			double t = now();
			addrs[i] = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			double t2 = now();
			munmap(addrs[i], len);
			tu += now() - t2;
			tm += t2 - t;
		}
		vm[r] = tm / n;
		vu[r] = tu / n;
	}
	free(addrs);
	/* subtract the clock_gettime pair overhead */
	double vc[REPS];
	for (int r = 0; r < REPS; r++) {
		double t = now(), x = 0;
		for (int i = 0; i < n; i++)
			x += now();
		vc[r] = (now() - t) / n;
		sink += (uint64_t)x;
	}
	double c = median(vc, REPS);
	*m = median(vm, REPS) - c;
	*u = median(vu, REPS) - c;
}

int main(void)
{
	double huge_frac = 0, mm, mu;
	double sc = syscall_ns();
	double fw = fault_ns(1), fr = fault_ns(0);
	double zb = bw_gbps(0), cb = bw_gbps(1), rb = bw_gbps(2);
	double l4 = chase_ns(0, NULL), lat2m = chase_ns(1, &huge_frac);
	double dn = dontneed_ns(0), d1 = dontneed_ns(1);
	double cw = clear_warm_ns(), cpw = copy_warm_ns();
	double ghz = clock_ghz();
	long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
	char model[128];
	cpu_model(model, sizeof(model));
	mmap_munmap_ns(&mm, &mu);
	double r0 = fault_after_ns(0, BACK_TO_BACK), rs = fault_after_ns(0, AFTER_GETPPID);
	double rf0 = fault_after_ns(0, AFTER_EMPTY_MADVISE), rf1 = fault_after_ns(0, AFTER_FREEING_MADVISE);
	double wf0 = fault_after_ns(1, AFTER_EMPTY_MADVISE), wf1 = fault_after_ns(1, AFTER_FREEING_MADVISE);
	printf("{\"reps\":%d,\"syscall_ns\":%.2f,\"anon_write_fault_ns\":%.2f,\"zero_page_read_fault_ns\":%.2f,"
	       "\"zero_bw_gbps\":%.3f,\"copy_bw_gbps\":%.3f,\"read_bw_gbps\":%.3f,"
	       "\"latency_4k_ns\":%.2f,\"latency_2m_ns\":%.2f,\"huge_fraction\":%.3f,"
	       "\"dontneed_per_page_ns\":%.2f,\"dontneed_one_page_call_ns\":%.2f,"
	       "\"mmap_ns\":%.2f,\"munmap_ns\":%.2f,\"clear_warm_ns\":%.2f,\"copy_warm_ns\":%.2f,"
	       "\"read_fault_alone_ns\":%.2f,\"read_fault_alone_after_getppid_ns\":%.2f,"
	       "\"read_fault_after_madvise_ns\":%.2f,\"read_fault_after_free_ns\":%.2f,"
	       "\"write_fault_after_madvise_ns\":%.2f,\"write_fault_after_free_ns\":%.2f,"
	       "\"clock_ghz\":%.3f,\"l2_kib\":%ld,\"l3_kib\":%ld,\"cpu_model\":\"%s\"}\n",
	       REPS, sc, fw, fr, zb, cb, rb, l4, lat2m, huge_frac, dn, d1, mm, mu, cw, cpw, r0, rs, rf0, rf1, wf0, wf1, ghz, l2 > 0 ? l2 / 1024 : 0,
	       l3 > 0 ? l3 / 1024 : 0, model);
	return 0;
}
