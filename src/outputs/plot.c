/* duet plot: the loss and metric curves of a work dir's log.jsonl drawn
 * into a PNG, with no Python or plotting library: a small rasteriser (lines,
 * frames, a 5x7 bitmap font) over duet_image.
 *
 * Which records: log.jsonl keeps every run of the work dir. The curves are
 * those of the newest training, i.e. the records from the last "run" record
 * that started afresh (resumed_from null) on; the runs that resumed it
 * continue its curves, and where a resume went back to an older checkpoint
 * the later records of an iteration replace the earlier ones. A log from
 * before run records existed is read whole. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "duet/data.h"
#include "outputs/plot.h"
#include "outputs/font.h"

/* ---- series --------------------------------------------------------------------- */

typedef struct point {
    int64_t iter;
    double value;
    size_t seq; /* the order read: of two values of one iteration the later wins */
} point;

/* Bounds on what a log can make plot do: a record longer than MAX_LINE
 * bytes is skipped (with a warning), keys beyond MAX_SERIES distinct ones
 * are not kept, and at most MAX_PANELS curves are drawn (each panel is
 * 430 KB of image): a 3000-key record took 1.4 GB before. */
enum { MAX_LINE = 1 << 20, MAX_SERIES = 256, MAX_PANELS = 64 };

typedef struct series {
    char *key;
    bool val; /* an evaluation metric (else a training value) */
    point *pts;
    size_t n, cap;
} series;

typedef struct series_set {
    series *s;
    size_t n, cap;
} series_set;

/* Train record members that are not curves of their own. */
static bool skipped_train_key(const char *k) {
    static const char *const skip[] = {"mode", "iter", "lr", "time", "data_time", "eta", "memory"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcmp(k, skip[i]) == 0) return true;
    return false;
}

static void set_free(series_set *ss) {
    for (size_t i = 0; i < ss->n; i++) {
        free(ss->s[i].key);
        free(ss->s[i].pts);
    }
    free(ss->s);
    *ss = (series_set){0};
}

static series *find_or_add(series_set *ss, const char *key, bool val) {
    for (size_t i = 0; i < ss->n; i++)
        if (ss->s[i].val == val && strcmp(ss->s[i].key, key) == 0) return &ss->s[i];
    if (ss->n >= MAX_SERIES) return NULL;
    if (ss->n == ss->cap) {
        size_t cap = ss->cap ? ss->cap * 2 : 8;
        series *s = realloc(ss->s, cap * sizeof *s);
        if (s == NULL) return NULL;
        ss->s = s;
        ss->cap = cap;
    }
    series *s = &ss->s[ss->n];
    *s = (series){.key = duet__strdup(key), .val = val};
    if (s->key == NULL) return NULL;
    ss->n++;
    return s;
}

/* Adds (iter, value) at the end, in O(1): read_log sorts each series once
 * and keeps the last value read of each iteration (a resume that went
 * back), so a log of n lines takes O(n log n), not O(n^2). */
static int add_point(series *s, int64_t iter, double v, size_t seq) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        point *p = realloc(s->pts, cap * sizeof *p);
        if (p == NULL) return duet__error(DUET_ENOMEM, "plot: out of memory");
        s->pts = p;
        s->cap = cap;
    }
    s->pts[s->n++] = (point){iter, v, seq};
    return DUET_OK;
}

static int cmp_point(const void *a, const void *b) {
    const point *x = a, *y = b;
    if (x->iter != y->iter) return (x->iter > y->iter) - (x->iter < y->iter);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Sorted by iteration, the last value read of each kept. */
static void sort_series(series *s) {
    qsort(s->pts, s->n, sizeof(point), cmp_point);
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (m > 0 && s->pts[m - 1].iter == s->pts[i].iter) m--;
        s->pts[m++] = s->pts[i];
    }
    s->n = m;
}

/* The next line of f into *buf, at most MAX_LINE bytes of it: the rest of
 * a longer one is read and dropped, and *cut set. -1 at the end. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap, bool *cut) {
    *cut = false;
    if (*buf == NULL) {
        *buf = malloc(4096);
        if (*buf == NULL) return -1;
        *cap = 4096;
    }
    size_t len = 0;
    for (;;) {
        if (len + 1 >= *cap && !*cut) {
            if (*cap >= MAX_LINE) {
                *cut = true;
            } else {
                char *b = realloc(*buf, *cap * 2);
                if (b == NULL) {
                    *cut = true;
                } else {
                    *buf = b;
                    *cap *= 2;
                }
            }
        }
        if (*cut) len = 0; /* the kept text is dropped: the line is skipped */
        if (fgets(*buf + len, (int)(*cap - len), f) == NULL) break;
        len += strlen(*buf + len);
        if (len > 0 && (*buf)[len - 1] == '\n') break;
    }
    if (len == 0 && !*cut && feof(f)) return -1;
    return (ssize_t)len;
}

/* Reads path's records into ss (see the top of this file). */
static int read_log(const char *path, series_set *ss) {
    /* A regular file only: a FIFO would block for ever (O_NONBLOCK lets the
     * open return so that fstat can say what it is). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return duet__error(DUET_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return duet__error(DUET_EIO, "%s: not a regular file (duet plot reads the log.jsonl a "
                           "run wrote)", path);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return duet__error(DUET_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    /* First pass: the line of the last fresh run. */
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, start = 1;
    ssize_t len;
    bool cut = false;
    while ((len = read_line(f, &line, &cap, &cut)) >= 0) {
        lineno++;
        if (cut || strstr(line, "\"mode\":\"run\"") == NULL) continue;
        json_t *o = json_loads(line, 0, NULL);
        json_t *res = o != NULL ? json_object_get(o, "resumed_from") : NULL;
        if (res != NULL && json_is_null(res)) start = lineno;
        json_decref(o);
    }
    rewind(f);
    lineno = 0;
    int rc = DUET_OK;
    size_t seq = 0, dropped_keys = 0;
    while (rc == DUET_OK && (len = read_line(f, &line, &cap, &cut)) >= 0) {
        if (++lineno < start) continue;
        if (cut) {
            duet_log(DUET_LOG_WARN, "%s:%ld: a record longer than %d bytes: skipped", path,
                     lineno, MAX_LINE);
            continue;
        }
        if (len == 0) continue;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (o == NULL) {
            /* A run killed mid-write leaves at most a torn last line. */
            duet_log(DUET_LOG_WARN, "%s:%ld: not a JSON record (%s): skipped", path, lineno,
                     err.text);
            continue;
        }
        const char *mode = json_string_value(json_object_get(o, "mode"));
        json_t *it = json_object_get(o, "iter");
        bool val = mode != NULL && strcmp(mode, "val") == 0;
        if (mode != NULL && (val || strcmp(mode, "train") == 0) && json_is_integer(it)) {
            const char *k;
            json_t *v;
            json_object_foreach(o, k, v) {
                if (val ? (strcmp(k, "mode") == 0 || strcmp(k, "iter") == 0)
                        : skipped_train_key(k))
                    continue;
                if (!json_is_number(v)) continue; /* null: a NaN was logged */
                series *s = find_or_add(ss, k, val);
                if (s == NULL && ss->n >= MAX_SERIES) {
                    dropped_keys++;
                    continue;
                }
                rc = s == NULL ? duet__error(DUET_ENOMEM, "plot: out of memory")
                               : add_point(s, json_integer_value(it), json_number_value(v), seq++);
                if (rc != DUET_OK) break;
            }
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (dropped_keys > 0)
        duet_log(DUET_LOG_WARN, "%s: more than %d distinct keys; %zu values of the others "
                 "were not read", path, MAX_SERIES, dropped_keys);
    for (size_t i = 0; i < ss->n; i++) sort_series(&ss->s[i]);
    return rc;
}

/* ---- drawing ---------------------------------------------------------------------- */

typedef struct rgb {
    uint8_t r, g, b;
} rgb;

static const rgb BLACK = {0, 0, 0}, GRID = {225, 225, 225},
                 TRAIN = {31, 119, 180}, VAL = {214, 39, 40};

static void px(duet_image *im, int64_t x, int64_t y, rgb c) {
    if (x < 0 || y < 0 || x >= im->width || y >= im->height) return;
    uint8_t *p = im->data + (y * im->width + x) * 3;
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
}

static void rect(duet_image *im, int64_t x0, int64_t y0, int64_t x1, int64_t y1, rgb c) {
    for (int64_t y = y0; y <= y1; y++)
        for (int64_t x = x0; x <= x1; x++) px(im, x, y, c);
}

/* A line two pixels wide (Bresenham, with the pixel below each point). */
static void line(duet_image *im, int64_t x0, int64_t y0, int64_t x1, int64_t y1, rgb c) {
    int64_t dx = llabs(x1 - x0), dy = -llabs(y1 - y0);
    int64_t sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
    for (;;) {
        px(im, x0, y0, c);
        px(im, x0, y0 + 1, c);
        if (x0 == x1 && y0 == y1) break;
        int64_t e2 = 2 * e;
        if (e2 >= dy) e += dy, x0 += sx;
        if (e2 <= dx) e += dx, y0 += sy;
    }
}

enum { SCALE = 2, GLYPH_W = 6 * SCALE, GLYPH_H = 7 * SCALE };

static void text(duet_image *im, int64_t x, int64_t y, const char *s, rgb c) {
    const uint8_t col[3] = {c.r, c.g, c.b};
    duet__draw_text(im, x, y, s, col, SCALE);
}

static int64_t text_width(const char *s) { return (int64_t)strlen(s) * GLYPH_W; }

enum { PANEL_W = 480, PANEL_H = 300, COLS = 2, LEFT = 112, RIGHT = 16, TOP = 56, BOTTOM = 40 };

/* One panel at (ox, oy): title, frame, three value labels, the first and
 * last iteration, and the curve (evaluations also as dots). */
static void panel(duet_image *im, int64_t ox, int64_t oy, const series *s, FILE *report) {
    int64_t x0 = ox + LEFT, x1 = ox + PANEL_W - RIGHT, y0 = oy + TOP, y1 = oy + PANEL_H - BOTTOM;
    char title[160];
    snprintf(title, sizeof title, "%s (%s)", s->key, s->val ? "val" : "train");
    text(im, ox + LEFT, oy + 10, title, s->val ? VAL : TRAIN);
    double lo = s->pts[0].value, hi = lo;
    for (size_t i = 1; i < s->n; i++) {
        lo = fmin(lo, s->pts[i].value);
        hi = fmax(hi, s->pts[i].value);
    }
    double pad = hi > lo ? 0.05 * (hi - lo) : (lo != 0 ? 0.05 * fabs(lo) : 1.0);
    double ylo = lo - pad, yhi = hi + pad;
    int64_t ilo = s->pts[0].iter, ihi = s->pts[s->n - 1].iter;
    for (int k = 0; k <= 4; k++) { /* grid */
        int64_t y = y0 + (y1 - y0) * k / 4;
        line(im, x0, y, x1, y, GRID);
    }
    /* The value ticks with as many significant digits as it takes to tell
     * them apart (a PSNR curve within 0.05 dB read "26.2 / 26.2 / 26.2"
     * at a fixed 3). */
    double tv[3];
    char ticks[3][32];
    for (int k = 0; k <= 2; k++) tv[k] = yhi - (yhi - ylo) * k / 2;
    for (int prec = 3; prec <= 15; prec++) {
        for (int k = 0; k <= 2; k++) snprintf(ticks[k], sizeof ticks[k], "%.*g", prec, tv[k]);
        if (strcmp(ticks[0], ticks[1]) != 0 && strcmp(ticks[1], ticks[2]) != 0) break;
    }
    for (int k = 0; k <= 2; k++) {
        int64_t y = y0 + (y1 - y0) * k / 2;
        text(im, x0 - 8 - text_width(ticks[k]), y - GLYPH_H / 2, ticks[k], BLACK);
    }
    char lab[32];
    snprintf(lab, sizeof lab, "%" PRId64, ilo);
    text(im, x0, y1 + 10, lab, BLACK);
    snprintf(lab, sizeof lab, "%" PRId64, ihi);
    text(im, x1 - text_width(lab), y1 + 10, lab, BLACK);
    /* Axis titles: the iteration below, the value's name above its ticks. */
    text(im, (x0 + x1) / 2 - text_width("iteration") / 2, y1 + 10, "iteration", BLACK);
    text(im, ox + 4, y0 - GLYPH_H - 6, s->key, BLACK);
    line(im, x0, y0, x0, y1, BLACK);
    line(im, x0, y1, x1, y1, BLACK);
    line(im, x1, y0, x1, y1, BLACK);
    line(im, x0, y0, x1, y0, BLACK);
    rgb c = s->val ? VAL : TRAIN;
    int64_t px_prev = 0, py_prev = 0;
    for (size_t i = 0; i < s->n; i++) {
        double fx = ihi > ilo ? (double)(s->pts[i].iter - ilo) / (double)(ihi - ilo) : 0.5;
        double fy = (s->pts[i].value - ylo) / (yhi - ylo);
        int64_t x = x0 + 2 + llround(fx * (double)(x1 - x0 - 4));
        int64_t y = y1 - 2 - llround(fy * (double)(y1 - y0 - 4));
        if (i > 0) line(im, px_prev, py_prev, x, y, c);
        if (s->val || s->n == 1) rect(im, x - 2, y - 2, x + 2, y + 2, c);
        px_prev = x, py_prev = y;
    }
    fprintf(report, "  %s (%s): %zu points, iterations %" PRId64 "..%" PRId64
            ", values %.6g..%.6g; axis ticks %s, %s, %s\n", s->key, s->val ? "val" : "train",
            s->n, ilo, ihi, lo, hi, ticks[0], ticks[1], ticks[2]);
}

static bool wanted(const char *key, const char *const *keys, size_t nkeys) {
    if (nkeys == 0) return true;
    for (size_t i = 0; i < nkeys; i++)
        if (strcmp(keys[i], key) == 0) return true;
    return false;
}

/* The output replaces neither the log nor any file that is not a PNG (a
 * checkpoint, a config, a log named by mistake). */
static int check_out(const char *out, const char *log) {
    DUET_TRY(duet__safe_check_inputs(out, &log, 1));
    struct stat sb;
    if (stat(out, &sb) != 0) return DUET_OK; /* nothing there to lose */
    if (!S_ISREG(sb.st_mode))
        return duet__error(DUET_EINVAL, "plot: %s exists and is not a regular file: name a PNG "
                           "file to write", out);
    FILE *f = fopen(out, "rb");
    if (f == NULL) return DUET_OK; /* nothing there, or nothing we could read to lose */
    unsigned char sig[8] = {0};
    size_t got = fread(sig, 1, 8, f);
    fclose(f);
    static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (got > 0 && (got < 8 || memcmp(sig, png, 8) != 0))
        return duet__error(DUET_EINVAL, "plot: %s exists and is not a PNG; duet plot replaces "
                           "only an earlier plot: name another --out", out);
    return DUET_OK;
}

int duet__plot(const char *work_dir, const char *out_png, const char *const *keys,
               size_t nkeys, FILE *report) {
    char *log = duet__path_join(work_dir, "log.jsonl");
    char *def = out_png == NULL ? duet__path_join(work_dir, "curves.png") : NULL;
    const char *out = out_png != NULL ? out_png : def;
    series_set ss = {0};
    duet_image *im = NULL;
    int rc = log == NULL || out == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                        : check_out(out, log);
    if (rc == DUET_OK) rc = read_log(log, &ss);
    size_t shown = 0;
    for (size_t i = 0; rc == DUET_OK && i < ss.n; i++)
        if (ss.s[i].n > 0 && wanted(ss.s[i].key, keys, nkeys)) shown++;
    for (size_t k = 0; rc == DUET_OK && k < nkeys; k++) {
        bool found = false;
        for (size_t i = 0; i < ss.n && !found; i++) found = strcmp(ss.s[i].key, keys[k]) == 0;
        if (!found) {
            duet__str have = {0};
            for (size_t i = 0; i < ss.n; i++) duet__str_add_item(&have, ", ", "%s", ss.s[i].key);
            rc = duet__error(DUET_ENOTFOUND, "plot: %s has no values of '%s' (it has: %s)", log,
                             keys[k], ss.n ? duet__str_get(&have) : "none");
            duet__str_free(&have);
        }
    }
    if (rc == DUET_OK && shown == 0)
        rc = duet__error(DUET_ENOTFOUND, "plot: %s holds no training or evaluation records yet",
                         log);
    const size_t drawn = shown < MAX_PANELS ? shown : MAX_PANELS;
    if (rc == DUET_OK && shown > drawn)
        fprintf(report, "duet plot: note: %zu curves; the first %zu are drawn (choose with "
                "--keys)\n", shown, drawn);
    if (rc == DUET_OK) {
        int64_t rows = (int64_t)(drawn + COLS - 1) / COLS;
        rc = duet_image_create(rows * PANEL_H, COLS * PANEL_W, 3, &im);
    }
    if (rc == DUET_OK) {
        memset(im->data, 255, (size_t)(im->width * im->height * 3)); /* white */
        fprintf(report, "duet plot: %s -> %s\n", log, out);
        size_t k = 0;
        /* Training curves first, then evaluations, each in log order. */
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < ss.n; i++) {
                const series *s = &ss.s[i];
                if (s->val != (pass == 1) || s->n == 0 || !wanted(s->key, keys, nkeys) ||
                    k == drawn)
                    continue;
                panel(im, (int64_t)(k % COLS) * PANEL_W, (int64_t)(k / COLS) * PANEL_H, s,
                      report);
                k++;
            }
        rc = duet_image_save_png(im, out);
    }
    duet_image_destroy(im);
    set_free(&ss);
    free(log);
    free(def);
    return rc;
}
