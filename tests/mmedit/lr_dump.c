/* lr_dump CONFIG BASE_LR ITER...: the lr duet's runner sets at each ITER
 * for an optimizer whose lr is BASE_LR, reading CONFIG's lr_config (and
 * total_iters) exactly as `duet train` does (duet__run_read_settings), one
 * "%d %.17g" line per ITER. tests/mmedit/lr_hooks.py runs it next to mmcv's
 * and MMEditing's own LR hooks (white-box: it includes runner_internal.h). */
#include <stdio.h>
#include <stdlib.h>

#include "duet/train.h"
#include "runner/runner_internal.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: lr_dump CONFIG BASE_LR ITER...\n");
        return 2;
    }
    duet__run r = {0};
    int rc = duet_config_load(argv[1], &r.cfg);
    if (rc == DUET_OK) rc = duet__run_read_settings(&r);
    if (rc != DUET_OK) {
        fprintf(stderr, "lr_dump: %s\n", duet_last_error());
        duet_config_destroy(r.cfg);
        return 1;
    }
    const float base = strtof(argv[2], NULL);
    for (int i = 3; i < argc; i++) {
        const long long it = strtoll(argv[i], NULL, 10);
        printf("%lld %.17g\n", it, (double)duet_lr_at(&r.sched, base, it));
    }
    duet_config_destroy(r.cfg);
    return 0;
}
