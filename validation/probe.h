/* What the stand-alone probes (calibrate, faultcost, membw, syscost)
 * measure with: the same clock and the same page clear, so their figures
 * compare. */
#ifndef FOLIOSIM_PROBE_H
#define FOLIOSIM_PROBE_H
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
#endif
