/* The runner's checkpoints, through duet/train.h's checkpoint files: the
 * unwrapped state dict (generator.conv_first.weight, ...), each optimizer's
 * state under optimizer.<part>., and the metadata a resume needs
 * (iteration, epoch and sampler position, seed, RNG, world size, batch,
 * config text, model type). Written by rank 0, atomically. */
#include <inttypes.h>
#include <string.h>

#include "train/runner_ckpt.h"
#include "train/runner_internal.h"

/* The optimizer set as checkpoint names (borrowed). */
static size_t named_optimizers(duet__run *r, duet_named_optimizer *out, size_t cap) {
    size_t n = r->opts != NULL ? duet_optimizer_set_count(r->opts) : 0;
    if (n > cap) n = cap;
    for (size_t i = 0; i < n; i++) {
        out[i].name = duet_optimizer_set_name(r->opts, i);
        out[i].opt = duet_optimizer_set_at(r->opts, i);
    }
    return n;
}

enum { NMETA = 13 };

int duet__ckpt_save(duet__run *r, const duet__ckpt_state *s) {
    char v[NMETA][32];
    snprintf(v[0], 32, "%" PRId64, s->iter);
    snprintf(v[1], 32, "%" PRId64, s->sampler.epoch);
    snprintf(v[2], 32, "%" PRId64, s->sampler.position);
    snprintf(v[3], 32, "%" PRIu64, r->seed);
    snprintf(v[4], 32, "%" PRIu64, r->rng.seed);
    snprintf(v[5], 32, "%" PRIu64, r->rng.stream);
    snprintf(v[6], 32, "%" PRIu64, r->rng.counter);
    snprintf(v[7], 32, "%d", r->world);
    snprintf(v[8], 32, "%" PRId64, r->samples_per_gpu);
    bool srgan = strcmp(duet_model_type_name(r->model), "SRGAN") == 0 ||
                 strcmp(duet_model_type_name(r->model), "ESRGAN") == 0;
    snprintf(v[9], 32, "%" PRId64, srgan ? duet_srgan_step_counter(r->model) : (int64_t)-1);
    char *text = NULL;
    DUET_TRY(duet_config_text(r->cfg, &text));
    duet_meta_item meta[NMETA] = {
        {"iter", v[0]},          {"epoch", v[1]},        {"sampler_position", v[2]},
        {"seed", v[3]},          {"rng_seed", v[4]},     {"rng_stream", v[5]},
        {"rng_counter", v[6]},   {"world_size", v[7]},   {"samples_per_gpu", v[8]},
        {"step_counter", v[9]},  {"model_type", duet_model_type_name(r->model)},
        {"config", text},        {"format", "duet-checkpoint-1"},
    };
    duet_named_optimizer opts[DUET__MAX_OPTIMIZERS];
    size_t nopts = r->save_optimizer ? named_optimizers(r, opts, DUET__MAX_OPTIMIZERS) : 0;
    char name[64];
    snprintf(name, sizeof name, "iter_%" PRId64 ".safetensors", s->iter);
    char *path = duet__path_join(r->work_dir, name);
    char *latest = duet__path_join(r->work_dir, "latest.safetensors");
    int rc = path == NULL || latest == NULL ? duet__error(DUET_ENOMEM, "checkpoint: out of memory")
                                            : DUET_OK;
    duet_module *m = duet_model_module(r->model);
    if (rc == DUET_OK) rc = duet_checkpoint_save(path, m, opts, nopts, meta, NMETA);
    if (rc == DUET_OK) rc = duet_checkpoint_save(latest, m, opts, nopts, meta, NMETA);
    free(path);
    free(latest);
    free(text);
    return rc;
}

int duet__ckpt_load_weights(duet__run *r, const char *path, bool strict,
                            const char *require_prefix) {
    return duet_checkpoint_load_weights(path, duet_model_module(r->model), strict, require_prefix,
                                        NULL, NULL);
}

int duet__ckpt_resume(duet__run *r, const char *path, duet__ckpt_state *s) {
    duet_named_optimizer opts[DUET__MAX_OPTIMIZERS];
    size_t nopts = named_optimizers(r, opts, DUET__MAX_OPTIMIZERS);
    duet_st *st = NULL;
    DUET_TRY(duet_checkpoint_resume(path, duet_model_module(r->model), opts, nopts, &st));
    int64_t world = 0;
    uint64_t seed = 0, rs = 0, rstream = 0, rcounter = 0;
    int rc = duet_checkpoint_meta_int(st, "iter", &s->iter);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_int(st, "epoch", &s->sampler.epoch);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_int(st, "sampler_position", &s->sampler.position);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_int(st, "world_size", &world);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "seed", &seed);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_seed", &rs);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_stream", &rstream);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_uint(st, "rng_counter", &rcounter);
    if (rc == DUET_OK) rc = duet_checkpoint_meta_int(st, "step_counter", &s->step_counter);
    if (rc == DUET_OK && seed != r->seed)
        duet_log(DUET_LOG_WARN, "%s was trained with seed %" PRIu64 ", the config says %" PRIu64
                 ": continuing with the checkpoint's seed", path, seed, r->seed);
    if (rc == DUET_OK && world != r->world) {
        duet_log(DUET_LOG_WARN,
                 "%s was written by %" PRId64 " processes, this run has %d: the data order "
                 "restarts at epoch %" PRId64 " and the result will not match an uninterrupted "
                 "run", path, world, r->world, s->sampler.epoch + 1);
        s->sampler.epoch += 1;
        s->sampler.position = 0;
    }
    if (rc == DUET_OK) {
        r->seed = seed;
        r->rng.seed = rs;
        r->rng.stream = rstream;
        r->rng.counter = rcounter;
    }
    duet_st_destroy(st);
    return rc;
}
