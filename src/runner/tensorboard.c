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

/* A growable byte buffer for one message (a zeroed struct is empty; free
 * with pbuf_free); `failed` once an allocation failed. */
typedef struct pbuf {
    unsigned char *b;
    size_t n, cap;
    bool failed;
} pbuf;

static void put(pbuf *p, const void *src, size_t n) {
    if (p->failed) return;
    if (p->n + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->n + n) cap *= 2;
        unsigned char *b = realloc(p->b, cap);
        if (b == NULL) {
            p->failed = true;
            return;
        }
        p->b = b;
        p->cap = cap;
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

static void pbuf_free(pbuf *p) {
    free(p->b);
    *p = (pbuf){0};
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
    if (p->failed) return duet__error(DUET_ENOMEM, "%s: out of memory building an event", tb->path);
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
    pbuf p = {0};
    put_event_head(&p, wall_clock(), 0);
    static const char version[] = "brain.Event:2";
    put_bytes_field(&p, 3, version, sizeof version - 1);
    int rc = write_record(tb, &p);
    pbuf_free(&p);
    if (rc != DUET_OK) {
        duet__tb_close(tb);
        return rc;
    }
    *out = tb;
    return DUET_OK;
}

int duet__tb_scalar(duet__tb *tb, const char *tag, int64_t step, float value) {
    if (tb == NULL) return DUET_OK;
    pbuf v = {0}, s = {0}, e = {0};
    put_bytes_field(&v, 1, tag, strlen(tag));
    uint32_t bits;
    memcpy(&bits, &value, 4);
    put_varint(&v, 2 << 3 | 5);
    put_le(&v, bits, 4);
    put_bytes_field(&s, 1, v.b, v.n);
    put_event_head(&e, wall_clock(), step);
    put_bytes_field(&e, 5, s.b, s.n);
    e.failed |= v.failed || s.failed;
    int rc = write_record(tb, &e);
    pbuf_free(&v);
    pbuf_free(&s);
    pbuf_free(&e);
    return rc;
}

int duet__tb_png(duet__tb *tb, const char *tag, int64_t step, const unsigned char *png,
                 size_t n) {
    if (tb == NULL) return DUET_OK;
    /* Signature, then the IHDR chunk: length, "IHDR", width, height (big
     * endian), bit depth, colour type. */
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 26 || memcmp(png, sig, 8) != 0 || memcmp(png + 12, "IHDR", 4) != 0)
        return duet__error(DUET_EFORMAT, "TensorBoard image %s: not a PNG", tag);
    uint32_t w = (uint32_t)png[16] << 24 | (uint32_t)png[17] << 16 | (uint32_t)png[18] << 8 | png[19];
    uint32_t h = (uint32_t)png[20] << 24 | (uint32_t)png[21] << 16 | (uint32_t)png[22] << 8 | png[23];
    int colorspace = png[25] == 2 ? 3 : png[25] == 6 ? 4 : 1; /* RGB, RGBA, gray */
    /* Summary.Image: height 1, width 2, colorspace 3, encoded_image_string 4;
     * Summary.Value: tag 1, image 4. */
    pbuf img = {0}, v = {0}, s = {0}, e = {0};
    put_varint(&img, 1 << 3 | 0);
    put_varint(&img, h);
    put_varint(&img, 2 << 3 | 0);
    put_varint(&img, w);
    put_varint(&img, 3 << 3 | 0);
    put_varint(&img, (uint64_t)colorspace);
    put_bytes_field(&img, 4, png, n);
    put_bytes_field(&v, 1, tag, strlen(tag));
    put_bytes_field(&v, 4, img.b, img.n);
    put_bytes_field(&s, 1, v.b, v.n);
    put_event_head(&e, wall_clock(), step);
    put_bytes_field(&e, 5, s.b, s.n);
    e.failed |= img.failed || v.failed || s.failed;
    int rc = write_record(tb, &e);
    pbuf_free(&img);
    pbuf_free(&v);
    pbuf_free(&s);
    pbuf_free(&e);
    return rc;
}

const char *duet__tb_path(const duet__tb *tb) { return tb != NULL ? tb->path : NULL; }

void duet__tb_close(duet__tb *tb) {
    if (tb == NULL) return;
    if (tb->f != NULL) fclose(tb->f);
    free(tb->path);
    free(tb);
}
