/* Two threads run will-it-scale page_fault1's loop (mmap 128 MiB
 * anonymous, store one byte per 4 KiB page, munmap) in one mm, while the
 * main thread reads /proc/self/maps every 2 ms and counts how often the two
 * regions are one merged VMA (>= 256 MiB). Prints, per pass of a thread,
 * its voluntary context switches (sleeps: a lock, a wait), the time in mmap
 * and munmap, and its wall time split from /proc/thread-self/schedstat into
 * on-CPU, runqueue wait and the rest (sleeping). Usage: threads_vma NOMERGE
 * SECONDS; NOMERGE=1 gives thread 1's regions MAP_NORESERVE, a different
 * vm_flags, so Linux cannot merge them with thread 0's (the control).
 * Run it under the THP setting of interest (hugepages-*kB/enabled). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>
#define MEMSIZE (128UL << 20)
static volatile int stop;
static int nomerge;
static long passes[2], cs[2];
static long long sc0[2][2], sc1[2][2], w0[2], w1[2];
static void rd(long long *v){FILE*f=fopen("/proc/thread-self/schedstat","r");if(fscanf(f,"%lld %lld",&v[0],&v[1])!=2)v[0]=v[1]=0;fclose(f);}
static long long tmm[2], tun[2], tall[2];
static long long nowns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static void *task(void *a)
{
	long i = (long)a;
	int fl = MAP_PRIVATE | MAP_ANONYMOUS | (nomerge && i ? MAP_NORESERVE : 0);
	struct rusage r0, r1;
	getrusage(RUSAGE_THREAD, &r0);
	rd(sc0[i]); w0[i] = nowns();
	while (!stop) {
		long long a0 = nowns();
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, fl, -1, 0);
		long long a1 = nowns();
		for (unsigned long o = 0; o < MEMSIZE; o += 4096)
			c[o] = 0;
		long long a2 = nowns();
		munmap(c, MEMSIZE);
		long long a3 = nowns();
		tmm[i] += a1 - a0; tun[i] += a3 - a2; tall[i] += a3 - a0;
		passes[i]++;
	}
	getrusage(RUSAGE_THREAD, &r1);
	rd(sc1[i]); w1[i] = nowns();
	cs[i] = r1.ru_nvcsw - r0.ru_nvcsw;
	return NULL;
}
int main(int argc, char **argv)
{
	nomerge = argc > 1 && atoi(argv[1]);
	double secs = argc > 2 ? atof(argv[2]) : 2;
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, task, (void *)i);
	long samples = 0, merged = 0, two = 0, one = 0;
	struct timespec ts0, ts;
	clock_gettime(CLOCK_MONOTONIC, &ts0);
	char line[512];
	do {
		FILE *f = fopen("/proc/self/maps", "r");
		int big = 0, huge = 0;
		while (fgets(line, sizeof line, f)) {
			unsigned long lo, hi;
			if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
				if (hi - lo >= MEMSIZE && hi - lo < 2 * MEMSIZE) big++;
				if (hi - lo >= 2 * MEMSIZE) huge++;
			}
		}
		fclose(f);
		samples++; merged += huge > 0; two += big == 2; one += big == 1 && !huge;
		usleep(2000);
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while ((ts.tv_sec - ts0.tv_sec) + (ts.tv_nsec - ts0.tv_nsec) / 1e9 < secs);
	stop = 1;
	pthread_join(t[0], NULL); pthread_join(t[1], NULL);
	printf("nomerge=%d samples=%ld merged(>=256M VMA)=%ld two-separate=%ld one=%ld passes=%ld+%ld nvcsw=%ld+%ld per-pass=%.2f\n",
	       nomerge, samples, merged, two, one, passes[0], passes[1], cs[0], cs[1], (double)(cs[0] + cs[1]) / (passes[0] + passes[1]));
	for (int i = 0; i < 2; i++) printf("   thread %d per pass: wall %.0f us = on-cpu %.0f + runqueue wait %.0f + other (sleep) %.0f\n", i, (w1[i]-w0[i])/1e3/passes[i], (sc1[i][0]-sc0[i][0])/1e3/passes[i], (sc1[i][1]-sc0[i][1])/1e3/passes[i], ((w1[i]-w0[i])-(sc1[i][0]-sc0[i][0])-(sc1[i][1]-sc0[i][1]))/1e3/passes[i]);
	printf("   per pass: mmap %.0f us, munmap %.0f us, pass %.0f us\n", (tmm[0]+tmm[1])/1e3/(passes[0]+passes[1]), (tun[0]+tun[1])/1e3/(passes[0]+passes[1]), (tall[0]+tall[1])/1e3/(passes[0]+passes[1]));
	return 0;
}
