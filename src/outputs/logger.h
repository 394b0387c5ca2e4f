/* The runner's training log (the outputs layer, for the runner): MMEditing's text lines
 * on stdout and in <work_dir>/<run start time>.log, a progress bar when
 * stdout is a terminal, and one JSON object per line appended to
 * <work_dir>/log.jsonl (each run starts with a "run" record).
 *
 * Only rank 0 logs; the other ranks hold no logger (NULL is accepted
 * everywhere and does nothing).
 *
 *   duet__logger *lg = NULL;
 *   DUET_TRY(duet__logger_open("work_dirs/x", stdout, &lg));
 *   duet__kv lr[] = {{"generator", 1e-4}};
 *   duet__kv losses[] = {{"loss_pix", 0.04}};
 *   duet__logger_train(lg, &(duet__train_record){.iter = 100, .max_iters = 1000,
 *                      .lr = lr, .nlr = 1, .losses = losses, .nlosses = 1,
 *                      .time = 0.12, .data_time = 0.01, .eta = 108.0});
 *   duet__logger_close(lg);
 */
#ifndef DUET_TRAIN_LOGGER_H
#define DUET_TRAIN_LOGGER_H

#include <stdio.h>

#include "duet/base.h"

/* A named value (a loss, an optimizer's lr, a metric). */
typedef struct duet__kv {
    const char *name;
    double value;
} duet__kv;

typedef struct duet__train_record {
    int64_t iter;      /* 1-based: iterations done, as MMEditing prints them */
    int64_t max_iters;
    const duet__kv *lr; /* per optimizer, keyed by child name */
    int nlr;
    const duet__kv *losses; /* averaged over ranks */
    int nlosses;
    double time;      /* seconds per iteration, averaged over the interval */
    double data_time; /* seconds per iteration spent waiting for data */
    double eta;       /* seconds; < 0 when unknown */
    double memory_mb; /* peak resident memory of this process; <= 0: not shown */
} duet__train_record;

typedef struct duet__logger duet__logger;

/* Opens (appends to) <work_dir>/log.jsonl; `text` receives the text lines
 * (stdout in the runner; NULL: no text). The progress bar is drawn only when
 * `text` is a terminal. Free with duet__logger_close (NULL ok). */
int duet__logger_open(const char *work_dir, FILE *text, duet__logger **out);
void duet__logger_close(duet__logger *lg);
/* Forces (or forbids) the progress bar, for tests. */
void duet__logger_set_progress(duet__logger *lg, bool enabled);

/* Also writes the train and val scalars as TensorBoard events in `dir`
 * (mmcv's tags: train/<loss>, learning_rate/<optimizer>, train/time,
 * train/data_time, val/<metric>), from now on. */
int duet__logger_open_tensorboard(duet__logger *lg, const char *dir);
/* What a run's header records say. */
typedef struct duet__run_header {
    const char *config;       /* path of the config file */
    const char *config_text;  /* the config as run (after --set) */
    const char *exp_name;     /* NULL: none */
    uint64_t seed;
    int world_size;
    int64_t start_iter;       /* where it starts */
    const char *resumed_from; /* NULL for a new run */
    const char *env_info;     /* `duet info`'s text; NULL: none */
} duet__run_header;

/* A run's first records. In log.jsonl, which a work dir keeps across runs:
 * {"mode": "run", "time", "config", "world_size", "iter", "resumed_from"
 * (null for a new run), "seed", "text_log" (this run's <YYYYmmdd_HHMMSS>.log
 * beside it, which holds its text lines, as MMEditing keeps one per run),
 * "json_log" (its <YYYYmmdd_HHMMSS>.log.json), "duet_version",
 * "git_describe"}. In the run's own .log.json, mmcv's meta record first
 * ({"exp_name", "duet_version", "git_describe", "seed", "world_size",
 * "config" (the text), "env_info"}), then mmcv's TextLoggerHook records. */
int duet__logger_run_start(duet__logger *lg, const duet__run_header *h);
/* One training record: a text line and a {"mode": "train", ...} JSON line. */
int duet__logger_train(duet__logger *lg, const duet__train_record *r);
/* One evaluation record: {"mode": "val", "iter": ..., "PSNR": ..., ...}.
 * Without metrics (test_cfg.metrics = [], the translation configs) the text
 * line says so and how many images were evaluated, where MMEditing's
 * generation datasets log val_saved_number; the JSON record holds mode and
 * iter only. */
int duet__logger_val(duet__logger *lg, int64_t iter, int64_t images, const duet__kv *metrics,
                     int nmetrics);
/* The PNG file at `path` (an evaluation grid) as a TensorBoard image under
 * `tag` at `iter`, when TensorBoard events are written; else nothing. */
int duet__logger_tb_image(duet__logger *lg, const char *tag, int64_t iter, const char *path);
/* Redraws the progress bar at `iter` of `max_iters` (no-op off a terminal). */
void duet__logger_progress(duet__logger *lg, int64_t iter, int64_t max_iters, double eta);
/* A free-form text line (INFO) that first clears the progress bar. */
void duet__logger_text(duet__logger *lg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "1 day, 2:03:04" / "0:05:12": MMEditing's ETA format (whole seconds). */
char *duet__fmt_duration(double seconds, char *buf, size_t size);
/* Seconds left after `done` of `total` iterations, from the average time per
 * iteration since the run (or resume) started. < 0 when nothing is known. */
double duet__eta(double elapsed, int64_t done_since_start, int64_t done, int64_t total);

/* The text line for a record (without the timestamp prefix), as
 * "Iter [100/1000]\tlr_generator: 1.000e-04, eta: 0:01:48, time: 0.120,
 * data_time: 0.010, loss_pix: 0.0400". Writes into buf; returns buf. */
char *duet__format_train_line(const duet__train_record *r, char *buf, size_t size);

#endif
