/* The runner's training log: MMEditing's text lines, a terminal progress bar
 * and log.jsonl (one JSON object per line, through jansson). */
#include "outputs/logger.h"
#include "outputs/tensorboard.h"
#include "duet/data.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct duet__logger {
    FILE *jsonl;   /* appended, flushed after every record */
    char *path;    /* of log.jsonl, for error messages */
    FILE *text;    /* may be NULL */
    FILE *run_log; /* this run's text log, WORK_DIR/<start time>.log (NULL if unopened) */
    FILE *run_json; /* mmcv's WORK_DIR/<start time>.log.json beside it (NULL if unopened) */
    duet__tb *tb;  /* TensorBoard events (log_config.hooks' TensorboardLoggerHook), or NULL */
    char run_log_name[64];
    char run_json_name[72];
    bool progress; /* draw the bar (text is a terminal) */
    bool bar_shown; /* a bar is on the current line: clear it before text */
};

/* This run's own text log, as MMEditing keeps one per run: the text lines
 * in WORK_DIR/<YYYYmmdd_HHMMSS>.log, a new file (never through a link, a
 * suffix when two runs start in one second). Best effort: a run whose text
 * log cannot be made still logs to stdout and log.jsonl, with a warning. */
static void open_run_log(duet__logger *lg, const char *work_dir) {
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tm);
    for (int k = 0; k < 100 && lg->run_log == NULL; k++) {
        if (k == 0) snprintf(lg->run_log_name, sizeof lg->run_log_name, "%s.log", stamp);
        else snprintf(lg->run_log_name, sizeof lg->run_log_name, "%s_%d.log", stamp, k);
        char *path = duet__path_join(work_dir, lg->run_log_name);
        if (path == NULL) break;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        int e = errno;
        if (fd >= 0) lg->run_log = fdopen(fd, "w");
        if (fd >= 0 && lg->run_log == NULL) close(fd);
        if (fd < 0 && e != EEXIST) {
            duet_log(DUET_LOG_WARN, "cannot create %s: %s (the text log is on stdout only)",
                     path, strerror(e));
            free(path);
            break;
        }
        free(path);
    }
    if (lg->run_log == NULL) {
        lg->run_log_name[0] = '\0';
        return;
    }
    /* mmcv's TextLoggerHook: <timestamp>.log.json, the JSON records of the
     * same run (the name is free: its .log was just made new). */
    snprintf(lg->run_json_name, sizeof lg->run_json_name, "%s.json", lg->run_log_name);
    char *path = duet__path_join(work_dir, lg->run_json_name);
    int fd = path != NULL ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644)
                          : -1;
    if (fd >= 0) lg->run_json = fdopen(fd, "w");
    if (fd >= 0 && lg->run_json == NULL) close(fd);
    if (lg->run_json == NULL) {
        duet_log(DUET_LOG_WARN, "cannot create %s: %s (log.jsonl has the same records)",
                 path != NULL ? path : lg->run_json_name, strerror(errno));
        lg->run_json_name[0] = '\0';
    }
    free(path);
}

int duet__logger_open(const char *work_dir, FILE *text, duet__logger **out) {
    *out = NULL;
    duet__logger *lg = calloc(1, sizeof *lg);
    if (lg == NULL) return duet__error(DUET_ENOMEM, "logger: out of memory");
    size_t n = strlen(work_dir) + sizeof "/log.jsonl";
    lg->path = malloc(n);
    if (lg->path == NULL) {
        free(lg);
        return duet__error(DUET_ENOMEM, "logger: out of memory");
    }
    snprintf(lg->path, n, "%s/log.jsonl", work_dir);
    /* Never through a link left at the path (it would append to whatever
     * file the link names): O_NOFOLLOW refuses one with ELOOP. */
    int fd = open(lg->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    lg->jsonl = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (lg->jsonl == NULL) {
        int e = errno;
        if (fd >= 0) close(fd);
        int rc = duet__error(DUET_EIO, "cannot open %s for appending: %s", lg->path,
                             e == ELOOP ? "it is a symbolic link (duet writes its log only to a "
                                          "file of its own in the work dir; remove the link)"
                                        : strerror(e));
        free(lg->path);
        free(lg);
        return rc;
    }
    lg->text = text;
    lg->progress = text != NULL && isatty(fileno(text));
    open_run_log(lg, work_dir);
    *out = lg;
    return DUET_OK;
}

void duet__logger_close(duet__logger *lg) {
    if (lg == NULL) return;
    if (lg->bar_shown && lg->text != NULL) {
        fputc('\n', lg->text);
        fflush(lg->text);
    }
    if (lg->jsonl != NULL) fclose(lg->jsonl);
    if (lg->run_log != NULL) fclose(lg->run_log);
    if (lg->run_json != NULL) fclose(lg->run_json);
    duet__tb_close(lg->tb);
    free(lg->path);
    free(lg);
}

void duet__logger_set_progress(duet__logger *lg, bool enabled) {
    if (lg != NULL) lg->progress = enabled;
}

char *duet__fmt_duration(double seconds, char *buf, size_t size) {
    if (!(seconds >= 0) || !isfinite(seconds)) seconds = 0;
    int64_t s = (int64_t)llround(seconds);
    int64_t days = s / 86400;
    s %= 86400;
    int h = (int)(s / 3600), m = (int)(s % 3600 / 60), sec = (int)(s % 60);
    if (days > 0)
        snprintf(buf, size, "%lld day%s, %d:%02d:%02d", (long long)days, days == 1 ? "" : "s", h,
                 m, sec);
    else
        snprintf(buf, size, "%d:%02d:%02d", h, m, sec);
    return buf;
}

double duet__eta(double elapsed, int64_t done_since_start, int64_t done, int64_t total) {
    if (done_since_start <= 0 || elapsed < 0) return -1.0;
    int64_t left = total - done;
    if (left < 0) left = 0;
    return elapsed / (double)done_since_start * (double)left;
}

/* Appends printf output at buf+*len, never past size (truncates). */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n < size - *len ? (size_t)n : size - *len - 1;
}

char *duet__format_train_line(const duet__train_record *r, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    append(buf, size, &len, "Iter [%lld/%lld]\t", (long long)r->iter, (long long)r->max_iters);
    for (int i = 0; i < r->nlr; i++)
        append(buf, size, &len, "lr_%s: %.3e, ", r->lr[i].name, r->lr[i].value);
    if (r->eta >= 0) {
        char d[64];
        append(buf, size, &len, "eta: %s, ", duet__fmt_duration(r->eta, d, sizeof d));
    }
    append(buf, size, &len, "time: %.3f, data_time: %.3f", r->time, r->data_time);
    if (r->memory_mb > 0) append(buf, size, &len, ", memory: %.0f", r->memory_mb);
    for (int i = 0; i < r->nlosses; i++)
        append(buf, size, &len, ", %s: %.4f", r->losses[i].name, r->losses[i].value);
    return buf;
}

static void clear_bar(duet__logger *lg) {
    if (!lg->bar_shown || lg->text == NULL) return;
    fputs("\r\033[K", lg->text);
    lg->bar_shown = false;
}

static void text_line(duet__logger *lg, const char *line) {
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    if (lg->run_log != NULL) {
        fprintf(lg->run_log, "%s - duet - INFO - %s\n", stamp, line);
        fflush(lg->run_log);
    }
    if (lg->text == NULL) return;
    clear_bar(lg);
    fprintf(lg->text, "%s - duet - INFO - %s\n", stamp, line);
    fflush(lg->text);
}

void duet__logger_text(duet__logger *lg, const char *fmt, ...) {
    if (lg == NULL) return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    text_line(lg, line);
}

/* A JSON number; non-finite values (a NaN loss) become null, since JSON has
 * no NaN and the line must stay parseable. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static int write_json(duet__logger *lg, json_t *obj) {
    if (obj == NULL) return duet__error(DUET_ENOMEM, "logger: out of memory building a record");
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
    json_decref(obj);
    if (s == NULL) return duet__error(DUET_ENOMEM, "logger: out of memory writing a record");
    int bad = fprintf(lg->jsonl, "%s\n", s) < 0 || fflush(lg->jsonl) != 0;
    int e = errno;
    free(s);
    if (bad) return duet__error(DUET_EIO, "cannot append to %s: %s", lg->path, strerror(e));
    return DUET_OK;
}

/* mmcv's float rounding in .log.json (round(v, 5)). */
static json_t *num5(double v) { return isfinite(v) ? json_real(round(v * 1e5) / 1e5) : json_null(); }

/* One record of the run's .log.json (best effort, as mmcv's: a failed write
 * is said once and the file dropped; log.jsonl has the same records). */
static void write_run_json(duet__logger *lg, json_t *obj) {
    if (lg->run_json == NULL || obj == NULL) {
        json_decref(obj);
        return;
    }
    char *s = json_dumps(obj, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(obj);
    if (s == NULL || fprintf(lg->run_json, "%s\n", s) < 0 || fflush(lg->run_json) != 0) {
        duet_log(DUET_LOG_WARN, "cannot write %s: %s (no more records there; log.jsonl "
                 "has them)", lg->run_json_name, strerror(errno));
        fclose(lg->run_json);
        lg->run_json = NULL;
    }
    free(s);
}

int duet__logger_open_tensorboard(duet__logger *lg, const char *dir) {
    if (lg == NULL) return DUET_OK;
    DUET_TRY(duet__tb_open(dir, &lg->tb));
    char line[4200];
    snprintf(line, sizeof line, "TensorBoard events: %s (tensorboard --logdir %s)",
             duet__tb_path(lg->tb), dir);
    text_line(lg, line);
    return DUET_OK;
}

int duet__logger_run_start(duet__logger *lg, const duet__run_header *h) {
    if (lg == NULL) return DUET_OK;
    char stamp[40];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S%z", &tm);
    json_t *obj = json_object();
    if (obj == NULL) return write_json(lg, NULL);
    json_object_set_new(obj, "mode", json_string("run"));
    json_object_set_new(obj, "time", json_string(stamp));
    json_object_set_new(obj, "config", json_string(h->config));
    json_object_set_new(obj, "world_size", json_integer(h->world_size));
    json_object_set_new(obj, "iter", json_integer((json_int_t)h->start_iter));
    json_object_set_new(obj, "resumed_from", h->resumed_from != NULL
                                                 ? json_string(h->resumed_from) : json_null());
    json_object_set_new(obj, "seed", json_integer((json_int_t)h->seed));
    json_object_set_new(obj, "text_log", lg->run_log_name[0] != '\0'
                                             ? json_string(lg->run_log_name) : json_null());
    json_object_set_new(obj, "json_log", lg->run_json_name[0] != '\0'
                                             ? json_string(lg->run_json_name) : json_null());
    json_object_set_new(obj, "duet_version", json_string(DUET_VERSION_STRING));
    json_object_set_new(obj, "git_describe", json_string(duet_git_describe()));
    DUET_TRY(write_json(lg, obj));

    /* mmcv dumps runner.meta first; MMEditing's tools/train.py fills it with
     * exp_name, its version, seed and env_info. */
    json_t *meta = json_object();
    if (meta != NULL) {
        json_object_set_new(meta, "exp_name", h->exp_name != NULL ? json_string(h->exp_name)
                                                                  : json_null());
        json_object_set_new(meta, "duet_version", json_string(DUET_VERSION_STRING));
        json_object_set_new(meta, "git_describe", json_string(duet_git_describe()));
        json_object_set_new(meta, "seed", json_integer((json_int_t)h->seed));
        json_object_set_new(meta, "world_size", json_integer(h->world_size));
        json_object_set_new(meta, "iter", json_integer((json_int_t)h->start_iter));
        json_object_set_new(meta, "resumed_from", h->resumed_from != NULL
                                                      ? json_string(h->resumed_from) : json_null());
        json_object_set_new(meta, "config", json_string(h->config_text != NULL ? h->config_text
                                                                                : ""));
        json_object_set_new(meta, "env_info", json_string(h->env_info != NULL ? h->env_info : ""));
    }
    write_run_json(lg, meta);
    return DUET_OK;
}

int duet__logger_train(duet__logger *lg, const duet__train_record *r) {
    if (lg == NULL) return DUET_OK;
    char line[4096];
    text_line(lg, duet__format_train_line(r, line, sizeof line));

    json_t *obj = json_object();
    json_t *lr = json_object();
    if (obj == NULL || lr == NULL) {
        json_decref(obj);
        json_decref(lr);
        return write_json(lg, NULL);
    }
    json_object_set_new(obj, "mode", json_string("train"));
    json_object_set_new(obj, "iter", json_integer(r->iter));
    for (int i = 0; i < r->nlr; i++) json_object_set_new(lr, r->lr[i].name, num(r->lr[i].value));
    json_object_set_new(obj, "lr", lr);
    for (int i = 0; i < r->nlosses; i++)
        json_object_set_new(obj, r->losses[i].name, num(r->losses[i].value));
    json_object_set_new(obj, "time", num(r->time));
    json_object_set_new(obj, "data_time", num(r->data_time));
    if (r->eta >= 0) json_object_set_new(obj, "eta", num(r->eta));
    if (r->memory_mb > 0) json_object_set_new(obj, "memory", num(r->memory_mb));
    DUET_TRY(write_json(lg, obj));
    /* mmcv's record: mode, epoch, iter, lr per optimizer, memory, then the
     * log buffer (time, data_time, the losses), floats to 5 decimals. */
    json_t *mm = json_object(), *mlr = json_object();
    if (mm != NULL && mlr != NULL) {
        json_object_set_new(mm, "mode", json_string("train"));
        json_object_set_new(mm, "epoch", json_integer(1));
        json_object_set_new(mm, "iter", json_integer(r->iter));
        for (int i = 0; i < r->nlr; i++)
            json_object_set_new(mlr, r->lr[i].name, num5(r->lr[i].value));
        json_object_set_new(mm, "lr", mlr);
        mlr = NULL;
        if (r->memory_mb > 0) json_object_set_new(mm, "memory", json_integer(llround(r->memory_mb)));
        json_object_set_new(mm, "time", num5(r->time));
        json_object_set_new(mm, "data_time", num5(r->data_time));
        for (int i = 0; i < r->nlosses; i++)
            json_object_set_new(mm, r->losses[i].name, num5(r->losses[i].value));
    }
    json_decref(mlr);
    write_run_json(lg, mm);
    /* mmcv's LoggerHook tags: train/<loss>, learning_rate/<optimizer>,
     * train/time, train/data_time. */
    char tag[160];
    for (int i = 0; i < r->nlosses; i++) {
        snprintf(tag, sizeof tag, "train/%s", r->losses[i].name);
        DUET_TRY(duet__tb_scalar(lg->tb, tag, r->iter, (float)r->losses[i].value));
    }
    for (int i = 0; i < r->nlr; i++) {
        snprintf(tag, sizeof tag, "learning_rate/%s", r->lr[i].name);
        DUET_TRY(duet__tb_scalar(lg->tb, tag, r->iter, (float)r->lr[i].value));
    }
    DUET_TRY(duet__tb_scalar(lg->tb, "train/time", r->iter, (float)r->time));
    return duet__tb_scalar(lg->tb, "train/data_time", r->iter, (float)r->data_time);
}

int duet__logger_val(duet__logger *lg, int64_t iter, int64_t images, const duet__kv *metrics,
                     int nmetrics) {
    if (lg == NULL) return DUET_OK;
    char line[2048];
    size_t len = 0;
    line[0] = '\0';
    append(line, sizeof line, &len, "Iter(val) [%lld]\t", (long long)iter);
    for (int i = 0; i < nmetrics; i++)
        append(line, sizeof line, &len, "%s%s: %.4f", i ? ", " : "", metrics[i].name,
               metrics[i].value);
    if (nmetrics == 0)
        append(line, sizeof line, &len, "%lld image%s evaluated, no metrics (test_cfg.metrics "
               "is empty)", (long long)images, images == 1 ? "" : "s");
    text_line(lg, line);

    json_t *obj = json_object();
    if (obj == NULL) return write_json(lg, NULL);
    json_object_set_new(obj, "mode", json_string("val"));
    json_object_set_new(obj, "iter", json_integer(iter));
    for (int i = 0; i < nmetrics; i++)
        json_object_set_new(obj, metrics[i].name, num(metrics[i].value));
    DUET_TRY(write_json(lg, obj));
    json_t *mm = json_object();
    if (mm != NULL) {
        json_object_set_new(mm, "mode", json_string("val"));
        json_object_set_new(mm, "epoch", json_integer(1));
        json_object_set_new(mm, "iter", json_integer(iter));
        for (int i = 0; i < nmetrics; i++)
            json_object_set_new(mm, metrics[i].name, num5(metrics[i].value));
    }
    write_run_json(lg, mm);
    char tag[160];
    for (int i = 0; i < nmetrics; i++) {
        snprintf(tag, sizeof tag, "val/%s", metrics[i].name);
        DUET_TRY(duet__tb_scalar(lg->tb, tag, iter, (float)metrics[i].value));
    }
    return DUET_OK;
}

int duet__logger_tb_image(duet__logger *lg, const char *tag, int64_t iter, const char *path) {
    if (lg == NULL || lg->tb == NULL) return DUET_OK;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return duet__error(DUET_EIO, "cannot read %s: %s", path, strerror(errno));
    unsigned char *bytes = NULL;
    size_t n = 0, cap = 0;
    int rc = DUET_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            unsigned char *b = realloc(bytes, cap);
            if (b == NULL) {
                rc = duet__error(DUET_ENOMEM, "out of memory reading %s", path);
                break;
            }
            bytes = b;
        }
        size_t got = fread(bytes + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (rc == DUET_OK && ferror(f)) rc = duet__error(DUET_EIO, "cannot read %s", path);
    fclose(f);
    if (rc == DUET_OK) rc = duet__tb_png(lg->tb, tag, iter, bytes, n);
    free(bytes);
    return rc;
}

void duet__logger_progress(duet__logger *lg, int64_t iter, int64_t max_iters, double eta) {
    if (lg == NULL || !lg->progress || lg->text == NULL || max_iters <= 0) return;
    enum { WIDTH = 30 };
    int filled = (int)(WIDTH * iter / max_iters);
    if (filled > WIDTH) filled = WIDTH;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[WIDTH] = '\0';
    char d[64];
    fprintf(lg->text, "\r[%s] %lld/%lld, eta: %s\033[K", bar, (long long)iter,
            (long long)max_iters, eta >= 0 ? duet__fmt_duration(eta, d, sizeof d) : "?");
    fflush(lg->text);
    lg->bar_shown = true;
}
