/* foliosim validation harness: will-it-scale-style testcases on the real
 * kernel. Each testcase defines testcase() (never returns; increments
 * *iterations once per op, exactly where will-it-scale does) and may define
 * testcase_prepare()/testcase_cleanup(). Written for foliosim; semantics
 * follow will-it-scale's main.c and the test cases in its tests/ directory
 * (github.com/antonblanchard/will-it-scale), as do the simulated workloads
 * (docs/mechanisms/core.md). */
#ifndef FOLIOSIM_HARNESS_H
#define FOLIOSIM_HARNESS_H
#include <stddef.h>

extern const char *testcase_name;
extern const char *testcase_description;
/* Directory for per-task temporary files (-d, default /tmp). */
extern const char *harness_tmpdir;
void testcase(unsigned long long *iterations, unsigned long nr);
/* Optional (weak): once in the parent before forking / after the run. */
void testcase_prepare(unsigned long nr_tasks) __attribute__((weak));
void testcase_cleanup(void) __attribute__((weak));
/* Per-task setup run in the child before its baseline RSS is taken (weak). */
void testcase_task_setup(unsigned long nr) __attribute__((weak));
/* Helpers */
int harness_tmpfile(size_t size, int fill_zeros);
void harness_die(const char *what);
#endif
