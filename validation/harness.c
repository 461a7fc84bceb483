/* The harness: fork -t tasks (processes mode), synchronised start, -w warm-up
 * seconds, -s measured seconds. At the start and end of the measurement every
 * task snapshots its own getrusage() and counter from a signal handler, so
 * faults, user and system time are exactly those of the measured interval.
 * The parent also snapshots /proc/vmstat and the per-size mTHP stats (both
 * system-wide). Peak RSS comes from wait4()'s ru_maxrss; each task's RSS just
 * before its loop starts (its binary, libc, stack) is recorded so that the
 * RSS the testcase itself adds can be reported. One JSON line on stdout.
 *
 * Threads mode (-T or -m threads; will-it-scale's X_threads): the tasks are
 * pthreads of this one process, sharing its mm. Same synchronised start (each
 * thread blocks in read() on the go pipe), warm-up and measured interval;
 * the snapshot signals go to each thread with pthread_kill() and the handler
 * takes getrusage(RUSAGE_THREAD), so faults and times are per thread and the
 * loops are never polled. RSS, its baseline (taken once every thread is set
 * up and parked) and the peak are those of the one process. */
#define _GNU_SOURCE
#include "harness.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TASKS 2048
#define SLOT 256 /* bytes between counters: no false sharing */

struct slot {
	unsigned long long counter;
	long base_rss_kib;
	int ready;
	struct rusage ru[2];
	unsigned long long snap[2];
	int snapped[2];
};

const char *harness_tmpdir = "/tmp";
static char *shared_area;
/* Thread-local: in threads mode every task is a thread of one process. */
static __thread unsigned long my_index;
static int threads_mode;

static struct slot *slot_of(unsigned long i) { return (struct slot *)(shared_area + (size_t)i * ((sizeof(struct slot) + SLOT - 1) / SLOT * SLOT)); }

void harness_die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", testcase_name, what, strerror(errno));
	exit(2);
}

int harness_tmpfile(size_t size, int fill_zeros)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/foliosim-val.XXXXXX", harness_tmpdir);
	int fd = mkstemp(path);
	if (fd < 0)
		harness_die("mkstemp");
	unlink(path);
	if (fill_zeros) {
		static char zeros[1 << 16];
		size_t done = 0;
		while (done < size) {
			size_t n = size - done < sizeof(zeros) ? size - done : sizeof(zeros);
			ssize_t w = write(fd, zeros, n);
			if (w <= 0)
				harness_die("write");
			done += (size_t)w;
		}
	} else if (ftruncate(fd, (off_t)size) < 0) {
		harness_die("ftruncate");
	}
	return fd;
}

static void on_snap(int sig)
{
	int k = sig == SIGUSR1 ? 0 : 1;
	struct slot *s = slot_of(my_index);
	s->snap[k] = *(volatile unsigned long long *)&s->counter;
	getrusage(threads_mode ? RUSAGE_THREAD : RUSAGE_SELF, &s->ru[k]);
	__atomic_store_n(&s->snapped[k], 1, __ATOMIC_RELEASE);
}

/* VmRSS or VmHWM of a process from /proc/PID/status (kernels since 6.16
 * report the exact sum of the per-CPU RSS counters there; statm and
 * ru_maxrss may be off by the per-CPU batches). */
static long status_kib(const char *pid, const char *key)
{
	char path[64], line[256];
	long v = -1;
	size_t kl = strlen(key);
	snprintf(path, sizeof(path), "/proc/%s/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':')
			v = atol(line + kl + 1);
	fclose(f);
	return v;
}

/* Exact RSS: smaps_rollup walks the page tables ("Rss:"), unlike the
 * per-CPU-batched counters behind statm, VmRSS and VmHWM. */
static long rollup_rss_kib(const char *pid)
{
	char path[64], line[256];
	long v = -1, x;
	snprintf(path, sizeof(path), "/proc/%s/smaps_rollup", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Rss: %ld kB", &x) == 1)
			v = x;
	fclose(f);
	return v;
}

/* Touch every page of the task's readable file mappings (its binary and
 * libraries): otherwise the first calls into them after the baseline map
 * text by fault-around (16 pages a fault) and that would count as the
 * testcase's RSS. */
static void prefault_file_mappings(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8], path[256] = "";
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, path) < 3)
			continue;
		if (perms[0] != 'r' || path[0] != '/')
			continue;
		for (unsigned long a = lo; a < hi; a += 4096)
			(void)*(volatile const char *)a;
	}
	fclose(f);
}

/* A process's RSS: exact from smaps_rollup, else VmRSS. */
static long rss_kib(const char *pid)
{
	long ex = rollup_rss_kib(pid);
	return ex >= 0 ? ex : status_kib(pid, "VmRSS");
}

/* The RSS sampled every millisecond while the tasks run: VmRSS, which
 * sums the mm's counters without the mmap_lock. Not smaps_rollup: that
 * walks every page table of the mm under mmap_read_lock, milliseconds for
 * a 128 MiB region of 4 KiB or 64 KiB pages, so a sampler reading it every
 * millisecond keeps a CPU busy and holds off the tasks' mmap and munmap
 * (writers), which in threads mode shows in the measured ops/s. */
static long sample_rss_kib(const char *pid) { return status_kib(pid, "VmRSS"); }

/* /proc/vmstat: the counters we report. */
static const char *vm_names[] = {"pgfault", "pgmajfault", "thp_fault_alloc", "thp_fault_fallback", "pgfree", "nr_tlb_remote_flush"};
#define NVM (sizeof(vm_names) / sizeof(vm_names[0]))

static void read_vmstat(unsigned long long *v)
{
	char name[128];
	unsigned long long x;
	memset(v, 0, NVM * sizeof(*v));
	FILE *f = fopen("/proc/vmstat", "r");
	if (!f)
		return;
	while (fscanf(f, "%127s %llu", name, &x) == 2)
		for (size_t i = 0; i < NVM; i++)
			if (!strcmp(name, vm_names[i]))
				v[i] = x;
	fclose(f);
}

/* Per-size mTHP stats under /sys/kernel/mm/transparent_hugepage/hugepages-*kB/stats/. */
#define MAX_SIZES 16
#define MAX_STATS 32
static const char *mthp_stat_names[] = {"anon_fault_alloc", "anon_fault_fallback", "anon_fault_fallback_charge", "split", "split_deferred", "nr_anon", "swpout", "shmem_alloc"};
#define NMS (sizeof(mthp_stat_names) / sizeof(mthp_stat_names[0]))
static char mthp_sizes[MAX_SIZES][32];
static int nr_mthp_sizes;

static void find_mthp_sizes(void)
{
	DIR *d = opendir("/sys/kernel/mm/transparent_hugepage");
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)) && nr_mthp_sizes < MAX_SIZES)
		if (!strncmp(e->d_name, "hugepages-", 10))
			snprintf(mthp_sizes[nr_mthp_sizes++], 32, "%s", e->d_name + 10);
	closedir(d);
	/* sort by numeric size */
	for (int i = 0; i < nr_mthp_sizes; i++)
		for (int j = i + 1; j < nr_mthp_sizes; j++)
			if (atol(mthp_sizes[j]) < atol(mthp_sizes[i])) {
				char t[32];
				memcpy(t, mthp_sizes[i], 32);
				memcpy(mthp_sizes[i], mthp_sizes[j], 32);
				memcpy(mthp_sizes[j], t, 32);
			}
}

static void read_mthp(long long v[MAX_SIZES][NMS])
{
	char path[512];
	for (int i = 0; i < nr_mthp_sizes; i++)
		for (size_t j = 0; j < NMS; j++) {
			v[i][j] = -1;
			snprintf(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/hugepages-%s/stats/%s", mthp_sizes[i], mthp_stat_names[j]);
			FILE *f = fopen(path, "r");
			if (f) {
				if (fscanf(f, "%lld", &v[i][j]) != 1)
					v[i][j] = -1;
				fclose(f);
			}
		}
}

static double tv_s(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec / 1e6; }
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Sleep a millisecond, or what is left of `seconds` since `t0`. */
static void sample_tick(double t0, double seconds)
{
	double left = seconds - (now_s() - t0);
	sleep_s(left < 0.001 ? (left > 0 ? left : 0) : 0.001);
}

static void usage(void)
{
	fprintf(stderr, "usage: %s [-t TASKS] [-s SECONDS] [-w WARMUP_SECONDS] [-d TMPDIR] [-T | -m processes|threads]\n", testcase_name);
	exit(2);
}

static void wait_snapped(unsigned long n, int k)
{
	double t0 = now_s();
	for (unsigned long i = 0; i < n; i++)
		while (!__atomic_load_n(&slot_of(i)->snapped[k], __ATOMIC_ACQUIRE)) {
			if (now_s() - t0 > 10) {
				fprintf(stderr, "%s: task %lu did not answer the snapshot signal\n", testcase_name, i);
				exit(1);
			}
			usleep(100);
		}
}

/* Ask every task for snapshot k (SIGUSR1 for the start, SIGUSR2 for the
 * end): threads through pthread_kill, processes (th NULL) through kill.
 * Returns when the signals went out, then waits for every answer. */
static double snapshot_tasks(unsigned long tasks, int k, const pthread_t *th, const pid_t *pids)
{
	int sig = k ? SIGUSR2 : SIGUSR1;
	for (unsigned long i = 0; i < tasks; i++) {
		if (th)
			pthread_kill(th[i], sig);
		else
			kill(pids[i], sig);
	}
	double t = now_s();
	wait_snapped(tasks, k);
	return t;
}

/* VmHWM is exact only to the per-CPU RSS counter batches (32 pages per
 * CPU); the sampled VmRSS is exact but may miss a short peak. */
static long rss_counter_slack_kib(void)
{
	return 32L * sysconf(_SC_NPROCESSORS_ONLN) * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The peak: the sample, unless VmHWM is above it by more than the slack. */
static long peak_kib(long hwm, long sampled, long slack)
{
	return hwm - sampled > slack ? hwm : sampled;
}

/* The JSON line: ops, faults and times summed over the tasks' snapshots. */
static void print_report(const char *mode, unsigned long tasks, double dt, long maxrss, long base, long maxhwm, long maxsampled,
			 long slack, const unsigned long long *vm0, const unsigned long long *vm1, long long m0[MAX_SIZES][NMS],
			 long long m1[MAX_SIZES][NMS])
{
	unsigned long long ops = 0;
	long long minflt = 0, majflt = 0, nvcsw = 0, nivcsw = 0;
	double ut = 0, st = 0;
	for (unsigned long i = 0; i < tasks; i++) {
		struct slot *s = slot_of(i);
		ops += s->snap[1] - s->snap[0];
		minflt += s->ru[1].ru_minflt - s->ru[0].ru_minflt;
		majflt += s->ru[1].ru_majflt - s->ru[0].ru_majflt;
		/* Sleeps (a lock, a wait) and preemptions in the measured interval. */
		nvcsw += s->ru[1].ru_nvcsw - s->ru[0].ru_nvcsw;
		nivcsw += s->ru[1].ru_nivcsw - s->ru[0].ru_nivcsw;
		ut += tv_s(s->ru[1].ru_utime) - tv_s(s->ru[0].ru_utime);
		st += tv_s(s->ru[1].ru_stime) - tv_s(s->ru[0].ru_stime);
	}
	printf("{\"test\":\"%s\",\"description\":\"%s\",\"mode\":\"%s\",\"tasks\":%lu,\"seconds\":%.6f,"
	       "\"ops\":%llu,\"ops_per_s\":%.3f,\"minflt\":%lld,\"majflt\":%lld,\"faults_per_op\":%.6g,"
	       "\"utime_s\":%.6f,\"stime_s\":%.6f,\"nvcsw\":%lld,\"nivcsw\":%lld,\"peak_rss_kib\":%ld,\"base_rss_kib\":%ld,\"rss_kib\":%ld,"
	       "\"vmhwm_kib\":%ld,\"sampled_rss_kib\":%ld,\"rss_counter_slack_kib\":%ld,",
	       testcase_name, testcase_description, mode, tasks, dt, ops, ops / dt, minflt, majflt,
	       ops ? (double)minflt / (double)ops : 0.0, ut, st, nvcsw, nivcsw, maxrss, base, maxrss - base, maxhwm, maxsampled, slack);
	printf("\"vmstat\":{");
	for (size_t i = 0; i < NVM; i++)
		printf("%s\"%s\":%lld", i ? "," : "", vm_names[i], (long long)(vm1[i] - vm0[i]));
	printf("},\"vmstat_faults_per_op\":%.6g,\"mthp_stats\":{", ops ? (double)(vm1[0] - vm0[0]) / (double)ops : 0.0);
	for (int i = 0; i < nr_mthp_sizes; i++) {
		printf("%s\"%s\":{", i ? "," : "", mthp_sizes[i]);
		int first = 1;
		for (size_t j = 0; j < NMS; j++) {
			if (m0[i][j] < 0 || m1[i][j] < 0)
				continue;
			printf("%s\"%s\":%lld", first ? "" : ",", mthp_stat_names[j], m1[i][j] - m0[i][j]);
			first = 0;
		}
		printf("}");
	}
	printf("}}\n");
}

/* Reset this process's VmHWM to its current RSS (clear_refs 5), so the
 * peak measured is the testcase's own (a forked child's starts at its
 * parent's RSS at fork). Older kernels keep the earlier peak. */
static void reset_peak_rss(void)
{
	int cr = open("/proc/self/clear_refs", O_WRONLY);
	if (cr >= 0) {
		if (write(cr, "5", 1) != 1) { /* older kernels: the peak keeps the earlier RSS */ }
		close(cr);
	}
}

/* Wait until every task is set up and parked on the go pipe. */
static void wait_ready(unsigned long tasks)
{
	for (unsigned long i = 0; i < tasks; i++)
		while (!__atomic_load_n(&slot_of(i)->ready, __ATOMIC_ACQUIRE))
			usleep(100);
}

/* Release every task at once, and let the warm-up pass. */
static void start_tasks(int go_write_fd, unsigned long tasks, double warmup)
{
	char bytes[MAX_TASKS];
	memset(bytes, 1, sizeof(bytes));
	if (write(go_write_fd, bytes, tasks) != (ssize_t)tasks)
		harness_die("write go pipe");
	sleep_s(warmup);
}

static int go_read_fd;

/* A task of threads mode: the same steps as a forked child's, in a thread. */
static void *thread_task(void *arg)
{
	unsigned long i = (unsigned long)arg;
	char b;
	my_index = i;
	if (testcase_task_setup)
		testcase_task_setup(i);
	/* glibc gives a thread its own malloc arena: create it before the
	 * baseline RSS so that it is not counted as the testcase's memory. */
	free(malloc(1));
	__atomic_store_n(&slot_of(i)->ready, 1, __ATOMIC_RELEASE);
	if (read(go_read_fd, &b, 1) != 1) {
		fprintf(stderr, "%s: thread %lu: no start byte on the go pipe\n", testcase_name, i);
		exit(1);
	}
	testcase(&slot_of(i)->counter, i);
	return NULL;
}

/* Threads mode: -t pthreads in this process (one mm). RSS is the process's. */
static int run_threads(unsigned long tasks, double seconds, double warmup)
{
	static pthread_t th[MAX_TASKS];
	int go[2];
	if (pipe(go) < 0)
		harness_die("pipe");
	go_read_fd = go[0];
	free(malloc(1));
	prefault_file_mappings();
	for (unsigned long i = 0; i < tasks; i++) {
		int e = pthread_create(&th[i], NULL, thread_task, (void *)i);
		if (e) {
			errno = e;
			harness_die("pthread_create");
		}
	}
	wait_ready(tasks);
	/* Every thread is set up (stack, arena, files) and parked on the go
	 * pipe: that is the baseline, and the peak starts from it. */
	reset_peak_rss();
	long base = rss_kib("self");
	start_tasks(go[1], tasks, warmup);

	unsigned long long vm0[NVM], vm1[NVM];
	static long long m0[MAX_SIZES][NMS], m1[MAX_SIZES][NMS];
	read_vmstat(vm0);
	read_mthp(m0);
	double t0 = snapshot_tasks(tasks, 0, th, NULL);
	long sampled = 0;
	while (now_s() - t0 < seconds) {
		long v = sample_rss_kib("self");
		if (v > sampled)
			sampled = v;
		sample_tick(t0, seconds);
	}
	double t1 = snapshot_tasks(tasks, 1, th, NULL);
	read_vmstat(vm1);
	read_mthp(m1);

	long slack = rss_counter_slack_kib();
	long h = status_kib("self", "VmHWM");
	if (h < 0) {
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		h = ru.ru_maxrss;
	}
	long peak = peak_kib(h, sampled, slack);
	if (testcase_cleanup)
		testcase_cleanup();
	print_report("threads", tasks, t1 - t0, peak, base, h, sampled, slack, vm0, vm1, m0, m1);
	fflush(stdout);
	/* The threads are still in their loops: exit_group ends them. */
	_exit(ferror(stdout) ? 1 : 0);
}

int main(int argc, char **argv)
{
	unsigned long tasks = 1;
	double seconds = 5, warmup = 1;
	int c;
	opterr = 0; /* bad input: the one usage line below, exit 2 */
	while ((c = getopt(argc, argv, "t:s:w:d:m:Th")) != -1) {
		switch (c) {
		case 'T': threads_mode = 1; break;
		case 'm':
			if (!strcmp(optarg, "threads"))
				threads_mode = 1;
			else if (!strcmp(optarg, "processes"))
				threads_mode = 0;
			else {
				fprintf(stderr, "%s: -m: unknown mode '%s' (processes or threads)\n", testcase_name, optarg);
				exit(2);
			}
			break;
		case 't': tasks = strtoul(optarg, NULL, 0); break;
		case 's': seconds = atof(optarg); break;
		case 'w': warmup = atof(optarg); break;
		case 'd': harness_tmpdir = optarg; break;
		default: usage();
		}
	}
	if (tasks < 1 || tasks > MAX_TASKS || !(seconds > 0) || warmup < 0)
		usage();
	size_t slot_bytes = (sizeof(struct slot) + SLOT - 1) / SLOT * SLOT;
	shared_area = mmap(NULL, slot_bytes * tasks, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared_area == MAP_FAILED)
		harness_die("mmap shared area");
	find_mthp_sizes();
	if (testcase_prepare)
		testcase_prepare(tasks);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_snap;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	if (threads_mode)
		return run_threads(tasks, seconds, warmup);

	int go[2];
	if (pipe(go) < 0)
		harness_die("pipe");
	pid_t pids[MAX_TASKS];
	for (unsigned long i = 0; i < tasks; i++) {
		pid_t p = fork();
		if (p < 0)
			harness_die("fork");
		if (p == 0) {
			char b;
			my_index = i;
			close(go[1]);
			if (testcase_task_setup)
				testcase_task_setup(i);
			/* Initialise libc's malloc arena before the baseline RSS so
			 * that it is not counted as the testcase's memory. */
			free(malloc(1));
			prefault_file_mappings();
			reset_peak_rss();
			slot_of(i)->base_rss_kib = rss_kib("self");
			__atomic_store_n(&slot_of(i)->ready, 1, __ATOMIC_RELEASE);
			if (read(go[0], &b, 1) != 1)
				_exit(1);
			testcase(&slot_of(i)->counter, i);
			_exit(0);
		}
		pids[i] = p;
	}
	close(go[0]);
	wait_ready(tasks);
	start_tasks(go[1], tasks, warmup);

	unsigned long long vm0[NVM], vm1[NVM];
	static long long m0[MAX_SIZES][NMS], m1[MAX_SIZES][NMS];
	read_vmstat(vm0);
	read_mthp(m0);
	double t0 = snapshot_tasks(tasks, 0, NULL, pids);
	/* Sample each task's exact VmRSS every millisecond while measuring. */
	static long sampled[MAX_TASKS];
	char pidstr[MAX_TASKS][16];
	for (unsigned long i = 0; i < tasks; i++)
		snprintf(pidstr[i], sizeof(pidstr[i]), "%d", (int)pids[i]);
	while (now_s() - t0 < seconds) {
		for (unsigned long i = 0; i < tasks; i++) {
			long v = sample_rss_kib(pidstr[i]);
			if (v > sampled[i])
				sampled[i] = v;
		}
		sample_tick(t0, seconds);
	}
	double t1 = snapshot_tasks(tasks, 1, NULL, pids);
	read_vmstat(vm1);
	read_mthp(m1);

	long maxrss = 0, base = 0, maxhwm = 0, maxsampled = 0;
	long slack = rss_counter_slack_kib();
	int failed = 0;
	long hwm[MAX_TASKS];
	for (unsigned long i = 0; i < tasks; i++) {
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)pids[i]);
		hwm[i] = status_kib(pid, "VmHWM");
	}
	for (unsigned long i = 0; i < tasks; i++) {
		struct rusage ru;
		int st;
		kill(pids[i], SIGKILL);
		if (wait4(pids[i], &st, 0, &ru) < 0)
			harness_die("wait4");
		if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
			failed = 1; /* the task died on its own: an assertion or a crash */
		long h = hwm[i] >= 0 ? hwm[i] : ru.ru_maxrss;
		long peak = peak_kib(h, sampled[i], slack);
		if (h > maxhwm)
			maxhwm = h;
		if (sampled[i] > maxsampled)
			maxsampled = sampled[i];
		if (peak > maxrss)
			maxrss = peak;
		if (slot_of(i)->base_rss_kib > base)
			base = slot_of(i)->base_rss_kib;
	}
	if (testcase_cleanup)
		testcase_cleanup();
	if (failed) {
		fprintf(stderr, "%s: a task exited before the end of the run\n", testcase_name);
		return 1;
	}

	print_report("processes", tasks, t1 - t0, maxrss, base, maxhwm, maxsampled, slack, vm0, vm1, m0, m1);
	return 0;
}
