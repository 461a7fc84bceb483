#include <stdio.h>
#include <stdlib.h>
#include "tiny.h"

int main(void)
{
	long *heap = malloc(1 << 20);
	for (int i = 0; i < (1 << 20) / (int)sizeof(long); i += 512)
		heap[i] = table[i % 64];
	printf("%ld\n", sum(table, 64) + heap[0]);
	free(heap);
	return 0;
}
