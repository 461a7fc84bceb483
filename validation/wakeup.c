/* Wake-up latency of a thread sleeping in futex_wait on another CPU: one
 * thread pinned to CPU 1 sleeps on a futex; every GAP_US microseconds
 * (long enough for its CPU to go idle: in a VM, a halted vCPU) the thread
 * on CPU 0 stamps the clock and wakes it; the latency is until the woken
 * thread stamps the clock. Usage: wakeup [N [GAP_US]]; prints the median,
 * 10th and 90th percentiles, min and max in ns. Needs two CPUs. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static int word;
static volatile long long t_wake, t_woken;
static volatile int done;
static long long now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec * 1000000000LL + ts.tv_nsec; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static void *waiter(void *a)
{
	(void)a; pin(1);
	while (!done) {
		while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0)
			syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
		t_woken = now();
		__atomic_store_n(&word, 0, __ATOMIC_RELEASE);
	}
	return NULL;
}
static int cmp(const void *a, const void *b) { long long x = *(long long *)a, y = *(long long *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200; long gap_us = argc > 2 ? atol(argv[2]) : 2000;
	long long *lat = calloc(n, sizeof *lat);
	pthread_t th; pin(0);
	pthread_create(&th, NULL, waiter, NULL);
	for (int i = 0; i < n; i++) {
		usleep(gap_us); /* the waiter's CPU goes idle */
		t_woken = 0;
		t_wake = now();
		__atomic_store_n(&word, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		while (!t_woken) ;
		lat[i] = t_woken - t_wake;
		while (__atomic_load_n(&word, __ATOMIC_ACQUIRE)) ;
	}
	qsort(lat, n, sizeof *lat, cmp);
	printf("wake of a sleeping thread on another CPU: n=%d median %lld ns p10 %lld p90 %lld min %lld max %lld\n", n, lat[n/2], lat[n/10], lat[n*9/10], lat[0], lat[n-1]);
	return 0;
}
