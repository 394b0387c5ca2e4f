/* libFuzzer target: duet plot's reader of a work dir's log.jsonl (one JSON
 * record a line, records of runs, iterations replaced by resumes, long and
 * torn lines) and the drawing of what it read. The input is the log. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duet/base.h"
#include "outputs/plot.h" /* duet__plot: what duet plot runs, without the runner */

static char dir[64], log_path[96], out_path[96];
static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/duet_fuzz_plot_XXXXXX");
        if (mkdtemp(dir) == NULL) abort();
        snprintf(log_path, sizeof log_path, "%s/log.jsonl", dir);
        snprintf(out_path, sizeof out_path, "%s/curves.png", dir);
        devnull = fopen("/dev/null", "w");
        duet_log_set_level(DUET_LOG_ERROR);
    }
    FILE *f = fopen(log_path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    duet__plot(dir, out_path, NULL, 0, devnull);
    unlink(out_path);
    return 0;
}
