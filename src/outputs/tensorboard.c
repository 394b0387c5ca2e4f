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
#include "outputs/tensorboard.h"

#include "export/protobuf.h"

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

static void put_event_head(duet__pb *p, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    duet__pb_fixed64(p, 1, bits);
    duet__pb_uint(p, 2, (uint64_t)step);
}

static int write_record(duet__tb *tb, const duet__pb *p) {
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
    duet__pb p = {0};
    put_event_head(&p, wall_clock(), 0);
    duet__pb_string(&p, 3, "brain.Event:2");
    int rc = write_record(tb, &p);
    duet__pb_free(&p);
    if (rc != DUET_OK) {
        duet__tb_close(tb);
        return rc;
    }
    *out = tb;
    return DUET_OK;
}

int duet__tb_scalar(duet__tb *tb, const char *tag, int64_t step, float value) {
    if (tb == NULL) return DUET_OK;
    duet__pb v = {0}, s = {0}, e = {0};
    duet__pb_string(&v, 1, tag);
    duet__pb_float(&v, 2, value);
    duet__pb_message(&s, 1, &v);
    put_event_head(&e, wall_clock(), step);
    duet__pb_message(&e, 5, &s);
    int rc = write_record(tb, &e);
    duet__pb_free(&v);
    duet__pb_free(&s);
    duet__pb_free(&e);
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
    duet__pb img = {0}, v = {0}, s = {0}, e = {0};
    duet__pb_uint(&img, 1, h);
    duet__pb_uint(&img, 2, w);
    duet__pb_uint(&img, 3, (uint64_t)colorspace);
    duet__pb_bytes(&img, 4, png, n);
    duet__pb_string(&v, 1, tag);
    duet__pb_message(&v, 4, &img);
    duet__pb_message(&s, 1, &v);
    put_event_head(&e, wall_clock(), step);
    duet__pb_message(&e, 5, &s);
    int rc = write_record(tb, &e);
    duet__pb_free(&img);
    duet__pb_free(&v);
    duet__pb_free(&s);
    duet__pb_free(&e);
    return rc;
}

const char *duet__tb_path(const duet__tb *tb) { return tb != NULL ? tb->path : NULL; }

void duet__tb_close(duet__tb *tb) {
    if (tb == NULL) return;
    if (tb->f != NULL) fclose(tb->f);
    free(tb->path);
    free(tb);
}
