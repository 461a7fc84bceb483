/* recordwrap STATUS OUTFD CMD ARGS: what `foliosim record` runs under perf.
 *
 * It disables THP for itself and so for the whole recorded tree
 * (prctl(PR_SET_THP_DISABLE) is inherited by fork and kept by execve), so
 * every first touch of every 4 KiB page is a fault of its own in the
 * trace, whatever policy replays it. It forks CMD with OUTFD as its stdout
 * (perf's own stdout is the trace stream) and waits for it, then writes
 * CMD's exit status and the rusage of CMD and every descendant it reaped
 * (wait4's) to the file STATUS as one JSON line, and exits as CMD did.
 * Whatever kills the recording kills CMD's process group with it: perf
 * runs in a session of its own and foliosim kills that. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_CALLS 1000

static long long ns(struct timeval tv)
{
	return tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: recordwrap STATUS OUTFD CMD [ARGS...]\n");
		return 2;
	}
	const char *status = argv[1];
	int outfd = atoi(argv[2]);
	if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
		fprintf(stderr, "recordwrap: prctl(PR_SET_THP_DISABLE): %s\n", strerror(errno));
		return 2;
	}
	for (int i = 0; i < PROBE_CALLS; i++)
		syscall(SYS_getppid);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t p = fork();
	if (p < 0) {
		fprintf(stderr, "recordwrap: fork: %s\n", strerror(errno));
		return 2;
	}
	if (p == 0) {
		if (outfd >= 0 && outfd != 1) {
			dup2(outfd, 1);
			close(outfd);
		}
		execvp(argv[3], argv + 3);
		fprintf(stderr, "%s: %s\n", argv[3], strerror(errno));
		_exit(127);
	}
	if (outfd > 2)
		close(outfd);
	int st;
	struct rusage ru;
	while (wait4(p, &st, 0, &ru) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "recordwrap: wait4: %s\n", strerror(errno));
			return 2;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long wall = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
	FILE *f = fopen(status, "w");
	if (f) {
		fprintf(f,
			"{\"exit\":%d,\"signal\":%d,\"wall_ns\":%lld,\"rusage\":{\"user_ns\":%lld,\"sys_ns\":%lld,\"maxrss_kib\":%ld,"
			"\"minflt\":%ld,\"majflt\":%ld,\"nvcsw\":%ld,\"nivcsw\":%ld}}\n",
			WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0, wall, ns(ru.ru_utime), ns(ru.ru_stime),
			ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw);
		fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
