/* The runner's checkpoints: the unwrapped state dict
 * (generator.conv_first.weight, ...), each optimizer's state under
 * optimizer.<part>., and metadata for resuming (iteration, epoch, sampler
 * position, seed, RNG, world size, config text, duet version). Written by
 * rank 0, atomically (duet_st_writer_save: temporary file, fsync, rename). */
#include <inttypes.h>
#include <string.h>

#include "train/runner_internal.h"
#include "train/runner_ckpt.h"

static int meta_i64(duet_st_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return duet_st_writer_set_meta(w, key, buf);
}

static int meta_u64(duet_st_writer *w, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return duet_st_writer_set_meta(w, key, buf);
}

static int fill(duet__run *r, const duet__ckpt_state *s, duet_st_writer *w) {
    DUET_TRY(duet_module_save_state(duet_model_module(r->model), w, ""));
    if (r->opts != NULL && r->save_optimizer) {
        size_t n = duet_optimizer_set_count(r->opts);
        for (size_t i = 0; i < n; i++) {
            char prefix[128];
            snprintf(prefix, sizeof prefix, "optimizer.%s.", duet_optimizer_set_name(r->opts, i));
            DUET_TRY(duet_optimizer_save_state(duet_optimizer_set_at(r->opts, i), w, prefix));
        }
    }
    DUET_TRY(meta_i64(w, "iter", s->iter));
    DUET_TRY(meta_i64(w, "epoch", s->sampler.epoch));
    DUET_TRY(meta_i64(w, "sampler_position", s->sampler.position));
    DUET_TRY(meta_u64(w, "seed", r->seed));
    DUET_TRY(meta_u64(w, "rng_seed", r->rng.seed));
    DUET_TRY(meta_u64(w, "rng_stream", r->rng.stream));
    DUET_TRY(meta_u64(w, "rng_counter", r->rng.counter));
    DUET_TRY(meta_i64(w, "world_size", r->world));
    DUET_TRY(meta_i64(w, "samples_per_gpu", r->samples_per_gpu));
    DUET_TRY(duet_st_writer_set_meta(w, "model_type", duet_model_type_name(r->model)));
    if (strcmp(duet_model_type_name(r->model), "SRGAN") == 0)
        DUET_TRY(meta_i64(w, "step_counter", duet_srgan_step_counter(r->model)));
    DUET_TRY(duet_st_writer_set_meta(w, "duet_version", DUET_VERSION_STRING));
    char *text = NULL;
    DUET_TRY(duet_config_text(r->cfg, &text));
    int rc = duet_st_writer_set_meta(w, "config", text);
    free(text);
    return rc;
}

int duet__ckpt_save(duet__run *r, const duet__ckpt_state *s) {
    duet_st_writer *w = NULL;
    DUET_TRY(duet_st_writer_create(&w));
    int rc = fill(r, s, w);
    char name[64];
    snprintf(name, sizeof name, "iter_%" PRId64 ".safetensors", s->iter);
    char *path = duet__path_join(r->work_dir, name);
    char *latest = duet__path_join(r->work_dir, "latest.safetensors");
    if (rc == DUET_OK && (path == NULL || latest == NULL))
        rc = duet__error(DUET_ENOMEM, "checkpoint: out of memory");
    if (rc == DUET_OK) rc = duet_st_writer_save(w, path);
    if (rc == DUET_OK) rc = duet_st_writer_save(w, latest);
    if (rc != DUET_OK) duet__error_context(rc, "saving the checkpoint of iteration %" PRId64, s->iter);
    free(path);
    free(latest);
    duet_st_writer_destroy(w);
    return rc;
}

/* "x" and "x." prefixes of an optimizer entry. */
static bool is_optimizer_key(const char *name) { return strncmp(name, "optimizer.", 10) == 0; }

int duet__ckpt_load_weights(duet__run *r, const duet_st *st, const char *path, bool strict,
                            const char *require_prefix) {
    duet_named_tensors sd = {0};
    DUET_TRY(duet_module_state(duet_model_module(r->model), &sd));
    int rc = DUET_OK;
    size_t nmissing = 0, nunexpected = 0;
    char missing[1024] = "", unexpected[1024] = "";
    size_t lm = 0, lu = 0;
    for (size_t i = 0; i < sd.count && rc == DUET_OK; i++) {
        const char *name = sd.items[i].name;
        if (!duet_st_has(st, name)) {
            bool required = strict || (require_prefix != NULL &&
                                       strncmp(name, require_prefix, strlen(require_prefix)) == 0);
            if (required)
                rc = duet__error(DUET_ENOTFOUND,
                                 "%s has no '%s' (the %s model needs it): is this a checkpoint "
                                 "of this config's model?", path, name,
                                 duet_model_type_name(r->model));
            if (lm < sizeof missing)
                lm += (size_t)snprintf(missing + lm, sizeof missing - lm, "%s%s",
                                       nmissing ? ", " : "", name);
            nmissing++;
            continue;
        }
        rc = duet_st_copy_into(st, name, sd.items[i].tensor);
    }
    for (size_t i = 0; i < duet_st_count(st) && rc == DUET_OK; i++) {
        const char *name = duet_st_name(st, i);
        if (is_optimizer_key(name)) continue;
        bool found = false;
        for (size_t k = 0; k < sd.count && !found; k++) found = strcmp(sd.items[k].name, name) == 0;
        if (found) continue;
        if (strict)
            rc = duet__error(DUET_EFORMAT,
                             "%s has '%s', which the %s model does not have: is this a "
                             "checkpoint of this config's model?", path, name,
                             duet_model_type_name(r->model));
        if (lu < sizeof unexpected)
            lu += (size_t)snprintf(unexpected + lu, sizeof unexpected - lu, "%s%s",
                                   nunexpected ? ", " : "", name);
        nunexpected++;
    }
    duet_named_tensors_free(&sd);
    DUET_TRY(rc);
    if (nmissing > 0)
        duet_log(DUET_LOG_WARN, "%s: %zu keys missing (left as initialised): %s%s", path,
                 nmissing, missing, lm >= sizeof missing ? "..." : "");
    if (nunexpected > 0)
        duet_log(DUET_LOG_WARN, "%s: %zu unexpected keys (ignored): %s%s", path, nunexpected,
                 unexpected, lu >= sizeof unexpected ? "..." : "");
    return DUET_OK;
}

static int meta_get_i64(const duet_st *st, const char *path, const char *key, int64_t *out) {
    const char *v = duet_st_meta(st, key);
    char *end = NULL;
    if (v == NULL)
        return duet__error(DUET_EFORMAT,
                           "%s has no metadata '%s': not a duet training checkpoint (use it "
                           "as load_from instead of --resume)", path, key);
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0')
        return duet__error(DUET_EFORMAT, "%s: metadata '%s' = '%s' is not an integer", path, key,
                           v);
    *out = x;
    return DUET_OK;
}

int duet__ckpt_resume(duet__run *r, const char *path, duet__ckpt_state *s) {
    duet_st *st = NULL;
    DUET_TRY(duet_st_load(path, &st));
    int64_t world = 0, seed = 0, rs = 0, rstream = 0, rcounter = 0;
    int rc = meta_get_i64(st, path, "iter", &s->iter);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "epoch", &s->sampler.epoch);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "sampler_position", &s->sampler.position);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "world_size", &world);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "seed", &seed);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "rng_seed", &rs);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "rng_stream", &rstream);
    if (rc == DUET_OK) rc = meta_get_i64(st, path, "rng_counter", &rcounter);
    if (rc == DUET_OK && (uint64_t)seed != r->seed)
        duet_log(DUET_LOG_WARN, "%s was trained with seed %lld, the config says %llu: "
                 "continuing with the checkpoint's data order", path, (long long)seed,
                 (unsigned long long)r->seed);
    if (rc == DUET_OK && world != r->world) {
        duet_log(DUET_LOG_WARN,
                 "%s was written by %lld processes, this run has %d: the data order "
                 "restarts at epoch %lld and the result will not match an uninterrupted run",
                 path, (long long)world, r->world, (long long)s->sampler.epoch + 1);
        s->sampler.epoch += 1;
        s->sampler.position = 0;
    }
    if (rc == DUET_OK) rc = duet__ckpt_load_weights(r, st, path, true, NULL);
    size_t n = r->opts != NULL ? duet_optimizer_set_count(r->opts) : 0;
    for (size_t i = 0; i < n && rc == DUET_OK; i++) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, "optimizer.%s.", duet_optimizer_set_name(r->opts, i));
        rc = duet_optimizer_load_state(duet_optimizer_set_at(r->opts, i), st, prefix);
        if (rc != DUET_OK)
            duet__error_context(rc, "%s (saved with checkpoint_config.save_optimizer = false?)",
                                path);
    }
    if (rc == DUET_OK) {
        r->seed = (uint64_t)seed;
        r->rng.seed = (uint64_t)rs;
        r->rng.stream = (uint64_t)rstream;
        r->rng.counter = (uint64_t)rcounter;
        s->step_counter = -1;
        if (duet_st_meta(st, "step_counter") != NULL)
            rc = meta_get_i64(st, path, "step_counter", &s->step_counter);
    }
    duet_st_destroy(st);
    return rc;
}
