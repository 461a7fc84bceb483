/* will-it-scale malloc1: malloc(128 MiB) + free; above glibc's maximum mmap
 * threshold, so each pair is an mmap + header store + munmap. One op per pair. */
#include "harness.h"
#include <stdlib.h>
#define SIZE (128UL * 1024 * 1024)
const char *testcase_name = "malloc1";
const char *testcase_description = "malloc/free of 128MB";
void testcase(unsigned long long *iterations, unsigned long nr)
{
	(void)nr;
	for (;;) {
		void *addr = malloc(SIZE);
		if (!addr)
			harness_die("malloc");
		__asm__ volatile("" : : "r"(addr) : "memory");
		free(addr);
		(*iterations)++;
	}
}
