/* Aligned allocation and the wall clock. */
#include "duet/base.h"

#include <string.h>
#include <time.h>

void *duet_aligned_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (posix_memalign(&p, DUET_ALIGNMENT, bytes) != 0) return NULL;
    return p;
}

void *duet_aligned_calloc(size_t bytes) {
    void *p = duet_aligned_alloc(bytes);
    if (p != NULL) memset(p, 0, bytes == 0 ? 1 : bytes);
    return p;
}

void duet_aligned_free(void *p) { free(p); }

double duet_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
