/* sparse_touch: mmap 128 MiB anonymous, store one byte every 64 KiB, munmap;
 * one op per touch. With 4 KiB pages the touched RSS is 1/16 of the region;
 * with 64 KiB (or larger) anonymous folios it is all of it. */
#include "harness.h"
#include <sys/mman.h>
#define MEMSIZE (128UL * 1024 * 1024)
#define STRIDE (64UL * 1024)
const char *testcase_name = "sparse_touch";
const char *testcase_description = "Anonymous sparse touch, one store per 64 KiB";
void testcase(unsigned long long *iterations, unsigned long nr)
{
	(void)nr;
	for (;;) {
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED)
			harness_die("mmap");
		for (unsigned long i = 0; i < MEMSIZE; i += STRIDE) {
			c[i] = 0;
			(*iterations)++;
		}
		munmap(c, MEMSIZE);
	}
}
