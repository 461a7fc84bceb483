/* coldentry: what a kernel entry costs after the program's own work.
 *
 * calibrate's probes time each kernel path in a loop of that path alone,
 * so every entry finds the kernel's code, data and page-walk entries where
 * the previous one left them. A real program enters the kernel between
 * stretches of its own work, which evict them from the caches and the TLB
 * in between. This probe times three entries (a write fault on a 4 KiB
 * page given back with MADV_DONTNEED, brk() growing the heap by 132 KiB as
 * malloc does, and getppid()) right after each of several amounts of user
 * work: dependent random reads of a table of MIB MiB (latency-bound work,
 * a hash table's or an interpreter's heap's: few lines a microsecond),
 * reads streaming through a stretch of it (bandwidth-bound work, a sort's
 * or a copy's: many lines a microsecond) and, as a control for each amount
 * of random reads, arithmetic in registers for as long as those reads
 * took: it touches no memory, so what an entry pays after it is what the
 * time alone costs (interrupts, and on a shared machine whatever else ran
 * on the core meanwhile).
 *
 * Each entry is timed alone with the vDSO clock (no system call between
 * the work and the entry); the figure is the median over the entries of a
 * line. Output: one JSON object. Not a calibration input: a diagnosis of
 * why real programs' system time exceeds the replay's (docs/validation.md,
 * "Real programs"). Changes no knob. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "probe.h"

#define MiB (1024UL * 1024)
#define BRK_STEP (132UL * 1024)
#define NLEVELS 5
#define NSTREAMS 3
#define MAXN 2000

static const long reads_at[NLEVELS] = { 0, 20, 200, 2000, 20000 };
static const long stream_kib_at[NSTREAMS] = { 256, 2048, 16384 };

static uint64_t *table;
static size_t table_n;
static volatile uint64_t sink;

/* `n` dependent random reads of the table: each address comes from the
 * value read before it, so the reads are not overlapped. */
static void random_reads(long n)
{
	uint64_t x = sink;
	for (long i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		x += table[(x >> 17) % table_n];
	}
	sink = x;
}

/* Sequential reads of `kib` KiB of the table, a line at a time, from a
 * place that moves on each call (so the stretch is not still cached). */
static void stream_reads(long kib)
{
	static size_t at;
	size_t words = (size_t)kib * 1024 / sizeof(uint64_t);
	uint64_t x = sink;
	for (size_t i = 0; i < words; i += 8) {
		x += table[at];
		at = (at + 8) % table_n;
	}
	sink = x;
}

static void arithmetic(long n)
{
	uint64_t x = sink;
	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

enum entry { FAULT, BRK, GETPPID, NENTRIES };
static const char *entry_name[NENTRIES] = { "fault", "brk", "getppid" };

/* One line of the output: the work before each entry, how many entries,
 * the mean user time of that work and the median of each entry. */
struct level {
	const char *work;
	long amount;
	int entries;
	double user_us;
	double ns[NENTRIES];
};

enum work { RANDOM, STREAM, SPIN };

/* `n` entries of kind `e`, each after `amount` of work `w`: random reads,
 * KiB streamed, or iterations of arithmetic. */
static double time_entries(enum entry e, enum work wk, long amount, int n, double *user_us)
{
	static double t[MAXN];
	/* One page and one heap step, given back before each stretch of work:
	 * every fault takes the page just freed (the per-CPU list's first, as
	 * calibrate's loops do; never a block the host's free page reporting
	 * may have discarded) and every brk() finds the heap as the one before
	 * it did. Giving back is an entry too, so it comes before the work. */
	char *page = NULL;
	char *brk_at = NULL;
	if (e == FAULT) {
		page = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page == MAP_FAILED)
			die("mmap");
		*(volatile char *)page = 1;
	} else if (e == BRK) {
		brk_at = (char *)syscall(SYS_brk, 0);
	}
	double user = 0;
	for (int i = 0; i < n; i++) {
		if (e == FAULT && madvise(page, PG, MADV_DONTNEED))
			die("madvise");
		if (e == BRK && (char *)syscall(SYS_brk, brk_at) != brk_at)
			die("brk");
		double w = wall_ns();
		if (wk == SPIN)
			arithmetic(amount);
		else if (wk == STREAM)
			stream_reads(amount);
		else
			random_reads(amount);
		double a = wall_ns();
		switch (e) {
		case FAULT:
			*(volatile char *)page = 1;
			break;
		case BRK:
			if ((char *)syscall(SYS_brk, brk_at + BRK_STEP) != brk_at + BRK_STEP)
				die("brk");
			break;
		default:
			syscall(SYS_getppid);
		}
		t[i] = wall_ns() - a;
		user += a - w;
	}
	if (page)
		munmap(page, PG);
	if (brk_at)
		syscall(SYS_brk, brk_at);
	qsort(t, (size_t)n, sizeof(double), cmpd);
	*user_us = user / n / 1e3;
	return t[n / 2];
}

/* Entries per level: enough for a median, few where each waits long
 * (`amount`: random reads or KiB streamed before each). */
static int entries_for(long amount)
{
	long n = amount ? 4000000L / amount : MAXN;
	return (int)(n < 100 ? 100 : n > MAXN ? MAXN : n);
}

/* Line `r`: each kind of entry, `n` times after `amount` of work `wk`. */
static void measure(struct level *r, const char *name, enum work wk, long amount, int n)
{
	r->work = name;
	r->amount = amount;
	r->entries = n;
	for (int e = 0; e < NENTRIES; e++)
		r->ns[e] = time_entries(e, wk, amount, n, &r->user_us);
}

int main(int argc, char **argv)
{
	size_t mib = 256;
	int c;
	while ((c = getopt(argc, argv, "m:")) != -1) {
		switch (c) {
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: coldentry [-m TABLE_MIB]\n");
			return 2;
		}
	}
	if (mib < 1) {
		fprintf(stderr, "coldentry: -m at least 1\n");
		return 2;
	}
	table_n = mib * MiB / sizeof(uint64_t);
	table = malloc(table_n * sizeof(uint64_t));
	if (!table)
		die("malloc");
	for (size_t i = 0; i < table_n; i++)
		table[i] = i * 7;

	/* Iterations of arithmetic a nanosecond, for the controls. */
	double w0 = wall_ns();
	arithmetic(10000000);
	double per_ns = 1e7 / (wall_ns() - w0);

	/* Each amount of random reads, then arithmetic as long as those reads
	 * took (the time alone, without what they touched), then each stream. */
	struct level rows[2 * NLEVELS + NSTREAMS];
	int nrows = 0;
	for (int l = 0; l < NLEVELS; l++) {
		struct level *r = &rows[nrows++];
		measure(r, l ? "random" : "none", RANDOM, reads_at[l], entries_for(reads_at[l]));
		if (!l)
			continue;
		long spin = (long)(r->user_us * 1e3 * per_ns);
		measure(&rows[nrows++], "arithmetic", SPIN, spin > 0 ? spin : 1, r->entries);
	}
	for (int l = 0; l < NSTREAMS; l++)
		measure(&rows[nrows++], "stream", STREAM, stream_kib_at[l], entries_for(stream_kib_at[l]));

	printf("{\"table_mib\":%zu,\"rows\":[", mib);
	for (int i = 0; i < nrows; i++) {
		printf("%s{\"work\":\"%s\",\"amount\":%ld,\"entries\":%d,\"user_us\":%.2f", i ? "," : "", rows[i].work,
		       rows[i].amount, rows[i].entries, rows[i].user_us);
		for (int e = 0; e < NENTRIES; e++)
			printf(",\"%s_ns\":%.1f", entry_name[e], rows[i].ns[e]);
		printf("}");
	}
	printf("]}\n");
	return 0;
}
