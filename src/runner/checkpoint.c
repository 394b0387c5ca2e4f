/* Checkpoint files: a model's state dict, named optimizers' states under
 * "optimizer.<name>." and string metadata in one safetensors file, written
 * atomically; strict (--resume) and non-strict (load_from) loading. */
#include "duet/train.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "runner/checkpoint_internal.h"

#define CKPT_OPT_PREFIX "optimizer."
#define CKPT_NAME_MAX 256

static bool valid_opt_name(const char *name) {
    return name != NULL && name[0] != '\0' && strchr(name, '.') == NULL &&
           strlen(name) < CKPT_NAME_MAX;
}

static int check_opts(const char *what, const duet_named_optimizer *opts, size_t nopts) {
    for (size_t i = 0; i < nopts; i++) {
        if (!valid_opt_name(opts[i].name) || opts[i].opt == NULL)
            return duet__error(DUET_EINVAL, "%s: optimizer %zu needs a name without '.' and an "
                               "optimizer (got '%s')", what, i,
                               opts[i].name != NULL ? opts[i].name : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(opts[i].name, opts[j].name) == 0)
                return duet__error(DUET_EINVAL, "%s: optimizer name '%s' given twice", what,
                                   opts[i].name);
    }
    return DUET_OK;
}

static void opt_prefix(char *buf, size_t size, const char *name) {
    snprintf(buf, size, CKPT_OPT_PREFIX "%s.", name);
}

/* duet_st_load verified the checksums of a file that has them; say so when
 * it has none (PyTorch's files, or duet's before checksums). */
void duet__checkpoint_note_unchecked(const duet_st *ck) {
    if (!duet_st_has_checksums(ck))
        duet_log(DUET_LOG_INFO, "note: %s has no checksums (not written by duet, or by an older "
                 "duet): its data could not be verified", duet_st_path(ck));
}

int duet_checkpoint_save(const char *path, duet_module *model, const duet_named_optimizer *opts,
                         size_t nopts, const duet_meta_item *meta, size_t nmeta) {
    return duet__checkpoint_save_ex(path, model, opts, nopts, meta, nmeta, NULL, NULL);
}

int duet__checkpoint_save_ex(const char *path, duet_module *model,
                             const duet_named_optimizer *opts, size_t nopts,
                             const duet_meta_item *meta, size_t nmeta,
                             int (*extra)(void *ctx, duet_st_writer *w), void *ctx) {
    DUET_TRY(check_opts(path, opts, nopts));
    duet_st_writer *w = NULL;
    DUET_TRY(duet_st_writer_create(&w));
    int rc = duet_module_save_state(model, w, "");
    for (size_t i = 0; i < nopts && rc == DUET_OK; i++) {
        char prefix[CKPT_NAME_MAX + 16];
        opt_prefix(prefix, sizeof prefix, opts[i].name);
        rc = duet_optimizer_save_state(opts[i].opt, w, prefix);
    }
    if (rc == DUET_OK && extra != NULL) rc = extra(ctx, w);
    for (size_t i = 0; i < nmeta && rc == DUET_OK; i++)
        rc = duet_st_writer_set_meta(w, meta[i].key, meta[i].value);
    if (rc == DUET_OK) rc = duet_st_writer_set_meta(w, "duet_version", DUET_VERSION_STRING);
    if (rc == DUET_OK) rc = duet_st_writer_save(w, path);
    duet_st_writer_destroy(w);
    if (rc != DUET_OK) duet__error_context(rc, "saving checkpoint %s", path);
    return rc;
}

/* Names of the state-dict entries starting with `prefix` that the file
 * lacks, as "a, b, c" (at most ~1 KB) and their count. */
static int missing_required(const duet_st *weights, duet_module *model, const char *prefix,
                            char *list, size_t size, size_t *count) {
    duet_named_tensors sd;
    DUET_TRY(duet_module_state(model, &sd));
    size_t np = strlen(prefix), at = 0;
    *count = 0;
    list[0] = '\0';
    for (size_t i = 0; i < sd.count; i++) {
        const char *name = sd.items[i].name;
        if (strncmp(name, prefix, np) != 0 || duet_st_has(weights, name)) continue;
        if (at < size) {
            int n = snprintf(list + at, size - at, "%s%s", *count > 0 ? ", " : "", name);
            at += n > 0 ? (size_t)n : 0;
        }
        (*count)++;
    }
    duet_named_tensors_clear(&sd);
    return DUET_OK;
}

int duet_checkpoint_require(const duet_st *ckpt, duet_module *model, const char *prefix) {
    char list[1024];
    size_t count = 0;
    DUET_TRY(missing_required(ckpt, model, prefix, list, sizeof list, &count));
    if (count == 0) return DUET_OK;
    return duet__error(DUET_ENOTFOUND, "%s lacks %zu weight%s the model needs (%s*): %s%s; is "
                       "it a checkpoint of this model?", duet_st_path(ckpt), count,
                       count == 1 ? "" : "s", prefix, list,
                       strlen(list) >= sizeof list - 1 ? "..." : "");
}

int duet_checkpoint_load_model(const duet_st *ckpt, duet_module *model, bool strict,
                               const char *require_prefix, size_t *nmissing,
                               size_t *nunexpected) {
    const char *path = duet_st_path(ckpt);
    /* Neither optimizer states nor a model's own state ("state.", written
     * by its save_state hook) are weights. */
    duet_st *no_opt = NULL, *weights = NULL;
    DUET_TRY(duet_st_view_without(ckpt, CKPT_OPT_PREFIX, &no_opt));
    int vrc = duet_st_view_without(no_opt, DUET_MODEL_STATE_PREFIX, &weights);
    duet_st_destroy(no_opt); /* the view shares the file, not the entries */
    DUET_TRY(vrc);
    int rc = DUET_OK;
    if (!strict && require_prefix != NULL && require_prefix[0] != '\0')
        rc = duet_checkpoint_require(weights, model, require_prefix);
    if (rc == DUET_OK) {
        rc = duet_module_load_state(model, weights, "", strict, nmissing, nunexpected);
        if (rc != DUET_OK) duet__error_context(rc, "%s", path);
    }
    duet_st_destroy(weights);
    return rc;
}

/* Whether opts names the optimizer whose state entry is `entry`
 * ("optimizer.<name>.<rest>"). */
static bool entry_in_opts(const char *entry, const duet_named_optimizer *opts, size_t nopts) {
    const char *name = entry + strlen(CKPT_OPT_PREFIX);
    const char *dot = strchr(name, '.');
    size_t len = dot != NULL ? (size_t)(dot - name) : strlen(name);
    for (size_t i = 0; i < nopts; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0) return true;
    return false;
}

int duet_checkpoint_load_optimizers(const duet_st *ckpt, const duet_named_optimizer *opts,
                                    size_t nopts, bool strict) {
    const char *path = duet_st_path(ckpt);
    DUET_TRY(check_opts(path, opts, nopts));
    /* Check presence of every state before loading any. */
    for (size_t i = 0; i < nopts; i++) {
        char key[CKPT_NAME_MAX + 32];
        snprintf(key, sizeof key, CKPT_OPT_PREFIX "%s.step", opts[i].name);
        if (!duet_st_has(ckpt, key))
            return duet__error(DUET_ENOTFOUND, "%s has no state for optimizer '%s' (no '%s'): "
                               "was it saved without optimizers (save_optimizer = false), or "
                               "for another model?", path, opts[i].name, key);
    }
    if (strict) {
        size_t n = duet_st_count(ckpt);
        for (size_t i = 0; i < n; i++) {
            const char *e = duet_st_name(ckpt, i);
            if (strncmp(e, CKPT_OPT_PREFIX, strlen(CKPT_OPT_PREFIX)) == 0 &&
                !entry_in_opts(e, opts, nopts))
                return duet__error(DUET_ENOTFOUND, "%s holds '%s', the state of an optimizer "
                                   "this model does not have: is it a checkpoint of another "
                                   "model?", path, e);
        }
    }
    for (size_t i = 0; i < nopts; i++) {
        char prefix[CKPT_NAME_MAX + 16];
        opt_prefix(prefix, sizeof prefix, opts[i].name);
        int rc = duet_optimizer_load_state(opts[i].opt, ckpt, prefix);
        if (rc != DUET_OK)
            return duet__error_context(rc, "%s: optimizer '%s'", path, opts[i].name);
    }
    return DUET_OK;
}

int duet_checkpoint_resume(const char *path, duet_module *model,
                           const duet_named_optimizer *opts, size_t nopts, duet_st **ckpt_out) {
    if (ckpt_out != NULL) *ckpt_out = NULL;
    duet_st *ck = NULL;
    DUET_TRY(duet_st_load(path, &ck));
    duet__checkpoint_note_unchecked(ck);
    int rc = DUET_OK;
    /* Optimizer presence first: a checkpoint without them changes nothing. */
    for (size_t i = 0; i < nopts && rc == DUET_OK; i++) {
        char key[CKPT_NAME_MAX + 32];
        if (!valid_opt_name(opts[i].name)) break; /* load_optimizers reports it */
        snprintf(key, sizeof key, CKPT_OPT_PREFIX "%s.step", opts[i].name);
        if (!duet_st_has(ck, key))
            rc = duet__error(DUET_ENOTFOUND, "%s has no state for optimizer '%s' (no '%s'): "
                             "it cannot be resumed from; use it as load_from", path,
                             opts[i].name, key);
    }
    if (rc == DUET_OK) rc = duet_checkpoint_load_model(ck, model, true, NULL, NULL, NULL);
    if (rc == DUET_OK) rc = duet_checkpoint_load_optimizers(ck, opts, nopts, true);
    if (rc != DUET_OK || ckpt_out == NULL) duet_st_destroy(ck);
    else *ckpt_out = ck;
    return rc;
}

int duet_checkpoint_load_weights(const char *path, duet_module *model, bool strict,
                                 const char *require_prefix, size_t *nmissing,
                                 size_t *nunexpected) {
    duet_st *ck = NULL;
    DUET_TRY(duet_st_load(path, &ck));
    duet__checkpoint_note_unchecked(ck);
    int rc = duet_checkpoint_load_model(ck, model, strict, require_prefix, nmissing, nunexpected);
    duet_st_destroy(ck);
    return rc;
}

static int meta_text(const duet_st *ckpt, const char *key, const char **v) {
    *v = duet_st_meta(ckpt, key);
    if (*v == NULL)
        return duet__error(DUET_ENOTFOUND, "%s has no metadata '%s': not a duet training "
                           "checkpoint (use it as load_from)", duet_st_path(ckpt), key);
    return DUET_OK;
}

int duet_checkpoint_meta_int(const duet_st *ckpt, const char *key, int64_t *out) {
    const char *v;
    DUET_TRY(meta_text(ckpt, key, &v));
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0)
        return duet__error(DUET_EFORMAT, "%s: metadata '%s' is '%s', not a 64-bit integer",
                           duet_st_path(ckpt), key, v);
    *out = (int64_t)x;
    return DUET_OK;
}

int duet_checkpoint_meta_uint(const duet_st *ckpt, const char *key, uint64_t *out) {
    const char *v;
    DUET_TRY(meta_text(ckpt, key, &v));
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || v[0] == '-')
        return duet__error(DUET_EFORMAT, "%s: metadata '%s' is '%s', not an unsigned 64-bit "
                           "integer", duet_st_path(ckpt), key, v);
    *out = (uint64_t)x;
    return DUET_OK;
}
