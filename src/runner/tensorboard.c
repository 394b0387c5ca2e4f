/* TensorBoard event files, written directly: what MMEditing's
 * TensorboardLoggerHook writes through torch's SummaryWriter, for the
 * scalars the runner logs.
 *
 * A file is a sequence of TFRecords: the payload's length as a little-endian
 * uint64, a masked CRC-32C of those 8 bytes, the payload, a masked CRC-32C
 * of the payload. Each payload is a tensorflow.Event protocol buffer:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * The first event carries file_version "brain.Event:2", as TensorBoard
 * expects. Encoded by hand below (a varint, a fixed32/64, a length-prefixed
 * field): the few fields needed do not warrant a protobuf library. */
#include "runner/tensorboard.h"

#include "runner/runner_internal.h" /* duet__mkdirs */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct duet__tb {
    FILE *f;
    char *path;
};

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit: the
 * records are a few dozen bytes, once per logging interval. */
static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

/* TFRecord's masking, so that a CRC of data that holds CRCs stays useful. */
static uint32_t masked_crc(const unsigned char *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A growable byte buffer for one message; `failed` after running out of
 * its fixed room (the messages here are small and bounded). */
typedef struct pbuf {
    unsigned char b[1024];
    size_t n;
    bool failed;
} pbuf;

static void put(pbuf *p, const void *src, size_t n) {
    if (p->n + n > sizeof p->b) {
        p->failed = true;
        return;
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

static void put_varint(pbuf *p, uint64_t v) {
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (unsigned char)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    put(p, tmp, n);
}

static void put_le(pbuf *p, uint64_t v, size_t bytes) {
    unsigned char tmp[8];
    for (size_t i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * i));
    put(p, tmp, bytes);
}

/* Field keys: (number << 3) | wire type (0 varint, 1 fixed64, 2 bytes,
 * 5 fixed32). */
static void put_bytes_field(pbuf *p, unsigned field, const void *src, size_t n) {
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, n);
    put(p, src, n);
}

static void put_event_head(pbuf *p, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    put_varint(p, 1 << 3 | 1);
    put_le(p, bits, 8);
    put_varint(p, 2 << 3 | 0);
    put_varint(p, (uint64_t)step);
}

static int write_record(duet__tb *tb, const pbuf *p) {
    if (p->failed) return duet__error(DUET_EINVAL, "%s: an event too large to write", tb->path);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)p->n >> (8 * i));
    uint32_t c1 = masked_crc(len, 8), c2 = masked_crc(p->b, p->n);
    unsigned char k1[4], k2[4];
    for (int i = 0; i < 4; i++) {
        k1[i] = (unsigned char)(c1 >> (8 * i));
        k2[i] = (unsigned char)(c2 >> (8 * i));
    }
    bool ok = fwrite(len, 1, 8, tb->f) == 8 && fwrite(k1, 1, 4, tb->f) == 4 &&
              fwrite(p->b, 1, p->n, tb->f) == p->n && fwrite(k2, 1, 4, tb->f) == 4 &&
              fflush(tb->f) == 0;
    if (!ok) return duet__error(DUET_EIO, "cannot write %s: %s", tb->path, strerror(errno));
    return DUET_OK;
}

static double wall_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int duet__tb_open(const char *dir, duet__tb **out) {
    *out = NULL;
    DUET_TRY(duet__mkdirs(dir));
    char host[128] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    duet__tb *tb = calloc(1, sizeof *tb);
    if (tb == NULL) return duet__error(DUET_ENOMEM, "tensorboard: out of memory");
    /* TensorBoard's own name: events.out.tfevents.<seconds>.<host>; the pid
     * keeps two runs started in one second apart. */
    tb->path = duet__strf("%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)time(NULL), host,
                          (long)getpid());
    int fd = tb->path != NULL
                 ? open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644)
                 : -1;
    tb->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (tb->f == NULL) {
        int rc = tb->path == NULL ? duet__error(DUET_ENOMEM, "tensorboard: out of memory")
                                  : duet__error(DUET_EIO, "cannot create %s: %s", tb->path,
                                                strerror(errno));
        if (fd >= 0) close(fd);
        duet__tb_close(tb);
        return rc;
    }
    pbuf p = {.n = 0};
    put_event_head(&p, wall_clock(), 0);
    static const char version[] = "brain.Event:2";
    put_bytes_field(&p, 3, version, sizeof version - 1);
    int rc = write_record(tb, &p);
    if (rc != DUET_OK) {
        duet__tb_close(tb);
        return rc;
    }
    *out = tb;
    return DUET_OK;
}

int duet__tb_scalar(duet__tb *tb, const char *tag, int64_t step, float value) {
    if (tb == NULL) return DUET_OK;
    pbuf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    put_bytes_field(&v, 1, tag, strlen(tag));
    uint32_t bits;
    memcpy(&bits, &value, 4);
    put_varint(&v, 2 << 3 | 5);
    put_le(&v, bits, 4);
    put_bytes_field(&s, 1, v.b, v.n);
    put_event_head(&e, wall_clock(), step);
    put_bytes_field(&e, 5, s.b, s.n);
    e.failed |= v.failed || s.failed;
    return write_record(tb, &e);
}

const char *duet__tb_path(const duet__tb *tb) { return tb != NULL ? tb->path : NULL; }

void duet__tb_close(duet__tb *tb) {
    if (tb == NULL) return;
    if (tb->f != NULL) fclose(tb->f);
    free(tb->path);
    free(tb);
}
