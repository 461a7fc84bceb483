/* Three threads each write their quarter of a 4 MiB heap, the main
 * thread the last quarter; recorded into tests/data/traces/threads.fstrace
 * (make record-test-traces). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SIZE (4 << 20)
static char *heap;

static void *touch(void *arg)
{
	long q = (long)arg;
	for (long i = q * SIZE / 4; i < (q + 1) * SIZE / 4; i += 4096)
		heap[i] = (char)q;
	return NULL;
}

int main(void)
{
	pthread_t t[3];
	heap = malloc(SIZE);
	if (!heap)
		return 1;
	for (long q = 0; q < 3; q++)
		pthread_create(&t[q], NULL, touch, (void *)q);
	touch((void *)3L);
	for (int q = 0; q < 3; q++)
		pthread_join(t[q], NULL);
	printf("%d\n", heap[SIZE - 4096]);
	return 0;
}
