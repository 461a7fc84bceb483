/* mmap1_layout: will-it-scale mmap1's loop (mmap 128 MiB anonymous, no
 * touch, munmap) on one thread, in address spaces that differ by a
 * mapping or two, to tell what makes the threads row of mmap1 dear on the
 * host. Each line runs the loop for SECONDS in a fresh process and prints
 * its ops per second:
 *
 *   plain             the process as it starts (its image only);
 *   +idle thread      one more thread, asleep (its stack and guard page:
 *                     two mappings next to where the loop's mmap goes);
 *   +N small maps     N 4 KiB mappings made first, read-only and
 *                     inaccessible in turn so that none merge (N = 1..MAXN);
 *   +idle thread +N   both;
 *   2 threads         two threads both running the loop (the validate row).
 *
 * A thread itself costs the loop nothing that a mapping does not: if the
 * idle thread slows the loop and one small mapping more takes the slowdown
 * away, the cost is the VMA tree's shape where the loop's mapping goes in
 * and out (a maple tree node that splits on every mmap and rebalances on
 * every munmap), not the thread (the tree is in RCU mode either way:
 * MM_MT_FLAGS). Usage: mmap1_layout [SECONDS [MAXN]] (default 1 and 4);
 * run it twice on a quiet host and compare: the lines are single runs, not
 * medians. The mappings column counts the process's mappings before the
 * loop starts (the 2-thread line: before its threads). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MEMSIZE (128UL << 20)

static volatile sig_atomic_t stop;
static long ops[2];

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_alarm(int s)
{
	(void)s;
	stop = 1;
}

static void *sleeper(void *a)
{
	(void)a;
	for (;;)
		pause();
	return NULL;
}

static void *loop(void *a)
{
	long i = (long)a;
	while (!stop) {
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		munmap(c, MEMSIZE);
		ops[i]++;
	}
	return NULL;
}

static int count_vmas(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, c;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* One measurement in a child process, so each starts from the same image. */
static void run(const char *what, int idle, int small, int workers, double secs)
{
	pid_t p = fork();
	if (p == 0) {
		pthread_t t;
		if (idle)
			pthread_create(&t, NULL, sleeper, NULL);
		for (int i = 0; i < small; i++)
			mmap(NULL, 4096, i % 2 ? PROT_NONE : PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int vmas = count_vmas();
		signal(SIGALRM, on_alarm);
		double t0 = now();
		if (workers == 1) {
			alarm((unsigned)secs);
			loop((void *)0);
		} else {
			pthread_t w[2];
			for (long i = 0; i < 2; i++)
				pthread_create(&w[i], NULL, loop, (void *)i);
			usleep((useconds_t)(secs * 1e6));
			stop = 1;
			for (int i = 0; i < 2; i++)
				pthread_join(w[i], NULL);
		}
		double r = (ops[0] + ops[1]) / (now() - t0);
		printf("%-20s %3d mappings  %10.0f ops/s\n", what, vmas, r);
		exit(0);
	}
	waitpid(p, NULL, 0);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1;
	int maxn = argc > 2 ? atoi(argv[2]) : 4;
	char what[64];
	if (secs < 1)
		secs = 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	run("plain", 0, 0, 1, secs);
	run("+idle thread", 1, 0, 1, secs);
	for (int n = 1; n <= maxn; n++) {
		snprintf(what, sizeof what, "+%d small maps", n);
		run(what, 0, n, 1, secs);
		snprintf(what, sizeof what, "+idle thread +%d", n);
		run(what, 1, n, 1, secs);
	}
	run("2 threads", 0, 0, 2, secs);
	return 0;
}
