/* will-it-scale read1: per-task 1 MiB temp file written with zeros (offset
 * left at EOF); read(fd, buf, 4096), lseek(fd, 0) when it returns 0. One op
 * per read() call. */
#include "harness.h"
#include <unistd.h>
#define FILESIZE (1UL * 1024 * 1024)
const char *testcase_name = "read1";
const char *testcase_description = "Separate file read";
static __thread int fd; /* per task: per thread in threads mode */
void testcase_task_setup(unsigned long nr) { (void)nr; fd = harness_tmpfile(FILESIZE, 1); }
void testcase(unsigned long long *iterations, unsigned long nr)
{
	static char buf[4096];
	(void)nr;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0)
			harness_die("read");
		if (n == 0)
			lseek(fd, 0, SEEK_SET);
		(*iterations)++;
	}
}
