/* libFuzzer target: the LMDB reader of the SR datasets (MMEditing's
 * layout) on a data.mdb from outside: the size check against the meta
 * pages, liblmdb's open, and reads of a few keys. The input is data.mdb. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"

static char dir[64], mdb[96];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/duet_fuzz_lmdb_XXXXXX");
        if (mkdtemp(dir) == NULL) abort();
        snprintf(mdb, sizeof mdb, "%s/data.mdb", dir);
        duet_log_set_level(DUET_LOG_ERROR);
    }
    FILE *f = fopen(mdb, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    duet__lmdb *db = NULL;
    if (duet__lmdb_open(dir, &db) == DUET_OK) {
        static const char *const keys[] = {"0001_s001", "0002_s004", "a", ""};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            void *bytes = NULL;
            size_t n = 0;
            if (duet__lmdb_get(db, keys[i], &bytes, &n) == DUET_OK) free(bytes);
        }
        duet__lmdb_close(db);
    }
    return 0;
}
