/* The monotonic clock that logs, traces and statistics share. */
#include "duet/base.h"

#include <time.h>

double duet_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
