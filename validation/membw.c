/* What CPUs clearing, copying or reading memory at the same time share:
 * the node's bandwidth and the last-level cache (docs/machine-model.md).
 *
 *   membw [-r ROUNDS] [-t MAX_THREADS] [-m MIB] [-s]
 *
 * Stream: each of T threads (pinned to CPUs 0..T-1) clears 4 KiB pages with
 * rep stosb (clear_page_erms' instruction; memset elsewhere), copies them
 * (memcpy) or sums them, over a private region of MIB MiB (default 256,
 * far beyond the caches), all T starting together; per-thread GB/s for
 * T = 1..MAX_THREADS (default: every CPU). Reuse (-s): each thread clears
 * a working set of W MiB again and again, W = 1..32 MiB; ns per 4 KiB page
 * for T = 1 and T = MAX_THREADS: a working set that fits the cache clears
 * fast, and CPUs sharing the last-level cache each find it smaller.
 * Every case runs once per round, the rounds interleaved (a slow spell of
 * a shared machine hits every case alike); the JSON has each case's
 * median and its min-max over the rounds. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"
#define MiB (1024UL * 1024)
#define MAXT 256

/* now() counts this thread's CPU time: on a machine others share, a thread waiting for
 * a CPU is not counted as slow streaming. The threads still stream at the
 * same time only while both have a CPU: the figures want a quiet host. */
enum kind { CLEAR, COPY, READ, REUSE };

struct job {
	int cpu;
	enum kind kind;
	size_t len; /* bytes of the region (REUSE: of the working set) */
	size_t total; /* bytes to process */
	char *a, *b;
	double ns;
	pthread_barrier_t *bar;
};

static volatile uint64_t sink;

static void *worker(void *arg)
{
	struct job *j = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(j->cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
	/* Fault everything in first: only the streaming is timed. */
	memset(j->a, 1, j->len);
	if (j->b)
		memset(j->b, 2, j->len);
	if (j->kind == REUSE)
		for (size_t i = 0; i < j->len; i += PG)
			clear4k(j->a + i);
	pthread_barrier_wait(j->bar);
	double t = now();
	uint64_t s = 0;
	for (size_t done = 0; done < j->total; done += j->len) {
		switch (j->kind) {
		case CLEAR:
		case REUSE:
			for (size_t i = 0; i < j->len; i += PG)
				clear4k(j->a + i);
			break;
		case COPY:
			for (size_t i = 0; i < j->len; i += PG)
				memcpy(j->a + i, j->b + i, PG);
			break;
		case READ: {
			const uint64_t *q = (const uint64_t *)j->a;
			for (size_t i = 0; i < j->len / 8; i++)
				s += q[i];
			break;
		}
		}
		__asm__ volatile("" : : "r"(j->a) : "memory");
	}
	j->ns = now() - t;
	sink += s;
	return NULL;
}

static char *region(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "membw: mmap %zu MiB: %s\n", len / MiB, strerror(errno));
		exit(1);
	}
	madvise(p, len, MADV_NOHUGEPAGE);
	return p;
}

/* T threads doing `kind` at once; fills per[] with each thread's result:
 * GB/s (stream) or ns per 4 KiB page (reuse). */
static void run(int t, enum kind kind, size_t len, size_t total, double *per)
{
	pthread_t th[MAXT];
	struct job j[MAXT];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)t);
	for (int i = 0; i < t; i++) {
		j[i] = (struct job){ .cpu = i, .kind = kind, .len = len, .total = total, .bar = &bar };
		j[i].a = region(len);
		j[i].b = kind == COPY ? region(len) : NULL;
		pthread_create(&th[i], NULL, worker, &j[i]);
	}
	for (int i = 0; i < t; i++) {
		pthread_join(th[i], NULL);
		per[i] = kind == REUSE ? j[i].ns / (double)(total / PG) : (double)total / j[i].ns;
		munmap(j[i].a, len);
		if (j[i].b)
			munmap(j[i].b, len);
	}
	pthread_barrier_destroy(&bar);
}

static void stats(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof(double), cmpd);
	*med = v[n / 2];
	*lo = v[0];
	*hi = v[n - 1];
}

int main(int argc, char **argv)
{
	int rounds = 5, maxt = (int)sysconf(_SC_NPROCESSORS_ONLN), reuse = 0;
	size_t mib = 256;
	int opt;
	while ((opt = getopt(argc, argv, "r:t:m:s")) != -1) {
		switch (opt) {
		case 'r':
			rounds = atoi(optarg);
			break;
		case 't':
			maxt = atoi(optarg);
			break;
		case 'm':
			mib = (size_t)atol(optarg);
			break;
		case 's':
			reuse = 1;
			break;
		default:
			fprintf(stderr, "usage: membw [-r ROUNDS] [-t MAX_THREADS] [-m MIB] [-s]\n");
			return 2;
		}
	}
	if (rounds < 1 || rounds > 100 || maxt < 1 || maxt > MAXT || mib < 1) {
		fprintf(stderr, "membw: rounds 1..100, threads 1..%d, MiB >= 1\n", MAXT);
		return 2;
	}
	static const char *names[] = { "clear", "copy", "read" };
	static const size_t sets[] = { 1, 2, 4, 6, 8, 12, 16, 24, 32 };
	const int nsets = (int)(sizeof(sets) / sizeof(sets[0]));
	/* results[case][round]: the mean over the threads of one run */
	int ncases = reuse ? nsets * 2 : 3 * maxt;
	double *res = calloc((size_t)ncases * (size_t)rounds, sizeof(double));
	double per[MAXT];
	for (int r = 0; r < rounds; r++) {
		for (int c = 0; c < ncases; c++) {
			int t;
			if (reuse) {
				t = c % 2 ? maxt : 1;
				size_t ws = sets[c / 2] * MiB;
				run(t, REUSE, ws, ws < 64 * MiB ? 256 * MiB : ws, per);
			} else {
				t = c % maxt + 1;
				run(t, (enum kind)(c / maxt), mib * MiB, mib * MiB, per);
			}
			double sum = 0;
			for (int i = 0; i < t; i++)
				sum += per[i];
			res[c * rounds + r] = sum / t;
		}
	}
	printf("{\"rounds\":%d,\"max_threads\":%d,\"mib\":%zu,\"%s\":[", rounds, maxt, mib, reuse ? "reuse" : "stream");
	for (int c = 0; c < ncases; c++) {
		double m, lo, hi;
		stats(res + c * rounds, rounds, &m, &lo, &hi);
		if (reuse)
			printf("%s{\"ws_mib\":%zu,\"threads\":%d,\"ns_per_page\":%.2f,\"min\":%.2f,\"max\":%.2f}", c ? "," : "", sets[c / 2],
			       c % 2 ? maxt : 1, m, lo, hi);
		else
			printf("%s{\"kind\":\"%s\",\"threads\":%d,\"gbps_per_thread\":%.3f,\"min\":%.3f,\"max\":%.3f}", c ? "," : "",
			       names[c / maxt], c % maxt + 1, m, lo, hi);
	}
	printf("]}\n");
	free(res);
	return 0;
}
