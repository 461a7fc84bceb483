/* will-it-scale mmap1: mmap 128 MiB anonymous + munmap, no touch; one op per pair. */
#include "harness.h"
#include <sys/mman.h>
#define MEMSIZE (128UL * 1024 * 1024)
const char *testcase_name = "mmap1";
const char *testcase_description = "Anonymous memory mmap/munmap of 128MB";
void testcase(unsigned long long *iterations, unsigned long nr)
{
	(void)nr;
	for (;;) {
		char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED)
			harness_die("mmap");
		munmap(c, MEMSIZE);
		(*iterations)++;
	}
}
