/* The runner's checkpoints, through duet/train.h's checkpoint files: the
 * unwrapped state dict (generator.conv_first.weight, ...), each optimizer's
 * state under optimizer.<part>., and the metadata a resume needs
 * (iteration, epoch and sampler position, seed, RNG, world size, batch,
 * config text, model type), and the model's own state through its hooks. Written by rank 0, atomically. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/checkpoint_internal.h"
#include "runner/runner_ckpt.h"
#include "runner/runner_internal.h"

static void serve_watchdog(void *comm) { duet_comm_serve(comm); }

/* `latest` becomes another name of the finished file `path`: a hard link
 * under a new temporary name (the pattern workdir.c removes when a crash
 * leaves one), renamed over latest. DUET_EUNSUPPORTED when the file system
 * cannot link (the caller writes latest itself). */
static int link_latest(const char *path, const char *latest) {
    for (int attempt = 0; attempt < 16; attempt++) {
        char *tmp = duet__safe_temp_name(latest);
        if (tmp == NULL) return duet__error(DUET_ENOMEM, "checkpoint: out of memory");
        if (link(path, tmp) != 0) {
            int e = errno;
            free(tmp);
            if (e == EEXIST) continue;
            return duet__error(DUET_EUNSUPPORTED, "cannot link %s: %s", path, strerror(e));
        }
        int rc = DUET_OK;
        if (rename(tmp, latest) != 0) {
            rc = duet__error(DUET_EUNSUPPORTED, "cannot rename %s: %s", tmp, strerror(errno));
            unlink(tmp);
        }
        free(tmp);
        return rc;
    }
    return duet__error(DUET_EUNSUPPORTED, "no free temporary name next to %s", latest);
}

/* The whole optimizer set as checkpoint names, in a new array (free with
 * free; its names and optimizers are borrowed); NULL, 0 when there is none. */
static int named_optimizers(duet__run *r, duet_named_optimizer **out, size_t *n) {
    *out = NULL;
    *n = r->opts != NULL ? duet_optimizer_set_count(r->opts) : 0;
    if (*n == 0) return DUET_OK;
    duet_named_optimizer *o = malloc(*n * sizeof *o);
    if (o == NULL) return duet__error(DUET_ENOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < *n; i++) {
        o[i].name = duet_optimizer_set_name(r->opts, i);
        o[i].opt = duet_optimizer_set_at(r->opts, i);
    }
    *out = o;
    return DUET_OK;
}

enum { NMETA = 13 };

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* mmcv's CheckpointHook max_keep_ckpts: only the newest N iter_N files stay
 * (latest.safetensors is another name of the newest). Best effort: a file
 * that cannot be removed is named in a warning, the run goes on. */
static void prune_checkpoints(const duet__run *r) {
    DIR *d = opendir(r->work_dir);
    if (d == NULL) return;
    int64_t *iters = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long it = -1;
        int end = 0;
        if (sscanf(e->d_name, "iter_%lld.safetensors%n", &it, &end) != 1 || end <= 0 ||
            e->d_name[end] != '\0')
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            int64_t *g = realloc(iters, nc * sizeof *g);
            if (g == NULL) break;
            iters = g;
            cap = nc;
        }
        iters[n++] = (int64_t)it;
    }
    closedir(d);
    if (n > (size_t)r->max_keep_ckpts) {
        qsort(iters, n, sizeof *iters, cmp_i64);
        for (size_t i = 0; i + (size_t)r->max_keep_ckpts < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "iter_%" PRId64 ".safetensors", iters[i]);
            char *p = duet__path_join(r->work_dir, name);
            if (p != NULL && unlink(p) != 0)
                duet_log(DUET_LOG_WARN, "checkpoint_config.max_keep_ckpts: cannot remove %s: %s",
                         p, strerror(errno));
            free(p);
        }
    }
    free(iters);
}

int duet__ckpt_save(duet__run *r, const duet__ckpt_state *s) {
    char v[NMETA][32]; /* integers: 20 digits and a sign at most */
    snprintf(v[0], 32, "%" PRId64, s->iter);
    snprintf(v[1], 32, "%" PRId64, s->sampler.epoch);
    snprintf(v[2], 32, "%" PRId64, s->sampler.position);
    snprintf(v[3], 32, "%" PRIu64, r->seed);
    snprintf(v[4], 32, "%" PRIu64, r->rng.seed);
    snprintf(v[5], 32, "%" PRIu64, r->rng.stream);
    snprintf(v[6], 32, "%" PRIu64, r->rng.counter);
    snprintf(v[7], 32, "%d", r->world);
    snprintf(v[8], 32, "%" PRId64, r->samples_per_gpu);
    /* Where the global stream of samples stands, the same number at any
     * world size: a resume on another number of processes continues it. */
    snprintf(v[9], 32, "%" PRId64, s->sampler.position * (int64_t)r->world);
    duet_named_optimizer *opts = NULL;
    size_t nopts = 0;
    if (r->save_optimizer) DUET_TRY(named_optimizers(r, &opts, &nopts));
    char *text = NULL;
    int rc = duet_config_text(r->cfg, &text);
    if (rc != DUET_OK) {
        free(opts);
        return rc;
    }
    duet_meta_item meta[NMETA] = {
        {"iter", v[0]},          {"epoch", v[1]},        {"sampler_position", v[2]},
        {"seed", v[3]},          {"rng_seed", v[4]},     {"rng_stream", v[5]},
        {"rng_counter", v[6]},   {"world_size", v[7]},   {"samples_per_gpu", v[8]},
        {"model_type", duet_model_type_name(r->model)},
        {"config", text},        {"format", "duet-checkpoint-1"},
        {"sampler_global_index", v[9]},
    };
    char name[64]; /* "iter_<int64>.safetensors": 37 characters at most */
    snprintf(name, sizeof name, "iter_%" PRId64 ".safetensors", s->iter);
    char *path = duet__path_join(r->work_dir, name);
    char *latest = duet__path_join(r->work_dir, "latest.safetensors");
    rc = path == NULL || latest == NULL ? duet__error(DUET_ENOMEM, "checkpoint: out of memory")
                                            : duet__safe_check_inputs(path, r->read_files, 2);
    if (rc == DUET_OK) rc = duet__safe_check_inputs(latest, r->read_files, 2);
    /* The model's own state (step counters, pools) goes in through its
     * save_state hook; between pieces of the write rank 0 answers the other
     * ranks' watchdog, which waits for it without a timeout of its own. */
    if (rc == DUET_OK)
        rc = duet__checkpoint_save_model_ex(path, r->model, opts, nopts, meta, NMETA,
                                            serve_watchdog, r->comm);
    /* latest is the same file: a second name for it (a stop checkpoint
     * costs one write, not two), or a second write where the file system
     * has no hard links. */
    if (rc == DUET_OK && link_latest(path, latest) != DUET_OK)
        rc = duet__checkpoint_save_model_ex(latest, r->model, opts, nopts, meta, NMETA,
                                            serve_watchdog, r->comm);
    free(path);
    free(latest);
    free(text);
    free(opts);
    if (rc == DUET_OK && r->max_keep_ckpts > 0) prune_checkpoints(r);
    return rc;
}

int duet__ckpt_load_weights(duet__run *r, const char *path, bool strict,
                            const char *require_prefix) {
    /* An MMEditing .pth (load_from = 'work_dirs/.../iter_1000000.pth'):
     * through scripts/convert-pth.py, which runs no code from it. */
    char *converted = NULL;
    if (duet__is_pth(path))
        DUET_TRY(duet__helper_convert("convert-pth.py", path, ".safetensors",
                                      r->rank == 0 && !r->quiet, &converted));
    int rc = duet_checkpoint_load_weights(converted != NULL ? converted : path,
                                          duet_model_module(r->model), strict, require_prefix,
                                          NULL, NULL);
    if (converted != NULL) unlink(converted);
    free(converted);
    return rc;
}

/* Integer metadata checked when it is read: a corrupt or hand-edited
 * checkpoint fails here, naming the file, key, value and what is allowed. */
static int meta_int_in(const duet_st *st, const char *path, const char *key, int64_t min,
                       int64_t max, int64_t *out) {
    DUET_TRY(duet_checkpoint_meta_int(st, key, out));
    if (*out < min || *out > max)
        return duet__error(DUET_EFORMAT, "%s: metadata '%s' = %" PRId64 " is out of range (want "
                           "%" PRId64 "..%" PRId64 "): a corrupt or edited checkpoint", path,
                           key, *out, min, max);
    return DUET_OK;
}

/* An absent key (checkpoints written before it existed) leaves *out. */
static int meta_int_in_opt(const duet_st *st, const char *path, const char *key, int64_t min,
                           int64_t max, int64_t *out) {
    int64_t v = 0;
    int rc = duet_checkpoint_meta_int(st, key, &v);
    if (rc == DUET_ENOTFOUND) return DUET_OK;
    DUET_TRY(rc);
    return meta_int_in(st, path, key, min, max, out);
}

/* A checkpoint of a run with another world size or batch per process
 * resumes, as MMEditing's (and PyTorch's) do: a job that lost a node goes on
 * with fewer processes. The sampler is world-invariant (a step draws the
 * next world x per_gpu entries of the epoch's permutation, whoever draws
 * them), so where the total batch is kept the run continues the same
 * global stream of samples (and augmentations, drawn from (seed, epoch,
 * index)) at the checkpoint's global sample index. Where the new total
 * batch does not divide that index, the batches cannot line up: the data
 * order restarts at the next epoch, and we say so. Either way a changed
 * total batch changes the effective learning rate (not rescaled). */
static void adapt_sharding(duet__run *r, const char *path, int64_t world, int64_t per_gpu,
                           int64_t global, duet__ckpt_state *s) {
    if (world == r->world && per_gpu == r->samples_per_gpu) return;
    duet_sampler_state st;
    int64_t size = r->train_set != NULL ? duet_dataset_size(r->train_set) : 0;
    if (size > 0 && duet_sampler_state_from_global(size, r->world, r->samples_per_gpu,
                                                   s->sampler.epoch, global, &st) == DUET_OK) {
        duet_log(DUET_LOG_WARN,
                 "%s was written by %" PRId64 " process%s x %" PRId64 " samples per GPU, this "
                 "run has %d x %" PRId64 " (total batch %" PRId64 " -> %" PRId64 "%s): "
                 "continuing the same stream of samples at epoch %" PRId64 ", global sample %"
                 PRId64, path, world, world == 1 ? "" : "es", per_gpu, r->world,
                 r->samples_per_gpu, world * per_gpu, r->world * r->samples_per_gpu,
                 world * per_gpu == r->world * r->samples_per_gpu
                     ? ""
                     : ", learning rates not rescaled",
                 s->sampler.epoch, global);
        s->sampler = st;
        return;
    }
    duet_log(DUET_LOG_WARN,
             "%s was written by %" PRId64 " process%s x %" PRId64 " samples per GPU, this run "
             "has %d x %" PRId64 " (total batch %" PRId64 " -> %" PRId64 ", learning rates not "
             "rescaled), which does not divide its global sample index %" PRId64 ": the data "
             "order restarts at epoch %" PRId64 " and the result will not match an "
             "uninterrupted run", path, world, world == 1 ? "" : "es", per_gpu, r->world,
             r->samples_per_gpu, world * per_gpu, r->world * r->samples_per_gpu, global,
             s->sampler.epoch + 1);
    s->sampler.epoch += 1;
    s->sampler.position = 0;
}

int duet__ckpt_resume(duet__run *r, const char *path, duet__ckpt_state *s) {
    duet_named_optimizer *opts = NULL;
    size_t nopts = 0;
    DUET_TRY(named_optimizers(r, &opts, &nopts));
    duet_st *st = NULL;
    int rc0 = duet_checkpoint_resume_model(path, r->model, opts, nopts, &st);
    free(opts);
    DUET_TRY(rc0);
    /* duet writes a checksum for every tensor and metadata entry; a
     * checkpoint to continue a run from without them was stripped or is not
     * duet's, and nothing in it can be trusted to continue bitwise. */
    if (!duet_st_has_checksums(st)) {
        int crc = duet__error(DUET_EFORMAT, "%s has no checksums: duet writes them into every "
                              "checkpoint, so this one was stripped or not written by duet, "
                              "and its data cannot be verified; --resume needs a duet "
                              "checkpoint (to start from its weights, use load_from)", path);
        duet_st_destroy(st);
        return crc;
    }
    int64_t world = 0, per_gpu = r->samples_per_gpu;
    uint64_t seed = 0, rs = 0, rstream = 0, rcounter = 0;
    /* iter is checked against 0 here and against total_iters below, with a
     * message that says what to do. */
    int rc = meta_int_in(st, path, "iter", 0, INT64_MAX, &s->iter);
    if (rc == DUET_OK) rc = meta_int_in(st, path, "epoch", 0, INT64_MAX / 2, &s->sampler.epoch);
    if (rc == DUET_OK)
        rc = meta_int_in(st, path, "sampler_position", 0, INT64_MAX, &s->sampler.position);
    if (rc == DUET_OK) rc = meta_int_in(st, path, "world_size", 1, INT32_MAX, &world);
    if (rc == DUET_OK)
        rc = meta_int_in_opt(st, path, "samples_per_gpu", 1, INT32_MAX, &per_gpu);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "seed", &seed);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_seed", &rs);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_stream", &rstream);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_counter", &rcounter);
    if (rc == DUET_OK && s->iter > r->total_iters)
        rc = duet__error(DUET_ECONFIG, "%s was saved at iteration %" PRId64 ", beyond "
                         "total_iters = %" PRId64 " of this run: nothing is left to train; to "
                         "train further raise total_iters (--set total_iters=N with N > %"
                         PRId64 ")", path, s->iter, r->total_iters, s->iter);
    if (rc == DUET_OK && seed != r->seed)
        duet_log(DUET_LOG_WARN, "%s was trained with seed %" PRIu64 ", the config says %" PRIu64
                 ": continuing with the checkpoint's seed", path, seed, r->seed);
    int64_t global = -1;
    if (rc == DUET_OK)
        rc = meta_int_in_opt(st, path, "sampler_global_index", 0, INT64_MAX, &global);
    if (rc == DUET_OK && global < 0) /* written before the key existed */
        global = s->sampler.position <= INT64_MAX / world ? s->sampler.position * world : 0;
    if (rc == DUET_OK) adapt_sharding(r, path, world, per_gpu, global, s);
    if (rc == DUET_OK) {
        r->seed = seed;
        r->rng.seed = rs;
        r->rng.stream = rstream;
        r->rng.counter = rcounter;
    }
    duet_st_destroy(st);
    return rc;
}
