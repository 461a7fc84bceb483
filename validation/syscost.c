/* syscost: the real kernel's system calls, timed one case at a time, for
 * `foliosim calibrate` (which runs every case at several sizes, repeats
 * them interleaved and fits each term the model charges for the call as a
 * line over the size, with its residual). Anyone can rerun a case by hand:
 *
 *   syscost CASE [-x X] [-n CALLS] [-p PASSES] [-d DIR] [-f FILE_KIB]
 *
 * CASE and what X is (every mapping private anonymous unless named):
 *   mmap       mmap of an untouched X-MiB region where the kernel places it
 *              ("ns"), then its munmap ("undo_ns"): the VMA work alone, no
 *              page to zap
 *   munmap     a 2 MiB-aligned region of X PTE tables, one page written in
 *              each ("prep_ns": per fault, each allocating its PTE table),
 *              then its munmap ("ns"): the zap of X pages and free_pgtables'
 *              teardown of the X PTE tables
 *   munmap-empty  the munmap case's region of X PMD entries, nothing written
 *              ("ns"): no page to zap, no PTE table to free; the zap and
 *              free_pgtables' walks step over X empty PMD entries each
 *   brk        brk(2) raising the break by X pages ("ns"), then lowering it
 *              back ("undo_ns"); nothing is touched (the break stays a page
 *              above its start, so that the heap VMA is extended and split,
 *              never made or removed)
 *   mprotect   mprotect(PROT_READ) of a whole untouched VMA of X pages
 *              ("ns"), then back to read-write ("undo_ns"): no split, no
 *              merge, no PTE
 *   mprotect-split  the same on the middle X pages of a 3X-page VMA: the
 *              first call splits it in three ("ns"), the second merges the
 *              three back into one ("undo_ns")
 *   madvise    MADV_DONTNEED of a 32-page range whose first X pages (0..32)
 *              were written ("ns"; X = 0: nothing to zap or flush)
 *   madvise-mthp  MADV_DONTNEED of the first X pages (1..3) of a 16 KiB
 *              region written once (one 16 KiB folio when the mTHP knobs
 *              allow it, as calibrate sets them for this case): the folio
 *              stays mapped in part, nothing is freed ("ns"); then the
 *              region's munmap (not timed)
 *   read       pread(2) of X pages from a tmpfs file of -f KiB (default
 *              4096) whose pages are all in the page cache, going through
 *              the file in order ("ns" per call); the destination is one
 *              buffer, written before the loop
 *   write      pwrite(2) of X pages into such a file, overwriting ("ns")
 *   fork       fork(2) of this process after X pages of a private mapping
 *              were written ("ns": the parent's time in fork); the child
 *              exits at once, without touching memory ("undo_ns": its whole
 *              CPU time, the exit and the teardown of its copy of the mm,
 *              from wait4's rusage)
 *
 * Calls are timed in batches (BATCH calls, on as many separate regions,
 * then as many undoings) with CLOCK_THREAD_CPUTIME_ID, less the cost of a
 * clock read (measured here): what other programs take of the CPU on a
 * shared machine is left out, and the clock read, a system call of its own
 * on a VM, is spread over the batch. The mmap and fork cases time each
 * call. In the
 * munmap case a page written at the start of the area keeps its upper page
 * tables, so that each munmap frees PTE tables only. One pass times -n
 * calls (rounded up to whole batches); one JSON line gives the medians over
 * -p passes (after one unmeasured pass) of the mean time per call, with
 * their min and max. Times in ns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define MiB (1024UL * 1024)
#define PMD (2 * MiB)
#define MAX_PASSES 1000
/* madvise's range, in pages (at most tlb_single_page_flush_ceiling). */
#define MADVISE_RANGE 32
/* madvise-mthp's region, in pages: one 16 KiB folio. */
#define MTHP_PAGES 4

/* What one clock read adds to a timed stretch: the mean time between
 * consecutive reads over many (on a VM this is a system call that may
 * take as long as the calls timed, hence the batches below). */
static double clock_ns(void)
{
	int n = 20000;
	double t0 = now(), t = t0;
	for (int i = 0; i < n; i++)
		t = now();
	return (t - t0) / n;
}

static char *map_anon(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* Batch members are placed at hinted addresses a gap apart, 2 MiB
 * aligned, in an area far from everything else (a hint, not MAP_FIXED:
 * the kernel takes a free hinted range as it is): mappings made one after
 * another would otherwise be placed side by side and merge into one VMA
 * (and their munmaps split it again). */
#define AREA 0x200000000000UL

static char *map_at(uintptr_t base, size_t len, int b, size_t stride)
{
	void *want = (void *)(base + (uintptr_t)b * stride);
	char *p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	if (p != want) {
		errno = EEXIST;
		die("mmap at a hinted address");
	}
	return p;
}

/* The stride between batch members of `len` bytes: 2 MiB aligned, 2 MiB apart. */
static size_t stride_for(size_t len)
{
	return (len + PMD - 1) / PMD * PMD + PMD;
}

/* A tmpfs file of `len` bytes, every page in the page cache. */
static int cached_file(const char *dir, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/foliosim-syscost.XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd < 0)
		die("mkstemp");
	unlink(path);
	static char zeros[64 * 1024];
	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(zeros) ? len - done : sizeof(zeros);
		ssize_t w = write(fd, zeros, n);
		if (w <= 0)
			die("write");
		done += (size_t)w;
	}
	return fd;
}

/* fork and exit with nothing touched in the child: the raw system calls,
 * so that the child never writes its stack (a copy-on-write fault that is
 * not the exit's). Returns the child's pid in the parent. */
static long fork_exit_child(void)
{
#if defined(__x86_64__)
	long ret;
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "mov $231, %%eax\n\t" /* exit_group(0) */
			 "xor %%edi, %%edi\n\t"
			 "syscall\n\t"
			 "1:"
			 : "=a"(ret)
			 : "0"((long)SYS_fork)
			 : "rcx", "r11", "rdi", "memory");
	return ret;
#else
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	return p;
#endif
}

struct result {
	double ns, undo_ns, prep_ns;
	unsigned long n; /* calls timed */
};

struct opts {
	const char *dir;
	unsigned long x;
	unsigned long calls;
	size_t file_kib;
};

/* Calls are timed BATCH at a time, between two clock reads, on BATCH
 * separate regions: a batch of the call, then a batch of its undoing. */
#define BATCH 16

/* The mmap case times each call alone, as a program makes it: mmap at the
 * address the kernel picks, then its munmap, one pair after another
 * (will-it-scale's mmap1 at other sizes). Not at the batches' hinted
 * addresses: an isolated mapping far from every other (AREA) cost some
 * 250 ns more to map and its munmap ended in a TLB flush
 * (vms_clear_ptes -> tlb_finish_mmu) on a Granite Rapids guest with Linux
 * 6.18, where the kernel's own placement, beside the libraries' page
 * tables, flushed nothing. Each call's time less one clock read. */
static struct result pass_mmap(const struct opts *o, double clk)
{
	struct result r = {0, 0, 0, 0};
	size_t len = o->x * MiB;
	for (unsigned long i = 0; i < o->calls; i++) {
		double t0 = now();
		char *p = map_anon(len);
		double t1 = now();
		munmap(p, len);
		double t2 = now();
		r.ns += t1 - t0 - clk;
		r.undo_ns += t2 - t1 - clk;
		r.n++;
	}
	return r;
}

/* The munmap case's batch: its regions after the anchor page, all in the
 * 1 GiB one PMD table maps, so that the anchor keeps it (and the PUD
 * table above): every munmap frees its own PTE tables, no upper level. */
static int munmap_batch(size_t stride)
{
	size_t n = (1024 * MiB - PMD) / stride;
	return n < 1 ? 1 : n > BATCH ? BATCH : (int)n;
}

static struct result pass_munmap(const struct opts *o, double clk, int write)
{
	struct result r = {0, 0, 0, 0};
	size_t len = o->x * PMD, stride = stride_for(len);
	int batch = munmap_batch(stride);
	volatile char *p[BATCH];
	for (unsigned long i = 0; i < o->calls; i += (unsigned long)batch) {
		for (int b = 0; b < batch; b++) {
			p[b] = map_at(AREA + PMD, len, b, stride);
			madvise((void *)p[b], len, MADV_NOHUGEPAGE); /* 4 KiB pages whatever the THP knobs say */
		}
		double t0 = now();
		for (int b = 0; b < batch && write; b++)
			for (size_t a = 0; a < len; a += PMD)
				p[b][a] = 1;
		double t1 = now();
		for (int b = 0; b < batch; b++)
			munmap((void *)p[b], len);
		double t2 = now();
		if (write)
			r.prep_ns += (t1 - t0 - clk) / (double)o->x;
		r.ns += t2 - t1 - clk;
		r.n += (unsigned long)batch;
	}
	return r;
}

/* The break is raised BATCH times by X pages, then lowered as often. */
static struct result pass_brk(const struct opts *o, double clk)
{
	struct result r = {0, 0, 0, 0};
	/* One page above the start, so that the heap VMA always exists. */
	uintptr_t cur = (uintptr_t)syscall(SYS_brk, 0) + PG;
	if ((uintptr_t)syscall(SYS_brk, cur) != cur) {
		errno = ENOMEM;
		die("brk");
	}
	for (unsigned long i = 0; i < o->calls; i += BATCH) {
		uintptr_t want = cur;
		double t0 = now();
		for (int b = 0; b < BATCH; b++)
			syscall(SYS_brk, want += o->x * PG);
		double t1 = now();
		if ((uintptr_t)syscall(SYS_brk, 0) != want) {
			errno = ENOMEM;
			die("brk");
		}
		double t2 = now();
		for (int b = 0; b < BATCH; b++)
			syscall(SYS_brk, want -= o->x * PG);
		double t3 = now();
		r.ns += t1 - t0 - clk;
		r.undo_ns += t3 - t2 - clk;
		r.n += BATCH;
	}
	return r;
}

/* mprotect of [off, off + X pages) of BATCH VMAs of `pages` pages, each
 * between two PROT_NONE guard pages (so that it merges with nothing else). */
static struct result pass_mprotect(const struct opts *o, double clk, int split)
{
	struct result r = {0, 0, 0, 0};
	size_t pages = split ? 3 * o->x : o->x, stride = (pages + 1) * PG;
	char *g = map_anon(BATCH * stride + PG);
	for (int b = 0; b <= BATCH; b++)
		if (mprotect(g + b * stride, PG, PROT_NONE))
			die("mprotect guard");
	size_t len = o->x * PG;
	for (unsigned long i = 0; i < o->calls; i += BATCH) {
		int e = 0;
		double t0 = now();
		for (int b = 0; b < BATCH; b++)
			e |= mprotect(g + b * stride + PG + (split ? len : 0), len, PROT_READ);
		double t1 = now();
		double t2 = now();
		for (int b = 0; b < BATCH; b++)
			e |= mprotect(g + b * stride + PG + (split ? len : 0), len, PROT_READ | PROT_WRITE);
		double t3 = now();
		if (e)
			die("mprotect");
		r.ns += t1 - t0 - clk;
		r.undo_ns += t3 - t2 - clk;
		r.n += BATCH;
	}
	munmap(g, BATCH * stride + PG);
	return r;
}

static struct result pass_madvise(const struct opts *o, double clk)
{
	struct result r = {0, 0, 0, 0};
	/* Ranges of MADVISE_RANGE pages, 2 MiB aligned and a range apart: none
	 * spans two PTE tables. */
	size_t n = MADVISE_RANGE, stride = 2 * n * PG;
	volatile char *p = map_at(AREA, BATCH * stride, 0, 0);
	madvise((void *)p, BATCH * stride, MADV_NOHUGEPAGE);
	for (unsigned long i = 0; i < o->calls; i += BATCH) {
		for (int b = 0; b < BATCH; b++)
			for (size_t k = 0; k < o->x; k++)
				p[b * stride + k * PG] = 1;
		int e = 0;
		double t0 = now();
		for (int b = 0; b < BATCH; b++)
			e |= madvise((void *)(p + b * stride), n * PG, MADV_DONTNEED);
		double t1 = now();
		if (e)
			die("madvise");
		r.ns += t1 - t0 - clk;
		r.n += BATCH;
	}
	munmap((void *)p, BATCH * stride);
	return r;
}

/* madvise-mthp: BATCH fresh 16 KiB regions, each written once (a 16 KiB
 * folio where the knobs allow it), then X pages of each zapped. */
static struct result pass_madvise_mthp(const struct opts *o, double clk)
{
	struct result r = {0, 0, 0, 0};
	size_t len = MTHP_PAGES * PG, stride = stride_for(len);
	volatile char *p[BATCH];
	for (unsigned long i = 0; i < o->calls; i += BATCH) {
		for (int b = 0; b < BATCH; b++) {
			p[b] = map_at(AREA, len, b, stride);
			p[b][0] = 1;
		}
		int e = 0;
		double t0 = now();
		for (int b = 0; b < BATCH; b++)
			e |= madvise((void *)p[b], o->x * PG, MADV_DONTNEED);
		double t1 = now();
		if (e)
			die("madvise");
		r.ns += t1 - t0 - clk;
		r.n += BATCH;
		for (int b = 0; b < BATCH; b++)
			munmap((void *)p[b], len);
	}
	return r;
}

static int rw_fd = -1;
static char *rw_buf;

static struct result pass_rw(const struct opts *o, double clk, int write)
{
	struct result r = {0, 0, 0, 0};
	size_t len = o->x * PG, file = o->file_kib * 1024;
	off_t off = 0;
	for (unsigned long i = 0; i < o->calls; i += BATCH) {
		ssize_t bad = 0;
		double t0 = now();
		for (int b = 0; b < BATCH; b++) {
			if ((size_t)off + len > file)
				off = 0;
			ssize_t n = write ? pwrite(rw_fd, rw_buf, len, off) : pread(rw_fd, rw_buf, len, off);
			bad |= n ^ (ssize_t)len;
			off += (off_t)len;
		}
		double t1 = now();
		if (bad)
			die(write ? "pwrite" : "pread");
		r.ns += t1 - t0 - clk;
		r.n += BATCH;
	}
	return r;
}

static char *fork_mem;

static struct result pass_fork(const struct opts *o, double clk)
{
	struct result r = {0, 0, 0, 0};
	for (unsigned long i = 0; i < o->calls; i++) {
		/* Write every page again: the last fork left them write-protected
		 * (the child is gone, so each is reused in place). */
		for (size_t k = 0; k < o->x; k++)
			fork_mem[k * PG] = 1;
		double t0 = now();
		long pid = fork_exit_child();
		double t1 = now();
		if (pid < 0) {
			errno = (int)-pid;
			die("fork");
		}
		struct rusage ru;
		int st;
		if (wait4((pid_t)pid, &st, 0, &ru) < 0)
			die("wait4");
		r.ns += t1 - t0 - clk;
		r.undo_ns += ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e9 +
			     ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e3;
		r.n++;
	}
	return r;
}

int main(int argc, char **argv)
{
	struct opts o = {"/dev/shm", 1, 0, 4096};
	int passes = 5, c;
	if (argc < 2) {
		fprintf(stderr, "usage: syscost mmap|munmap|munmap-empty|brk|mprotect|mprotect-split|madvise|madvise-mthp|read|write|fork "
				"[-x X] [-n CALLS] [-p PASSES] [-d DIR] [-f FILE_KIB]\n");
		return 2;
	}
	const char *kase = argv[1];
	optind = 2;
	while ((c = getopt(argc, argv, "x:n:p:d:f:")) != -1) {
		switch (c) {
		case 'x': o.x = strtoul(optarg, NULL, 0); break;
		case 'n': o.calls = strtoul(optarg, NULL, 0); break;
		case 'p': passes = atoi(optarg); break;
		case 'd': o.dir = optarg; break;
		case 'f': o.file_kib = strtoul(optarg, NULL, 0); break;
		default: return 2;
		}
	}
	enum { MMAP, MUNMAP, MUNMAP_EMPTY, BRK, MPROTECT, MPROTECT_SPLIT, MADVISE, MADVISE_MTHP, READ, WRITE, FORK, NCASES } k;
	static const char *names[NCASES] = {"mmap", "munmap", "munmap-empty", "brk", "mprotect", "mprotect-split", "madvise", "madvise-mthp",
					    "read", "write", "fork"};
	for (k = 0; k < NCASES && strcmp(kase, names[k]); k++)
		;
	if (k == NCASES) {
		fprintf(stderr, "syscost: unknown case '%s'\n", kase);
		return 2;
	}
	unsigned long xmax = k == MMAP ? 1UL << 16 : k == MUNMAP ? 4096 : k == MUNMAP_EMPTY ? 511 : k == MADVISE ? MADVISE_RANGE : k == MADVISE_MTHP ? MTHP_PAGES - 1 : k == READ || k == WRITE ? 4096 : 1UL << 20;
	if ((o.x < 1 && k != MADVISE) || o.x > xmax || passes < 1 || passes > MAX_PASSES ||
	    ((k == READ || k == WRITE) && (o.file_kib < 4 || o.file_kib % 4 || o.x * 4 > o.file_kib))) {
		fprintf(stderr, "syscost: -x must be 1..%lu (madvise: 0..%d), -p 1..%d, -f a multiple of 4 KiB holding -x pages\n", xmax,
			MADVISE_RANGE, MAX_PASSES);
		return 2;
	}
	if (o.calls == 0) /* about the same time per pass whatever the case */
		o.calls = k == MUNMAP || k == MUNMAP_EMPTY ? 4096 / o.x + 16 : k == FORK ? 200 : k == MMAP ? 2000 : 20000;
	if (k == READ || k == WRITE) {
		rw_fd = cached_file(o.dir, o.file_kib * 1024);
		rw_buf = map_anon(o.x * PG);
		memset(rw_buf, 1, o.x * PG);
	}
	if (k == MUNMAP || k == MUNMAP_EMPTY) {
		/* The anchor: a page written at the area's start keeps its upper
		 * page tables (see munmap_batch). */
		volatile char *anchor = map_at(AREA, PG, 0, 0);
		anchor[0] = 1;
	}
	if (k == FORK && o.x) {
		fork_mem = map_anon(o.x * PG);
		madvise(fork_mem, o.x * PG, MADV_NOHUGEPAGE);
	}
	double clk = clock_ns();
	static double a[MAX_PASSES], b[MAX_PASSES], pr[MAX_PASSES];
	for (int pass = -1; pass < passes; pass++) {
		struct result r;
		switch (k) {
		case MMAP: r = pass_mmap(&o, clk); break;
		case MUNMAP: r = pass_munmap(&o, clk, 1); break;
		case MUNMAP_EMPTY: r = pass_munmap(&o, clk, 0); break;
		case BRK: r = pass_brk(&o, clk); break;
		case MPROTECT: r = pass_mprotect(&o, clk, 0); break;
		case MPROTECT_SPLIT: r = pass_mprotect(&o, clk, 1); break;
		case MADVISE: r = pass_madvise(&o, clk); break;
		case MADVISE_MTHP: r = pass_madvise_mthp(&o, clk); break;
		case READ: r = pass_rw(&o, clk, 0); break;
		case WRITE: r = pass_rw(&o, clk, 1); break;
		default: r = pass_fork(&o, clk); break;
		}
		if (pass < 0)
			continue; /* the unmeasured pass */
		double n = (double)r.n;
		a[pass] = r.ns / n;
		b[pass] = r.undo_ns / n;
		pr[pass] = r.prep_ns / n;
	}
	struct stat3 s = summarise(a, passes), u = summarise(b, passes), q = summarise(pr, passes);
	printf("{\"case\":\"%s\",\"x\":%lu,\"calls\":%lu,\"passes\":%d,\"file_kib\":%zu,\"clock_ns\":%.2f,"
	       "\"ns\":%.2f,\"ns_min\":%.2f,\"ns_max\":%.2f,"
	       "\"undo_ns\":%.2f,\"undo_ns_min\":%.2f,\"undo_ns_max\":%.2f,"
	       "\"prep_ns\":%.2f,\"prep_ns_min\":%.2f,\"prep_ns_max\":%.2f}\n",
	       kase, o.x, o.calls, passes, o.file_kib, clk, s.med, s.min, s.max, u.med, u.min, u.max, q.med, q.min, q.max);
	return 0;
}
