/* faultcost: the real kernel's fault, zap and mprotect paths, timed one case
 * at a time, for `foliosim calibrate` (which sets the THP knobs, repeats
 * every case interleaved and fits the model's fixed and per-page costs).
 * Anyone can rerun a case by hand:
 *
 *   faultcost CASE [-m MIB] [-p PASSES] [-d DIR]
 *
 * CASE (each on a fresh private mapping of -m MiB, default 128, one store or
 * load per 4 KiB page, in address order):
 *   anon       anonymous write faults (do_anonymous_page with whatever folio
 *              size the THP knobs give), then munmap of the populated range
 *   anon-dontneed  the same, zapped with MADV_DONTNEED instead of munmap
 *   zero       anonymous read faults (the shared zero page), then munmap
 *   shmem-shared   write faults on a MAP_SHARED tmpfs file whose pages are
 *              already in the page cache (do_shared_fault), then munmap
 *   shmem-private  write faults on a MAP_PRIVATE tmpfs file whose pages are
 *              in the page cache (do_cow_fault: allocate and copy), munmap
 *   retouch    stores to a populated range, again (no fault: with 4 KiB
 *              pages the TLB miss and page walk of a sequential re-touch;
 *              with PMD THPs, as the knobs give, no walk to speak of)
 *   mprotect   mprotect(PROT_READ) then mprotect(PROT_READ|PROT_WRITE) of a
 *              range populated with 4 KiB pages (change_pte_range per PTE)
 *
 * A small -m (below the last-level cache) makes the fault loop reuse the
 * pages the previous pass freed while they are still in this CPU's caches
 * (the per-CPU page lists and the buddy lists hand out the most recently
 * freed page first): the cache-warm clearing case.
 *
 * Before measuring, the program writes and frees twice the range (so that a
 * VM's first touch of guest memory, an EPT fault on the host, is not
 * measured), then runs one pass unmeasured. Every pass is timed with
 * CLOCK_THREAD_CPUTIME_ID; faults are getrusage()'s minor faults of the loop. One
 * JSON line: medians over the passes, and min and max. Times in ns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"
#define MiB (1024UL * 1024)
#define MAX_PASSES 1000

static long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static char *map_anon(size_t len, int nohuge)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	if (nohuge && madvise(p, len, MADV_NOHUGEPAGE))
		die("madvise(MADV_NOHUGEPAGE)");
	return p;
}

static void prewarm(size_t len)
{
	char *p = map_anon(2 * len, 0);
	for (size_t i = 0; i < 2 * len; i += PG)
		p[i] = 1;
	munmap(p, 2 * len);
}

/* A tmpfs file of `len` bytes whose pages are all in the page cache. */
static int shmem_file(const char *dir, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/foliosim-faultcost.XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0)
		die("mkstemp");
	unlink(path);
	if (ftruncate(fd, (off_t)len))
		die("ftruncate");
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap file");
	for (size_t i = 0; i < len; i += PG)
		p[i] = 1;
	munmap(p, len);
	return fd;
}

int main(int argc, char **argv)
{
	const char *dir = "/dev/shm";
	size_t mib = 128;
	int passes = 9, c;
	if (argc < 2) {
		fprintf(stderr, "usage: faultcost anon|anon-dontneed|zero|shmem-shared|shmem-private|retouch|mprotect [-m MIB] [-p PASSES] [-d DIR]\n");
		return 2;
	}
	const char *kase = argv[1];
	optind = 2;
	while ((c = getopt(argc, argv, "m:p:d:")) != -1) {
		switch (c) {
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		case 'p': passes = atoi(optarg); break;
		case 'd': dir = optarg; break;
		default: return 2;
		}
	}
	if (mib < 1 || passes < 1 || passes > MAX_PASSES) {
		fprintf(stderr, "faultcost: -m must be >= 1 and -p 1..%d\n", MAX_PASSES);
		return 2;
	}
	int anon = !strcmp(kase, "anon"), dontneed = !strcmp(kase, "anon-dontneed"), zero = !strcmp(kase, "zero");
	int shared = !strcmp(kase, "shmem-shared"), private = !strcmp(kase, "shmem-private");
	int retouch = !strcmp(kase, "retouch"), mprot = !strcmp(kase, "mprotect");
	if (!(anon || dontneed || zero || shared || private || retouch || mprot)) {
		fprintf(stderr, "faultcost: unknown case '%s'\n", kase);
		return 2;
	}
	size_t len = mib * MiB, pages = len / PG;
	/* Small ranges are repeated within a pass so that every pass times
	 * at least 32 MiB worth of pages. */
	size_t reps = len >= 32 * MiB ? 1 : (32 * MiB) / len;
	prewarm(len > 64 * MiB ? len : 64 * MiB);
	int fd = (shared || private) ? shmem_file(dir, len) : -1;
	static double tf[MAX_PASSES], tu[MAX_PASSES], fpp[MAX_PASSES], tb[MAX_PASSES];
	for (int pass = -1; pass < passes; pass++) {
		double fault_ns = 0, unmap_ns = 0, back_ns = 0;
		long faults = 0;
		for (size_t r = 0; r < reps; r++) {
			char *p;
			if (fd >= 0) {
				p = mmap(NULL, len, PROT_READ | PROT_WRITE, private ? MAP_PRIVATE : MAP_SHARED, fd, 0);
				if (p == MAP_FAILED)
					die("mmap file");
			} else {
				p = map_anon(len, mprot);
			}
			volatile char *v = p;
			if (retouch || mprot)
				for (size_t i = 0; i < len; i += PG)
					v[i] = 1;
			long f0 = minflt();
			double t0 = now();
			if (mprot) {
				if (mprotect(p, len, PROT_READ))
					die("mprotect");
				double t1 = now();
				if (mprotect(p, len, PROT_READ | PROT_WRITE))
					die("mprotect");
				back_ns += now() - t1;
				fault_ns += t1 - t0;
			} else {
				if (zero)
					for (size_t i = 0; i < len; i += PG)
						(void)v[i];
				else
					for (size_t i = 0; i < len; i += PG)
						v[i] = 2;
				fault_ns += now() - t0;
			}
			faults += minflt() - f0;
			double t2 = now();
			if (dontneed && madvise(p, len, MADV_DONTNEED))
				die("madvise(MADV_DONTNEED)");
			if (dontneed)
				unmap_ns += now() - t2;
			munmap(p, len);
			if (!dontneed)
				unmap_ns += now() - t2;
		}
		if (pass < 0)
			continue; /* the unmeasured pass */
		double n = (double)(pages * reps);
		tf[pass] = fault_ns / n;
		tu[pass] = unmap_ns / n;
		tb[pass] = back_ns / n;
		fpp[pass] = (double)faults / n;
	}
	struct stat3 f = summarise(tf, passes), u = summarise(tu, passes), b = summarise(tb, passes), q = summarise(fpp, passes);
	printf("{\"case\":\"%s\",\"mib\":%zu,\"passes\":%d,\"reps\":%zu,\"pages\":%zu,"
	       "\"faults_per_page\":%.6f,\"faults_per_page_min\":%.6f,\"faults_per_page_max\":%.6f,"
	       "\"ns_per_page\":%.2f,\"ns_per_page_min\":%.2f,\"ns_per_page_max\":%.2f,"
	       "\"unmap_ns_per_page\":%.2f,\"unmap_ns_per_page_min\":%.2f,\"unmap_ns_per_page_max\":%.2f,"
	       "\"back_ns_per_page\":%.2f,\"back_ns_per_page_min\":%.2f,\"back_ns_per_page_max\":%.2f}\n",
	       kase, mib, passes, reps, pages, q.med, q.min, q.max, f.med, f.min, f.max, u.med, u.min, u.max, b.med, b.min, b.max);
	return 0;
}
