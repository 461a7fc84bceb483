/* Core-to-core transfer of a cache line: two threads, pinned to CPUs 0
 * and 1, hand one line back and forth with compare-and-swap (each waits
 * until the counter is its turn's value and increments it), as the
 * public CAS ping-pong measurements the profiles cite do
 * (github.com/nviennot/core-to-core-latency). Every increment takes the
 * line from the other CPU's cache in modified state: the time per
 * increment is one transfer, what the model charges for a contended
 * line (cost.cacheline_same_socket_ns). Usage: c2c [ROUNDS [N]]; prints
 * one JSON line: the median over ROUNDS of the mean ns per transfer over
 * N round trips, with min and max. Needs two CPUs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "probe.h"

static _Alignas(128) volatile uint64_t line;
static long n_trips = 200000;

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (pthread_setaffinity_np(pthread_self(), sizeof s, &s)) {
		fprintf(stderr, "c2c: cannot run on CPU %d\n", cpu);
		exit(1);
	}
}

/* Turn `parity` of each round trip: wait for the counter to be ours, then
 * move it on by one. */
static void play(uint64_t parity)
{
	for (uint64_t i = 0; i < (uint64_t)n_trips; i++) {
		uint64_t want = 2 * i + parity;
		while (!__atomic_compare_exchange_n(&line, &want, want + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			want = 2 * i + parity;
	}
}

static void *other(void *arg)
{
	(void)arg;
	pin(1);
	play(1);
	return NULL;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 5;
	if (argc > 2)
		n_trips = atol(argv[2]);
	if (rounds < 1 || rounds > 100 || n_trips < 1) {
		fprintf(stderr, "usage: c2c [ROUNDS 1..100 [N]]\n");
		return 2;
	}
	double v[100];
	pin(0);
	for (int r = 0; r < rounds; r++) {
		pthread_t t;
		line = 0;
		if (pthread_create(&t, NULL, other, NULL)) {
			fprintf(stderr, "c2c: pthread_create failed\n");
			return 1;
		}
		double t0 = wall_ns();
		play(0);
		pthread_join(t, NULL);
		/* The join's wake-up is one transfer's worth of noise in N. */
		v[r] = (wall_ns() - t0) / (2.0 * (double)n_trips);
	}
	struct stat3 st = summarise(v, rounds);
	printf("{\"transfer_ns\":%.2f,\"min\":%.2f,\"max\":%.2f,\"rounds\":%d,\"trips\":%ld}\n",
	       st.med, st.min, st.max, rounds, n_trips);
	return 0;
}
