/* What the stand-alone probes (calibrate, faultcost, membw, syscost, c2c)
 * measure with: the same clock and the same page clear, so their figures
 * compare. */
#ifndef FOLIOSIM_PROBE_H
#define FOLIOSIM_PROBE_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PG 4096UL

/* CPU time of this thread: the kernel's own work on it, without the time
 * other programs on a shared machine (or the hypervisor, as steal time)
 * take the CPU away. */
static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A clock read in user mode (the vDSO), for a stretch that must hold no
 * system call: `now()` is one (on a VM, an exit), so it would come between
 * a call and the fault after it that a probe times. */
static inline double wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One 4 KiB page cleared as the kernel's clear_page_erms does (rep stosb
 * on x86-64); other architectures use memset. */
static inline void clear4k(void *p)
{
#if defined(__x86_64__)
	unsigned long c = PG;
	__asm__ volatile("rep stosb" : "+D"(p), "+c"(c) : "a"(0) : "memory");
#else
	memset(p, 0, PG);
#endif
}

/* A failed call ends the probe with one line naming it (the caller turns
 * a nonzero exit into its own error). Probes define _GNU_SOURCE for
 * program_invocation_short_name. */
static inline void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, strerror(errno));
	exit(1);
}

static inline int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median and the range of n timings (sorts them). */
struct stat3 {
	double med, min, max;
};

static inline struct stat3 summarise(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmpd);
	struct stat3 s = {v[n / 2], v[0], v[n - 1]};
	return s;
}
#endif
