/* will-it-scale page_fault2: per-task sparse 128 MiB temp file mapped
 * MAP_PRIVATE, store one byte per page (COW of the page-cache page), munmap;
 * one op per page touched. */
#include "harness.h"
#include <sys/mman.h>
#include <unistd.h>
#define MEMSIZE (128UL * 1024 * 1024)
const char *testcase_name = "page_fault2";
const char *testcase_description = "Separate file private mapping page fault";
static __thread int fd; /* per task: per thread in threads mode */
void testcase_task_setup(unsigned long nr) { (void)nr; fd = harness_tmpfile(MEMSIZE, 0); }
void testcase(unsigned long long *iterations, unsigned long nr)
{
	unsigned long pg = (unsigned long)getpagesize();
	(void)nr;
	for (;;) {
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		if (c == MAP_FAILED)
			harness_die("mmap");
		for (unsigned long i = 0; i < MEMSIZE; i += pg) {
			c[i] = 0;
			(*iterations)++;
		}
		munmap(c, MEMSIZE);
	}
}
