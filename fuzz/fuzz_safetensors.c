/* libFuzzer target: the safetensors reader (header JSON, offsets, metadata,
 * checksums, dtype conversion) on arbitrary bytes. duet_st_load reads a
 * path, so the input goes into an in-memory file (memfd). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "duet/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = memfd_create("duet_fuzz_st", 0);
    if (fd < 0) return 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    duet_st *st = NULL;
    if (duet_st_load(path, &st) != DUET_OK) return 0;
    /* Everything a loaded file offers must be safe to read. */
    size_t n = duet_st_count(st);
    for (size_t i = 0; i < n; i++) {
        const char *name = duet_st_name(st, i);
        duet_tensor *t = NULL;
        if (duet_st_get(st, name, &t) == DUET_OK) duet_tensor_release(t);
        const char *dtype;
        const void *bytes;
        size_t nbytes;
        int ndim;
        int64_t shape[DUET_ST_MAX_DIMS];
        duet_st_raw(st, name, &dtype, &bytes, &nbytes, &ndim, shape);
    }
    duet_st *view = NULL;
    if (duet_st_view_without(st, "optimizer.", &view) == DUET_OK) duet_st_destroy(view);
    duet_st_meta(st, "iter");
    duet_st_destroy(st);
    return 0;
}
