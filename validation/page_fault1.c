/* will-it-scale page_fault1: mmap 128 MiB anonymous private, store one byte
 * per 4 KiB page, munmap; one op per page touched. */
#include "harness.h"
#include <sys/mman.h>
#include <unistd.h>
#define MEMSIZE (128UL * 1024 * 1024)
const char *testcase_name = "page_fault1";
const char *testcase_description = "Anonymous memory page fault";
void testcase(unsigned long long *iterations, unsigned long nr)
{
	unsigned long pg = (unsigned long)getpagesize();
	(void)nr;
	for (;;) {
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED)
			harness_die("mmap");
		for (unsigned long i = 0; i < MEMSIZE; i += pg) {
			c[i] = 0;
			(*iterations)++;
		}
		munmap(c, MEMSIZE);
	}
}
