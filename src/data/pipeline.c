/* The pipeline engine: the table of transforms (one row each), the reader
 * of a config's `pipeline` list into steps (unknown types refused by name,
 * with the closest known one), keyed samples, running the steps, and the
 * rows that load images and format the sample (LoadImageFromFile,
 * LoadPairedImageFromFile, ImageToTensor, ToTensor, Collect). The other
 * rows are in transforms.c and inpainting.c. */
#include "data/pipeline.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- the table ------------------------------------------------------------------ */

static const duet__transform *const transforms[] = {
    &duet__t_load_image,  &duet__t_load_paired,      &duet__t_load_mask,
    &duet__t_resize,      &duet__t_crop,             &duet__t_fixed_crop,
    &duet__t_paired_random_crop, &duet__t_flip,      &duet__t_transpose,
    &duet__t_rescale,     &duet__t_normalize,        &duet__t_masked_image,
    &duet__t_image_to_tensor, &duet__t_to_tensor,    &duet__t_collect,
};
#define NTRANSFORMS (sizeof transforms / sizeof transforms[0])

static const char *transform_names[NTRANSFORMS + 1];

const char *const *duet_pipeline_transform_names(void) {
    /* Filled from the table on every call: the same values each time, so
     * concurrent callers write what is already there. */
    for (size_t i = 0; i < NTRANSFORMS; i++) transform_names[i] = transforms[i]->name;
    transform_names[NTRANSFORMS] = NULL;
    return transform_names;
}

static const duet__transform *find_transform(const char *name) {
    for (size_t i = 0; i < NTRANSFORMS; i++)
        if (strcmp(transforms[i]->name, name) == 0) return transforms[i];
    return NULL;
}

/* "'type' = "Blurr" is not a transform duet has (did you mean 'Blur'?;
 * known: ...)", at the entry's line. */
static int unknown_transform(duet_config *c, const char *type) {
    const char *best = NULL;
    size_t best_d = strlen(type) / 3 > 2 ? strlen(type) / 3 : 2;
    duet__str list = {0};
    for (size_t i = 0; i < NTRANSFORMS; i++) {
        size_t d = duet__edit_distance(type, transforms[i]->name);
        if (d <= best_d) best = transforms[i]->name, best_d = d;
        duet__str_add_item(&list, ", ", "%s", transforms[i]->name);
    }
    int rc = list.failed ? duet__error(DUET_ENOMEM, "pipeline: out of memory")
                         : duet_config_error(c, "type", "'type' = \"%s\" is not a pipeline "
                                             "transform duet has%s%s%s (known: %s)", type,
                                             best ? " (did you mean '" : "", best ? best : "",
                                             best ? "'?)" : "", list.s);
    duet__str_free(&list);
    return rc;
}

/* ---- read-time state --------------------------------------------------------------- */

int duet__pipe_bad(duet_config *c, const char *key, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return duet_config_error(c, key, "'%s' %s", key, msg);
}

duet__pkey_state *duet__pipe_state(duet__pipe_read *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->k[i].key, key) == 0) return &r->k[i];
    return NULL;
}

int duet__pipe_state_add(duet__pipe_read *r, duet_config *c, const char *at, const char *key,
                         duet__pkey_state **out) {
    if (duet__pipe_state(r, key) != NULL)
        return duet__pipe_bad(c, at, "= \"%s\": '%s' is loaded twice", key, key);
    if (r->n == DUET__PIPE_MAX_ENTRIES || strlen(key) >= DUET__PIPE_KEY_LEN)
        return duet__pipe_bad(c, at, "= \"%s\": too many keys, or a name too long", key);
    duet__pkey_state *k = &r->k[r->n++];
    memset(k, 0, sizeof *k);
    snprintf(k->key, sizeof k->key, "%s", key);
    k->is_image = true;
    *out = k;
    return DUET_OK;
}

static bool is_optional(const duet__pipe_read *r, const char *key) {
    return r->spec->optional_key != NULL && strcmp(r->spec->optional_key, key) == 0;
}

int duet__pipe_read_keys(duet_config *c, duet__pipe_read *r, duet__step *st, int max) {
    const char *names[DUET__PIPE_MAX_KEYS + 1];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(c, "keys", names, DUET__PIPE_MAX_KEYS + 1, &n));
    if (n == 0 || (int)n > max)
        return duet__pipe_bad(c, "keys", "must name 1 to %d keys", max);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return duet__pipe_bad(c, "keys", "names \"%s\" twice", names[i]);
        if (duet__pipe_state(r, names[i]) == NULL && !is_optional(r, names[i]))
            return duet__pipe_bad(c, "keys", "names '%s': '%s' is not loaded by an earlier step",
                                  names[i], names[i]);
        snprintf(st->keys[i], DUET__PIPE_KEY_LEN, "%s", names[i]);
    }
    st->nkeys = (int)n;
    return DUET_OK;
}

int duet__pipe_need_images(const duet__pipe_read *r, const duet__step *st, bool u8_only,
                           const char *what) {
    for (int i = 0; i < st->nkeys; i++) {
        const duet__pkey_state *k = duet__pipe_state((duet__pipe_read *)r, st->keys[i]);
        if (k == NULL) continue; /* the optional key, absent */
        if (!k->is_image)
            return duet__error(DUET_ECONFIG, "%s: '%s' is not an image", st->where, k->key);
        if (k->tensor)
            return duet__error(DUET_ECONFIG, "%s: '%s' is already a tensor (ImageToTensor comes "
                               "after the image steps)", st->where, k->key);
        if (u8_only && k->is_float)
            return duet__error(DUET_EUNSUPPORTED, "%s: duet %s 8-bit images only: put it "
                               "before RescaleToZeroOne and Normalize", st->where, what);
    }
    return DUET_OK;
}

int duet__pipe_opts(duet__step *st, size_t size) {
    st->opts = calloc(1, size);
    if (st->opts == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", st->where);
    return DUET_OK;
}

int duet__pipe_string_in(duet_config *c, const char *key, const char *def,
                         const char *const *allowed, const char **out) {
    DUET_TRY(duet_config_get_string_or(c, key, def, out));
    duet__str list = {0};
    for (const char *const *a = allowed; *a != NULL; a++) {
        if (strcmp(*a, *out) == 0) {
            duet__str_free(&list);
            return DUET_OK;
        }
        duet__str_add_item(&list, ", ", "\"%s\"", *a);
    }
    int rc = duet__pipe_bad(c, key, "= \"%s\" is not supported (duet has %s)", *out,
                            duet__str_get(&list));
    duet__str_free(&list);
    return rc;
}

int duet__pipe_int_pair(duet_config *c, const char *key, int64_t def, int64_t lo, bool pair_only,
                        int64_t v[2]) {
    if (!duet_config_has(c, key)) {
        v[0] = v[1] = def;
        return DUET_OK;
    }
    int kind = duet_config_kind(c, key);
    if (kind == DUET_CONFIG_INT && !pair_only) {
        DUET_TRY(duet_config_get_int_in(c, key, lo, 16384, &v[0]));
        v[1] = v[0];
        return DUET_OK;
    }
    if (kind == DUET_CONFIG_FLOAT)
        return duet__pipe_bad(c, key, "must be two integers [a, b] (a scale factor is not "
                              "supported)");
    double d[3];
    size_t n = 0;
    DUET_TRY(duet_config_get_double_array(c, key, d, 3, &n));
    if (n != 2) return duet__pipe_bad(c, key, "must be two integers [a, b]");
    for (int i = 0; i < 2; i++) {
        if (d[i] != (double)(int64_t)d[i] || d[i] < (double)lo || d[i] > 16384)
            return duet__pipe_bad(c, key, "must hold integers in the range the step allows "
                                  "(>= %lld, at most 16384)", (long long)lo);
        v[i] = (int64_t)d[i];
    }
    return DUET_OK;
}

/* ---- reading a list ------------------------------------------------------------------ */

static void free_steps(duet_pipeline *p) {
    for (size_t i = 0; i < p->n; i++) {
        duet__step *st = &p->steps[i];
        if (st->t != NULL && st->t->free_opts != NULL) st->t->free_opts(st->opts);
        else free(st->opts);
    }
    p->n = 0;
}

void duet_pipeline_destroy(duet_pipeline *p) {
    if (p == NULL || --p->refs > 0) return;
    free_steps(p);
    free(p);
}

duet_pipeline *duet__pipeline_retain(const duet_pipeline *p) {
    duet_pipeline *q = (duet_pipeline *)p;
    q->refs++;
    return q;
}

size_t duet_pipeline_length(const duet_pipeline *p) { return p->n; }

const char *duet_pipeline_step_type(const duet_pipeline *p, size_t i) {
    return i < p->n ? p->steps[i].t->name : NULL;
}

const duet__step *duet__pipeline_find(const duet_pipeline *p, const duet__transform *t) {
    for (size_t i = 0; i < p->n; i++)
        if (p->steps[i].t == t) return &p->steps[i];
    return NULL;
}

/* The spec's strings copied into p, so a pipeline outlives the caller's. */
static int copy_spec(duet_pipeline *p, const duet_pipeline_spec *spec) {
    p->spec = *spec;
    snprintf(p->spec_dataset, sizeof p->spec_dataset, "%s", spec->dataset ? spec->dataset : "");
    p->spec.dataset = p->spec_dataset;
    /* path_keys, then pair_key, optional_key: into spec_keys */
    int n = 0;
    for (int i = 0; i < 4 && spec->path_keys[i] != NULL; i++, n++) {
        snprintf(p->spec_keys[n], DUET__PIPE_KEY_LEN, "%s", spec->path_keys[i]);
        p->spec.path_keys[i] = p->spec_keys[n];
    }
    if (spec->pair_key != NULL) {
        snprintf(p->spec_keys[n], DUET__PIPE_KEY_LEN, "%s", spec->pair_key);
        p->spec.pair_key = p->spec_keys[n++];
    }
    if (spec->optional_key != NULL) {
        snprintf(p->spec_keys[n], DUET__PIPE_KEY_LEN, "%s", spec->optional_key);
        p->spec.optional_key = p->spec_keys[n++];
    }
    /* load_hint and db_paths are read while reading only. */
    p->spec.load_hint = NULL;
    for (int i = 0; i < 4; i++) p->spec.db_paths[i] = NULL;
    return DUET_OK;
}

static int read_list(duet_config *d, const char *path, const duet_pipeline_spec *spec,
                     duet_pipeline *p) {
    if (duet_config_kind(d, "pipeline") != DUET_CONFIG_LIST)
        return duet_config_error(d, "pipeline", "%s.pipeline must be a list of steps ( {type = "
                                 "\"...\"; ...}, ... ) as in MMEditing's configs", path);
    size_t n = 0;
    DUET_TRY(duet_config_length(d, "pipeline", &n));
    if (n == 0 || n > DUET__PIPE_MAX_STEPS)
        return duet_config_error(d, "pipeline", "%s.pipeline has %zu steps (1 to %d)", path, n,
                                 DUET__PIPE_MAX_STEPS);
    duet__pipe_read r;
    memset(&r, 0, sizeof r);
    r.spec = spec;
    for (size_t i = 0; i < n; i++) {
        char key[32]; /* "pipeline.[i]": 12 characters and a size_t's 20 digits at most */
        snprintf(key, sizeof key, "pipeline.[%zu]", i);
        duet_config *c = NULL;
        DUET_TRY(duet_config_sub(d, key, &c));
        duet__step *st = &p->steps[i];
        const char *type = NULL;
        char *where = NULL;
        int rc = duet_config_get_string(c, "type", &type);
        if (rc == DUET_OK) rc = duet_config_where(c, "type", &where);
        if (rc == DUET_OK) {
            duet__label_set(st->where, sizeof st->where, "%s: %s.%s (%s)", where, path, key, type);
            st->t = find_transform(type);
            if (st->t == NULL) rc = unknown_transform(c, type);
        }
        free(where);
        if (rc == DUET_OK && r.collected && st->t != &duet__t_image_to_tensor &&
            st->t != &duet__t_to_tensor)
            rc = duet__error(DUET_ECONFIG, "%s: only ImageToTensor and ToTensor may follow "
                             "Collect", st->where);
        if (rc == DUET_OK) {
            p->n = i + 1; /* its options are freed with the pipeline from here on */
            rc = st->t->read(c, &r, st);
        }
        duet_config_destroy(c);
        DUET_TRY(rc);
    }
    memcpy(p->final, r.k, sizeof r.k);
    p->nfinal = r.n;
    const char *last = p->steps[n - 1].where;
    if (spec->require_collect && !r.has_collect)
        return duet__error(DUET_ECONFIG, "%s: the pipeline must end with Collect (keys = "
                           "[...]), which names the sample's tensors", last);
    const duet__step *col = duet__pipeline_find(p, &duet__t_collect);
    for (int i = 0; col != NULL && i < col->nkeys; i++) {
        const duet__pkey_state *k = duet__pipe_state(&r, col->keys[i]);
        if (k != NULL && !k->tensor)
            return duet__error(DUET_ECONFIG, "%s: Collect takes '%s', which no %s step "
                               "converted", col->where, k->key,
                               k->is_image ? "ImageToTensor" : "ToTensor");
    }
    return DUET_OK;
}

static int pipeline_new(const duet_pipeline_spec *spec, duet_pipeline **out) {
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return duet__error(DUET_ENOMEM, "pipeline: out of memory");
    (*out)->refs = 1;
    return copy_spec(*out, spec);
}

int duet_pipeline_read(duet_config *group, const char *path, const duet_pipeline_spec *spec,
                       duet_pipeline **out) {
    duet_pipeline *p = NULL;
    *out = NULL;
    DUET_TRY(pipeline_new(spec, &p));
    /* the readers see the caller's spec (its hints and LMDB paths) */
    int rc = read_list(group, path, spec, p);
    if (rc != DUET_OK) {
        duet_pipeline_destroy(p);
        return rc;
    }
    *out = p;
    return DUET_OK;
}

int duet_pipeline_parse(const char *text, const char *name, const duet_pipeline_spec *spec,
                        duet_pipeline **out) {
    *out = NULL;
    char *doc = duet__strf("pipeline = %s;\n", text);
    if (doc == NULL) return duet__error(DUET_ENOMEM, "pipeline: out of memory");
    duet_config *cfg = NULL;
    int rc = duet_config_load_string(doc, name, &cfg);
    free(doc);
    if (rc == DUET_OK) rc = duet_pipeline_read(cfg, name, spec, out);
    if (rc == DUET_OK) rc = duet_config_check_unused(cfg);
    if (rc != DUET_OK) {
        duet_pipeline_destroy(*out);
        *out = NULL;
    }
    duet_config_destroy(cfg);
    return rc;
}

/* ---- samples ------------------------------------------------------------------------- */

void duet__pimage_free(duet__pimage *m) {
    if (m->owned) free(m->u8);
    free(m->f);
    memset(m, 0, sizeof *m);
}

void duet__psample_clear(duet__psample *s) {
    for (int i = 0; i < s->n; i++) duet__pimage_free(&s->e[i].im);
    s->n = 0;
}

duet__pentry *duet__psample_get(duet__psample *s, const char *key) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].key, key) == 0) return &s->e[i];
    return NULL;
}

int duet__psample_put(duet__psample *s, const char *key, duet__pentry **out) {
    duet__pentry *e = duet__psample_get(s, key);
    if (e == NULL) {
        if (s->n == DUET__PIPE_MAX_ENTRIES)
            return duet__error(DUET_EINVAL, "pipeline: more than %d keys in a sample",
                               DUET__PIPE_MAX_ENTRIES);
        e = &s->e[s->n++];
    } else {
        duet__pimage_free(&e->im);
    }
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    *out = e;
    return DUET_OK;
}

int duet__pimage_own(duet__pimage *m, const char *what) {
    if (m->u8 == NULL || m->owned) return DUET_OK;
    size_t n = (size_t)(m->h * m->w * m->c);
    uint8_t *d = malloc(n ? n : 1);
    if (d == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    memcpy(d, m->u8, n);
    m->u8 = d;
    m->owned = true;
    return DUET_OK;
}

int duet__pimage_realize_swap(duet__pimage *m, const char *what) {
    if (!m->swap) return DUET_OK;
    DUET_TRY(duet__pimage_own(m, what));
    int64_t n = m->h * m->w;
    for (int64_t i = 0; i < n; i++) {
        if (m->u8) {
            uint8_t v = m->u8[i * 3];
            m->u8[i * 3] = m->u8[i * 3 + 2];
            m->u8[i * 3 + 2] = v;
        } else {
            float v = m->f[i * 3];
            m->f[i * 3] = m->f[i * 3 + 2];
            m->f[i * 3 + 2] = v;
        }
    }
    m->swap = false;
    return DUET_OK;
}

int duet__pimage_to_float(duet__pimage *m, const char *what) {
    DUET_TRY(duet__pimage_realize_swap(m, what));
    if (m->f != NULL) return DUET_OK;
    int64_t n = m->h * m->w * m->c;
    m->f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (m->f == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    /* astype(np.float32), then / 255. as RescaleToZeroOne does */
    if (m->unit)
        for (int64_t i = 0; i < n; i++) m->f[i] = (float)m->u8[i] / 255.0f;
    else
        for (int64_t i = 0; i < n; i++) m->f[i] = (float)m->u8[i];
    if (m->owned) free(m->u8);
    m->u8 = NULL;
    m->owned = false;
    m->unit = false;
    return DUET_OK;
}

int duet__pimage_crop(duet__pimage *m, int64_t x, int64_t y, int64_t cw, int64_t ch,
                      const char *what) {
    size_t es = m->u8 ? 1 : sizeof(float), px = (size_t)m->c * es;
    const uint8_t *src = m->u8 ? m->u8 : (const uint8_t *)m->f;
    uint8_t *dst = malloc((size_t)(cw * ch) * px + 1);
    if (dst == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    for (int64_t r = 0; r < ch; r++)
        memcpy(dst + (size_t)(r * cw) * px, src + (size_t)((y + r) * m->w + x) * px,
               (size_t)cw * px);
    if (m->u8) {
        if (m->owned) free(m->u8);
        m->u8 = dst;
        m->owned = true;
    } else {
        free(m->f);
        m->f = (float *)dst;
    }
    m->h = ch;
    m->w = cw;
    return DUET_OK;
}

/* ---- running ----------------------------------------------------------------------------- */

int duet__pipeline_run(const duet_pipeline *p, duet__psample *s) {
    s->spec = &p->spec;
    for (size_t i = 0; i < p->n; i++) DUET_TRY(p->steps[i].t->apply(&p->steps[i], s));
    return DUET_OK;
}

static int load_into(duet__psample *s, const char *key, const char *path, bool bgr,
                     duet__pentry **out);

int duet__pipeline_run_key(const duet_pipeline *p, const char *key, const char *path,
                           duet__psample *s) {
    s->spec = &p->spec;
    bool collected = false;
    for (size_t i = 0; i < p->n; i++) {
        duet__step st = p->steps[i];
        if (st.t == &duet__t_load_paired || st.t == &duet__t_load_image) {
            /* the file is that image alone: the half of a pair (loaded as
             * LoadPairedImageFromFile loads, in BGR, without the split) or
             * the image of that key */
            bool bgr = st.t == &duet__t_load_paired || *(const bool *)st.opts;
            if (st.t == &duet__t_load_paired || strcmp(st.keys[0], key) == 0)
                DUET_TRY(load_into(s, key, path, bgr, NULL));
            continue;
        }
        bool has = false;
        for (int k = 0; k < st.nkeys; k++) has |= strcmp(st.keys[k], key) == 0;
        if (!has) continue;
        st.nkeys = 1;
        snprintf(st.keys[0], DUET__PIPE_KEY_LEN, "%s", key);
        DUET_TRY(st.t->apply(&st, s));
        if (st.t == &duet__t_collect) collected = true;
    }
    s->nmeta = 0;
    if (!collected)
        return duet__error(DUET_ECONFIG, "%s: the pipeline's Collect does not take '%s', the "
                           "image the model translates", p->n ? p->steps[p->n - 1].where
                                                              : "pipeline", key);
    return DUET_OK;
}

/* An entry as a (1, C, H, W) image or (1, n) vector tensor. */
static int entry_tensor(duet__pentry *e, duet_tensor **out) {
    if (!e->is_image) {
        DUET_TRY(duet_tensor_create(2, (int64_t[]){1, e->nints}, out));
        for (int k = 0; k < e->nints; k++) (*out)->data[k] = (float)e->ints[k];
        return DUET_OK;
    }
    duet__pimage *m = &e->im;
    DUET_TRY(duet__pimage_to_float(m, e->path ? e->path : e->key));
    DUET_TRY(duet_tensor_create(4, (int64_t[]){1, m->c, m->h, m->w}, out));
    /* HWC -> CHW, as ImageToTensor's transpose(2, 0, 1) */
    float *d = (*out)->data;
    const int64_t hw = m->h * m->w;
    for (int64_t i = 0; i < hw; i++)
        for (int c = 0; c < m->c; c++) d[c * hw + i] = m->f[i * m->c + c];
    return DUET_OK;
}

int duet__psample_to_batch(duet__psample *s, const char *const *defaults, bool meta,
                           duet_batch *out) {
    const char *keys[DUET__PIPE_MAX_ENTRIES];
    int n = 0;
    if (s->collected)
        for (int i = 0; i < s->ncollect; i++) keys[n++] = s->collect[i];
    else
        for (int i = 0; defaults != NULL && defaults[i] != NULL; i++) keys[n++] = defaults[i];
    for (int i = 0; i < n; i++) {
        duet__pentry *e = duet__psample_get(s, keys[i]);
        if (e == NULL) continue; /* a key this sample left out (mask_bbox of a mask file) */
        duet_tensor *t = NULL;
        DUET_TRY(entry_tensor(e, &t));
        int rc = duet_batch_add_tensor(out, e->key, t);
        duet_tensor_release(t);
        DUET_TRY(rc);
    }
    for (int i = 0; meta && s->collected && i < s->nmeta; i++) {
        char key[DUET__PIPE_KEY_LEN];
        size_t len = strlen(s->meta[i]);
        snprintf(key, sizeof key, "%.*s", (int)(len - 5), s->meta[i]); /* less "_path" */
        duet__pentry *e = duet__psample_get(s, key);
        const char *v = e && e->path ? e->path : "";
        DUET_TRY(duet_batch_add_meta(out, s->meta[i], 1, &v));
    }
    return DUET_OK;
}

/* ---- LoadImageFromFile, LoadPairedImageFromFile ---------------------------------------- */

typedef struct load_opts {
    bool bgr;
} load_opts;

static const char *const flags[] = {"color", "unchanged", NULL};
static const char *const orders[] = {"bgr", "rgb", NULL};

/* io_backend: "disk", or "lmdb" (with db_path the dataset's LMDB of the key). */
static int read_io_backend(duet_config *c, const duet_pipeline_spec *spec, int slot) {
    static const char *const backends[] = {"disk", "lmdb", NULL};
    const char *s = NULL;
    DUET_TRY(duet__pipe_string_in(c, "io_backend", "disk", backends, &s));
    if (strcmp(s, "disk") == 0) {
        if (spec->lmdb)
            return duet__pipe_bad(c, "io_backend", "is \"disk\", but %s's images are in LMDB: "
                                  "use io_backend = \"lmdb\" with db_path = the dataset's "
                                  "folder", spec->dataset);
        return DUET_OK;
    }
    if (!spec->lmdb)
        return duet__pipe_bad(c, "io_backend", "is \"lmdb\", which reads SRLmdbDataset's keys, "
                              "but %s reads image files: use \"disk\" (docs/div2k.md)",
                              spec->dataset);
    DUET_TRY(duet_config_get_string(c, "db_path", &s));
    const char *want = slot >= 0 ? spec->db_paths[slot] : NULL;
    /* the dataset's folder of the key: gt_folder, lq_folder */
    const char *key = slot >= 0 ? spec->path_keys[slot] : "?";
    if (want == NULL || strcmp(s, want) != 0)
        return duet_config_error(c, "db_path", "'db_path' \"%s\" is not the dataset's "
                                 "%s_folder \"%s\": duet reads %s from there", s, key,
                                 want ? want : "?", key);
    return DUET_OK;
}

static int read_load_image(duet_config *c, duet__pipe_read *r, duet__step *st) {
    const duet_pipeline_spec *spec = r->spec;
    const char *key = NULL, *s = NULL;
    bool keep = false;
    /* MMEditing's default key is 'gt' */
    DUET_TRY(duet_config_get_string_or(c, "key", "gt", &key));
    int slot = -1;
    for (int i = 0; i < 4 && spec->path_keys[i] != NULL; i++)
        if (strcmp(spec->path_keys[i], key) == 0) slot = i;
    if (slot < 0) {
        duet__str list = {0};
        for (int i = 0; i < 4 && spec->path_keys[i] != NULL; i++)
            duet__str_add_item(&list, ", ", "\"%s\"", spec->path_keys[i]);
        int rc = duet__pipe_bad(c, "key", "= \"%s\": %s has no image file of that key%s%s%s%s",
                                key, spec->dataset, list.s ? " (it has " : "",
                                duet__str_get(&list), list.s ? ")" : "",
                                spec->load_hint ? spec->load_hint : "");
        duet__str_free(&list);
        return rc;
    }
    DUET_TRY(read_io_backend(c, spec, slot));
    DUET_TRY(duet__pipe_string_in(c, "flag", "color", flags, &s));
    DUET_TRY(duet_config_get_bool_or(c, "save_original_img", false, &keep)); /* ori_* unused */
    DUET_TRY(duet__pipe_string_in(c, "channel_order", "bgr", orders, &s));
    DUET_TRY(duet__pipe_opts(st, sizeof(load_opts)));
    ((load_opts *)st->opts)->bgr = strcmp(s, "bgr") == 0;
    st->nkeys = 1;
    snprintf(st->keys[0], DUET__PIPE_KEY_LEN, "%s", key);
    duet__pkey_state *k = NULL;
    DUET_TRY(duet__pipe_state_add(r, c, "key", key, &k));
    k->bgr = ((load_opts *)st->opts)->bgr;
    return DUET_OK;
}

/* The file of `key` (path given, or the sample's path of that key). */
static const char *path_of(const duet__psample *s, const char *key) {
    for (int i = 0; i < 4 && s->spec->path_keys[i] != NULL; i++)
        if (strcmp(s->spec->path_keys[i], key) == 0) return s->paths[i];
    if (s->spec->pair_key != NULL && strcmp(s->spec->pair_key, key) == 0) return s->paths[0];
    return NULL;
}

/* Loads `path` into entry `key`, 3 channels, BGR (pending) when asked. */
static int load_into(duet__psample *s, const char *key, const char *path, bool bgr,
                     duet__pentry **out) {
    duet_image *im = NULL;
    bool borrowed = false;
    if (s->io->load != NULL) DUET_TRY(s->io->load(s->io->ctx, key, path, &im, &borrowed));
    else DUET_TRY(duet_image_load_limited(path, s->io->max_pixels, &im));
    duet__pentry *e = NULL;
    int rc = duet__psample_put(s, key, &e);
    if (rc != DUET_OK) {
        if (!borrowed) duet_image_destroy(im);
        return rc;
    }
    e->is_image = true;
    e->path = path;
    e->im.h = im->height;
    e->im.w = im->width;
    e->im.c = im->channels;
    e->im.u8 = im->data;
    e->im.owned = !borrowed;
    /* mmcv.imfrombytes gives BGR; duet decodes RGB */
    e->im.swap = bgr && im->channels == 3;
    e->bgr = bgr;
    if (!borrowed) {
        im->data = NULL; /* taken over */
        duet_image_destroy(im);
    }
    if (out) *out = e;
    return DUET_OK;
}

static int apply_load_image(const duet__step *st, duet__psample *s) {
    const load_opts *o = st->opts;
    return load_into(s, st->keys[0], path_of(s, st->keys[0]), o->bgr, NULL);
}

const duet__transform duet__t_load_image = {
    .name = "LoadImageFromFile", .read = read_load_image, .apply = apply_load_image,
};

static int read_load_paired(duet_config *c, duet__pipe_read *r, duet__step *st) {
    const duet_pipeline_spec *spec = r->spec;
    const char *key = NULL, *s = NULL;
    bool keep = false;
    if (spec->pair_key == NULL)
        return duet__pipe_bad(c, "type", "= \"LoadPairedImageFromFile\" belongs to "
                              "GenerationPairedDataset; %s loads with LoadImageFromFile%s",
                              spec->dataset, spec->load_hint ? spec->load_hint : "");
    DUET_TRY(duet_config_get_string_or(c, "key", "gt", &key));
    if (strcmp(key, spec->pair_key) != 0)
        return duet__pipe_bad(c, "key", "= \"%s\": LoadPairedImageFromFile reads the dataset's "
                              "%s_path: key = \"%s\"", key, spec->pair_key, spec->pair_key);
    DUET_TRY(duet__pipe_string_in(c, "io_backend", "disk", (const char *const[]){"disk", NULL},
                                  &s));
    DUET_TRY(duet__pipe_string_in(c, "flag", "color", flags, &s));
    DUET_TRY(duet_config_get_bool_or(c, "save_original_img", false, &keep));
    DUET_TRY(duet__pipe_opts(st, sizeof(load_opts)));
    ((load_opts *)st->opts)->bgr = true; /* mmcv.imfrombytes' default, whatever channel_order says */
    st->nkeys = 1;
    snprintf(st->keys[0], DUET__PIPE_KEY_LEN, "%s", key);
    /* the pair itself is not kept: only its halves */
    duet__pkey_state *k = NULL;
    DUET_TRY(duet__pipe_state_add(r, c, "key", "img_a", &k));
    k->bgr = true;
    DUET_TRY(duet__pipe_state_add(r, c, "key", "img_b", &k));
    k->bgr = true;
    return DUET_OK;
}

/* LoadPairedImageFromFile: A is the left half, B the right one. */
static int apply_load_paired(const duet__step *st, duet__psample *s) {
    const char *path = path_of(s, st->keys[0]);
    duet__pentry *a = NULL, *b = NULL;
    DUET_TRY(load_into(s, "img_a", path, true, &a));
    if (a->im.w % 2 != 0)
        return duet__error(DUET_ESHAPE, "%s: an A|B pair image needs an even width (A left, B "
                           "right, each half as wide), this one is %lldx%lld (WxH)", path,
                           (long long)a->im.w, (long long)a->im.h);
    int64_t half = a->im.w / 2;
    DUET_TRY(duet__psample_put(s, "img_b", &b));
    a = duet__psample_get(s, "img_a"); /* put may not move entries, but be plain */
    *b = *a;
    snprintf(b->key, sizeof b->key, "img_b");
    b->im.owned = false; /* shares a's pixels until the crops below */
    DUET_TRY(duet__pimage_crop(&b->im, half, 0, half, b->im.h, path));
    return duet__pimage_crop(&a->im, 0, 0, half, a->im.h, path);
}

const duet__transform duet__t_load_paired = {
    .name = "LoadPairedImageFromFile", .read = read_load_paired, .apply = apply_load_paired,
};

/* ---- ImageToTensor, ToTensor, Collect ------------------------------------------------------ */

static int read_to_tensor(duet_config *c, duet__pipe_read *r, duet__step *st, bool image) {
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    if (image) {
        bool f32 = true;
        DUET_TRY(duet_config_get_bool_or(c, "to_float32", true, &f32)); /* duet's are float */
        DUET_TRY(duet__pipe_need_images(r, st, false, "converts"));
    }
    for (int i = 0; i < st->nkeys; i++) {
        duet__pkey_state *k = duet__pipe_state(r, st->keys[i]);
        if (k != NULL) k->tensor = true;
    }
    return DUET_OK;
}

static int read_image_to_tensor(duet_config *c, duet__pipe_read *r, duet__step *st) {
    return read_to_tensor(c, r, st, true);
}

static int read_plain_to_tensor(duet_config *c, duet__pipe_read *r, duet__step *st) {
    return read_to_tensor(c, r, st, false);
}

/* The values turn float when the batch is made (duet__psample_to_batch). */
static int apply_nothing(const duet__step *st, duet__psample *s) {
    (void)st, (void)s;
    return DUET_OK;
}

const duet__transform duet__t_image_to_tensor = {
    .name = "ImageToTensor", .read = read_image_to_tensor, .apply = apply_nothing,
};

const duet__transform duet__t_to_tensor = {
    .name = "ToTensor", .read = read_plain_to_tensor, .apply = apply_nothing,
};

typedef struct collect_opts {
    char meta[DUET__PIPE_MAX_KEYS][DUET__PIPE_KEY_LEN];
    int nmeta;
} collect_opts;

static int read_collect(duet_config *c, duet__pipe_read *r, duet__step *st) {
    if (r->has_collect)
        return duet__error(DUET_ECONFIG, "%s: a second Collect", st->where);
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(collect_opts)));
    collect_opts *o = st->opts;
    if (duet_config_has(c, "meta_keys")) {
        const char *mk[DUET__PIPE_MAX_KEYS + 1];
        size_t n = 0;
        DUET_TRY(duet_config_get_string_array(c, "meta_keys", mk, DUET__PIPE_MAX_KEYS + 1, &n));
        if (n > DUET__PIPE_MAX_KEYS)
            return duet__pipe_bad(c, "meta_keys", "names more than %d keys", DUET__PIPE_MAX_KEYS);
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(mk[i]);
            char key[DUET__PIPE_KEY_LEN] = "";
            if (len > 5 && len < DUET__PIPE_KEY_LEN && strcmp(mk[i] + len - 5, "_path") == 0)
                snprintf(key, sizeof key, "%.*s", (int)(len - 5), mk[i]);
            if (key[0] == '\0' || (duet__pipe_state(r, key) == NULL && !is_optional(r, key)))
                return duet__pipe_bad(c, "meta_keys", "names \"%s\": duet's meta keys are the "
                                      "files of the loaded images (<key>_path)", mk[i]);
            snprintf(o->meta[o->nmeta++], DUET__PIPE_KEY_LEN, "%s", mk[i]);
        }
    }
    r->collected = r->has_collect = true;
    return DUET_OK;
}

static int apply_collect(const duet__step *st, duet__psample *s) {
    const collect_opts *o = st->opts;
    s->collected = true;
    s->ncollect = st->nkeys;
    for (int i = 0; i < st->nkeys; i++) memcpy(s->collect[i], st->keys[i], DUET__PIPE_KEY_LEN);
    s->nmeta = o->nmeta;
    for (int i = 0; i < s->nmeta; i++) memcpy(s->meta[i], o->meta[i], DUET__PIPE_KEY_LEN);
    return DUET_OK;
}

const duet__transform duet__t_collect = {
    .name = "Collect", .read = read_collect, .apply = apply_collect,
};
