/* will-it-scale tlb_flush2: 1 MiB anonymous; per page: store 1,
 * madvise(MADV_DONTNEED, one page), load and check it reads 0; munmap.
 * One op per page. */
#include "harness.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#define MEMSIZE (1UL * 1024 * 1024)
const char *testcase_name = "tlb_flush2";
const char *testcase_description = "TLB flush of anonymous memory private mapping";
void testcase(unsigned long long *iterations, unsigned long nr)
{
	unsigned long pg = (unsigned long)getpagesize();
	(void)nr;
	for (;;) {
		volatile char *c = mmap(NULL, MEMSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED)
			harness_die("mmap");
		for (unsigned long i = 0; i < MEMSIZE; i += pg) {
			c[i] = 1;
			madvise((void *)(c + i), pg, MADV_DONTNEED);
			if (c[i] != 0) {
				fprintf(stderr, "tlb_flush2: page not zero after MADV_DONTNEED\n");
				abort();
			}
			(*iterations)++;
		}
		munmap((void *)c, MEMSIZE);
	}
}
