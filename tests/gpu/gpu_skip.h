/* The gpu tests' start: exit 77 (ctest's SKIP_RETURN_CODE for label gpu)
 * with the reason when no CUDA device is visible. */
#ifndef DUET_TESTS_GPU_SKIP_H
#define DUET_TESTS_GPU_SKIP_H

#include "duet/base.h"

#include <stdio.h>

static inline void gpu_or_skip(const char *test) {
    if (duet_device_check(duet_device_cuda(0)) == DUET_OK) return;
    printf("SKIP %s: no CUDA device visible (%s)\n", test, duet_last_error());
    fflush(stdout);
    exit(77);
}

#endif
