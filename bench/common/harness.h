/* What the benchmarks under bench/ share to run children and read their
 * results: the process's own path, one-line JSON results from a command,
 * medians, and this process's peak memory and CPU time. */
#ifndef DUET_BENCH_HARNESS_H
#define DUET_BENCH_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

#include "duet/duet.h"

/* Aborts every rank with the failed call and duet's last error (a worker's
 * setup and steps: a benchmark has nothing to recover). */
#define BENCH_CHECK(expr)                                                             \
    do {                                                                              \
        int rc_ = (expr);                                                             \
        if (rc_ != DUET_OK)                                                           \
            duet_comm_abort(NULL, 1, "%s: %s", #expr, duet_last_error());             \
    } while (0)

/* Peak resident memory of this process so far, in MB. */
double bench_peak_rss_mb(void);
/* User + system CPU seconds of this process so far (all its threads). */
double bench_cpu_seconds(void);
/* The path of this executable (to launch itself as a worker); false when
 * /proc/self/exe cannot be read. */
bool bench_self_path(char *buf, size_t size);
/* Runs cmd through the shell and keeps the last line of its output that
 * starts with '{' (without its newline) in line; true when there was one and
 * the command exited 0. */
bool bench_run_json(const char *cmd, char *line, size_t size);
/* The number after "key": in a one-line JSON object; NAN when absent. */
double bench_json_num(const char *line, const char *key);
/* The median of the finite values of v[0..n) (v is not reordered); NAN when
 * there are none. */
double bench_median(const double *v, int n);

#endif
