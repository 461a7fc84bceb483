/* tpcost [N]: what tracing a system call costs. It times N getppid()
 * calls (whose own work is a few loads: the call's entry and exit) and N
 * one-byte pread()s of a page-cache page (the same, and one
 * filemap:mm_filemap_get_pages event inside) and prints the CPU time per
 * call of each (the thread's: a host busy with other work does not move
 * it) as one JSON line. Run natively and under `foliosim record`
 * (perf with the recorder's tracepoints), the differences are what the
 * recorder's events cost: getppid's is its two events (sys_enter,
 * sys_exit), pread's less getppid's is one event inside a call
 * (docs/validation.md, "What recording costs a system call"). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	if (n <= 0) {
		fprintf(stderr, "usage: tpcost [N > 0]\n");
		return 2;
	}
	char path[] = "/tmp/tpcost.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) {
		perror("tpcost: mkstemp");
		return 2;
	}
	unlink(path);
	char page[4096] = {1};
	if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page)) {
		perror("tpcost: write");
		return 2;
	}
	char c;
	/* Warm: the page cached, the code and the stack faulted in. */
	for (int i = 0; i < 1000; i++) {
		syscall(SYS_getppid);
		if (pread(fd, &c, 1, 0) != 1)
			return 2;
	}
	double t0 = now();
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	double t1 = now();
	for (long i = 0; i < n; i++)
		if (pread(fd, &c, 1, 0) != 1)
			return 2;
	double t2 = now();
	printf("{\"calls\":%ld,\"getppid_ns\":%.1f,\"pread_ns\":%.1f}\n", n, (t1 - t0) / n, (t2 - t1) / n);
	close(fd);
	return 0;
}
