/* The module tree: registration of parameters, buffers and children, dotted
 * PyTorch names, modes, gradients, and state dicts in safetensors files. */
#include "duet/nn.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

/* The module's layout is private to this file: other code reads a module
 * through the accessors of nn.h. */
typedef struct duet_module_entry {
    char *name;           /* own name inside the parent module, owned */
    duet_tensor *tensor;  /* one reference held by the module */
    bool is_integer;      /* buffer holding a count (num_batches_tracked): I64 on disk */
} duet_module_entry;

typedef struct duet_module_slot {
    char *name;
    duet_module *module;  /* owned */
} duet_module_slot;

struct duet_module {
    const duet_module_type *type;
    void *impl;           /* the type's state, freed by type->destroy */
    bool training;
    /* A transparent module (a DDP around a child) contributes no path
     * component: "generator.module.conv.weight" reads "generator.conv.weight". */
    bool transparent;
    size_t nparams, nbuffers, nchildren;
    duet_module_entry *params;
    duet_module_entry *buffers;
    duet_module_slot *children;
};

/* ---- creation and registration ------------------------------------------- */

int duet_module_create(const duet_module_type *type, void *impl, duet_module **out) {
    *out = NULL;
    DUET_ASSERT(type != NULL);
    duet_module *m = calloc(1, sizeof *m);
    if (m == NULL) {
        if (type->destroy != NULL && impl != NULL) type->destroy(impl);
        return duet__error(DUET_ENOMEM, "module %s: out of memory", type->name);
    }
    m->type = type;
    m->impl = impl;
    m->training = true;
    *out = m;
    return DUET_OK;
}

void duet_module_destroy(duet_module *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < m->nchildren; i++) {
        duet_module_destroy(m->children[i].module);
        free(m->children[i].name);
    }
    for (size_t i = 0; i < m->nparams; i++) {
        duet_tensor_release(m->params[i].tensor);
        free(m->params[i].name);
    }
    for (size_t i = 0; i < m->nbuffers; i++) {
        duet_tensor_release(m->buffers[i].tensor);
        free(m->buffers[i].name);
    }
    free(m->children);
    free(m->params);
    free(m->buffers);
    if (m->type->destroy != NULL && m->impl != NULL) m->type->destroy(m->impl);
    free(m);
}

static bool name_taken(const duet_module *m, const char *name) {
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return true;
    for (size_t i = 0; i < m->nbuffers; i++)
        if (strcmp(m->buffers[i].name, name) == 0) return true;
    for (size_t i = 0; i < m->nchildren; i++)
        if (strcmp(m->children[i].name, name) == 0) return true;
    return false;
}

/* Names are attribute names in PyTorch: unique across parameters, buffers
 * and children of one module, non-empty, without '.'. */
static int check_name(const duet_module *m, const char *what, const char *name) {
    if (name == NULL || name[0] == '\0')
        return duet__error(DUET_EINVAL, "module %s: %s name is empty", m->type->name, what);
    if (strchr(name, '.') != NULL)
        return duet__error(DUET_EINVAL, "module %s: %s name \"%s\" contains '.'; dots separate "
                           "path components", m->type->name, what, name);
    if (name_taken(m, name))
        return duet__error(DUET_EINVAL, "module %s: %s name \"%s\" is already used by a "
                           "parameter, buffer or child of this module", m->type->name, what, name);
    return DUET_OK;
}

static int add_entry(duet_module *m, duet_module_entry **arr, size_t *n, const char *what,
                     const char *name, duet_tensor *t, bool is_integer) {
    if (t == NULL)
        return duet__error(DUET_EINVAL, "module %s: %s \"%s\" is NULL", m->type->name, what,
                           name != NULL ? name : "");
    int rc = check_name(m, what, name);
    if (rc != DUET_OK) {
        duet_tensor_release(t);
        return rc;
    }
    duet_module_entry *grown = realloc(*arr, (*n + 1) * sizeof *grown);
    char *copy = duet__strdup(name);
    if (grown != NULL) *arr = grown;
    if (grown == NULL || copy == NULL) {
        free(copy);
        duet_tensor_release(t);
        return duet__error(DUET_ENOMEM, "module %s: out of memory adding %s \"%s\"",
                           m->type->name, what, name);
    }
    (*arr)[*n] = (duet_module_entry){.name = copy, .tensor = t, .is_integer = is_integer};
    (*n)++;
    return DUET_OK;
}

int duet_module_add_param(duet_module *m, const char *name, duet_tensor *t) {
    if (t != NULL) t->requires_grad = true;
    return add_entry(m, &m->params, &m->nparams, "parameter", name, t, false);
}

int duet_module_add_buffer(duet_module *m, const char *name, duet_tensor *t, bool is_integer) {
    return add_entry(m, &m->buffers, &m->nbuffers, "buffer", name, t, is_integer);
}

int duet_module_add_child(duet_module *m, const char *name, duet_module *child) {
    if (child == NULL)
        return duet__error(DUET_EINVAL, "module %s: child \"%s\" is NULL", m->type->name,
                           name != NULL ? name : "");
    int rc = check_name(m, "child", name);
    if (rc != DUET_OK) {
        duet_module_destroy(child);
        return rc;
    }
    duet_module_slot *grown = realloc(m->children, (m->nchildren + 1) * sizeof *grown);
    char *copy = duet__strdup(name);
    if (grown != NULL) m->children = grown;
    if (grown == NULL || copy == NULL) {
        free(copy);
        duet_module_destroy(child);
        return duet__error(DUET_ENOMEM, "module %s: out of memory adding child \"%s\"",
                           m->type->name, name);
    }
    m->children[m->nchildren++] = (duet_module_slot){.name = copy, .module = child};
    return DUET_OK;
}

duet_module *duet_module_child(const duet_module *m, const char *name) {
    for (size_t i = 0; i < m->nchildren; i++)
        if (strcmp(m->children[i].name, name) == 0) return m->children[i].module;
    return NULL;
}

duet_tensor *duet_module_param(const duet_module *m, const char *name) {
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return m->params[i].tensor;
    return NULL;
}

duet_tensor *duet_module_buffer(const duet_module *m, const char *name) {
    for (size_t i = 0; i < m->nbuffers; i++)
        if (strcmp(m->buffers[i].name, name) == 0) return m->buffers[i].tensor;
    return NULL;
}

int duet_module_replace_child(duet_module *m, const char *name, duet_module *replacement,
                              duet_module **old) {
    *old = NULL;
    if (replacement == NULL)
        return duet__error(DUET_EINVAL, "module %s: replacement for child \"%s\" is NULL",
                           m->type->name, name);
    for (size_t i = 0; i < m->nchildren; i++) {
        if (strcmp(m->children[i].name, name) == 0) {
            *old = m->children[i].module;
            m->children[i].module = replacement;
            return DUET_OK;
        }
    }
    return duet__error(DUET_ENOTFOUND, "module %s: no child named \"%s\" to replace",
                       m->type->name, name);
}

void *duet_module_impl(const duet_module *m) { return m->impl; }

const char *duet_module_type_name(const duet_module *m) { return m->type->name; }

bool duet_module_is_training(const duet_module *m) { return m->training; }

size_t duet_module_child_count(const duet_module *m) { return m->nchildren; }

duet_module *duet_module_child_at(const duet_module *m, size_t i) {
    return i < m->nchildren ? m->children[i].module : NULL;
}

const char *duet_module_child_name_at(const duet_module *m, size_t i) {
    return i < m->nchildren ? m->children[i].name : NULL;
}

void duet_module_swap_children(duet_module *m, size_t i, size_t j) {
    DUET_ASSERT(i < m->nchildren && j < m->nchildren);
    duet_module *t = m->children[i].module;
    m->children[i].module = m->children[j].module;
    m->children[j].module = t;
}

const duet_module_type *duet_module_get_type(const duet_module *m) { return m->type; }
size_t duet_module_param_count(const duet_module *m) { return m->nparams; }
duet_tensor *duet_module_param_at(const duet_module *m, size_t i) {
    return i < m->nparams ? m->params[i].tensor : NULL;
}
const char *duet_module_param_name_at(const duet_module *m, size_t i) {
    return i < m->nparams ? m->params[i].name : NULL;
}
size_t duet_module_buffer_count(const duet_module *m) { return m->nbuffers; }
duet_tensor *duet_module_buffer_at(const duet_module *m, size_t i) {
    return i < m->nbuffers ? m->buffers[i].tensor : NULL;
}
const char *duet_module_buffer_name_at(const duet_module *m, size_t i) {
    return i < m->nbuffers ? m->buffers[i].name : NULL;
}
bool duet_module_buffer_is_integer_at(const duet_module *m, size_t i) {
    return i < m->nbuffers && m->buffers[i].is_integer;
}
void duet_module_set_transparent(duet_module *m, bool transparent) { m->transparent = transparent; }

bool duet_module_is(const duet_module *m, const char *type_name) {
    return m != NULL && strcmp(m->type->name, type_name) == 0;
}

/* ---- forward -------------------------------------------------------------- */

int duet_module_forwardn(duet_module *m, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (m->type->forward == NULL)
        return duet__error(DUET_EUNSUPPORTED, "module %s has no forward", m->type->name);
    for (int i = 0; i < nin; i++)
        if (in[i] == NULL)
            return duet__error(DUET_EINVAL, "module %s: input %d is NULL", m->type->name, i);
    return m->type->forward(m, nin, in, out);
}

int duet_module_forward(duet_module *m, duet_tensor *x, duet_tensor **out) {
    return duet_module_forwardn(m, 1, &x, out);
}

int duet_module_forward2(duet_module *m, duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    duet_tensor *in[2] = {a, b};
    return duet_module_forwardn(m, 2, in, out);
}

/* ---- named lists ----------------------------------------------------------- */

enum { COLLECT_PARAMS = 1, COLLECT_BUFFERS = 2 };

typedef struct collector {
    duet_named_tensors *list;
    size_t cap;
    int what;
    bool trainable_only;
} collector;

static int push_named(collector *c, const char *prefix, const char *name, duet_tensor *t,
                      bool is_integer) {
    duet_named_tensors *l = c->list;
    if (l->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        duet_named_tensor *items = realloc(l->items, cap * sizeof *items);
        if (items == NULL) return duet__error(DUET_ENOMEM, "module: out of memory listing names");
        l->items = items;
        c->cap = cap;
    }
    size_t np = strlen(prefix), nn = strlen(name);
    char *full = malloc(np + nn + 1);
    if (full == NULL) return duet__error(DUET_ENOMEM, "module: out of memory listing names");
    memcpy(full, prefix, np);
    memcpy(full + np, name, nn + 1);
    l->items[l->count++] = (duet_named_tensor){.name = full, .tensor = t, .is_integer = is_integer};
    return DUET_OK;
}

/* PyTorch's order: a module's own parameters, then its own buffers, then
 * each child's entries depth first. `prefix` ends with '.' or is empty. */
static int collect(collector *c, const duet_module *m, const char *prefix) {
    if (c->what & COLLECT_PARAMS)
        for (size_t i = 0; i < m->nparams; i++) {
            if (c->trainable_only && !m->params[i].tensor->requires_grad) continue;
            DUET_TRY(push_named(c, prefix, m->params[i].name, m->params[i].tensor, false));
        }
    if (c->what & COLLECT_BUFFERS)
        for (size_t i = 0; i < m->nbuffers; i++)
            DUET_TRY(push_named(c, prefix, m->buffers[i].name, m->buffers[i].tensor,
                                m->buffers[i].is_integer));
    for (size_t i = 0; i < m->nchildren; i++) {
        const duet_module_slot *ch = &m->children[i];
        if (m->transparent) {
            /* A wrapper (DDP) does not show its child's name in paths. */
            DUET_TRY(collect(c, ch->module, prefix));
            continue;
        }
        size_t np = strlen(prefix), nn = strlen(ch->name);
        char *sub = malloc(np + nn + 2);
        if (sub == NULL) return duet__error(DUET_ENOMEM, "module: out of memory listing names");
        memcpy(sub, prefix, np);
        memcpy(sub + np, ch->name, nn);
        sub[np + nn] = '.';
        sub[np + nn + 1] = '\0';
        int rc = collect(c, ch->module, sub);
        free(sub);
        if (rc != DUET_OK) return rc;
    }
    return DUET_OK;
}

static int collect_list(duet_module *m, int what, bool trainable_only, duet_named_tensors *out) {
    out->count = 0;
    out->items = NULL;
    collector c = {.list = out, .cap = 0, .what = what, .trainable_only = trainable_only};
    int rc = collect(&c, m, "");
    if (rc != DUET_OK) duet_named_tensors_clear(out);
    return rc;
}

int duet_module_named_parameters(duet_module *m, bool trainable_only, duet_named_tensors *out) {
    return collect_list(m, COLLECT_PARAMS, trainable_only, out);
}

int duet_module_named_buffers(duet_module *m, duet_named_tensors *out) {
    return collect_list(m, COLLECT_BUFFERS, false, out);
}

int duet_module_state(duet_module *m, duet_named_tensors *out) {
    return collect_list(m, COLLECT_PARAMS | COLLECT_BUFFERS, false, out);
}

int duet_module_to_device(duet_module *m, duet_device dev) {
    duet_named_tensors st;
    DUET_TRY(duet_module_state(m, &st));
    int rc = DUET_OK;
    for (size_t i = 0; i < st.count && rc == DUET_OK; i++) {
        rc = duet_tensor_move_to(st.items[i].tensor, dev);
        if (rc != DUET_OK) {
            char d[DUET_DEVICE_STR_MAX];
            duet__error_context(rc, "%s: moving %s to %s", m->type->name, st.items[i].name,
                                duet_device_str(dev, d, sizeof d));
        }
    }
    duet_named_tensors_clear(&st);
    return rc;
}

void duet_named_tensors_clear(duet_named_tensors *l) {
    if (l == NULL) return;
    for (size_t i = 0; i < l->count; i++) free(l->items[i].name);
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

static int64_t count_params(const duet_module *m, bool trainable_only) {
    int64_t n = 0;
    for (size_t i = 0; i < m->nparams; i++)
        if (!trainable_only || m->params[i].tensor->requires_grad) n += m->params[i].tensor->numel;
    for (size_t i = 0; i < m->nchildren; i++) n += count_params(m->children[i].module, trainable_only);
    return n;
}

int64_t duet_module_num_parameters(duet_module *m, bool trainable_only) {
    return count_params(m, trainable_only);
}

/* ---- modes and gradients --------------------------------------------------- */

void duet_module_set_requires_grad(duet_module *m, bool requires_grad) {
    for (size_t i = 0; i < m->nparams; i++) m->params[i].tensor->requires_grad = requires_grad;
    for (size_t i = 0; i < m->nchildren; i++)
        duet_module_set_requires_grad(m->children[i].module, requires_grad);
}

void duet_module_train(duet_module *m, bool training) {
    m->training = training;
    for (size_t i = 0; i < m->nchildren; i++) duet_module_train(m->children[i].module, training);
}

void duet_module_zero_grad(duet_module *m) {
    for (size_t i = 0; i < m->nparams; i++) duet_tensor_zero_grad(m->params[i].tensor);
    for (size_t i = 0; i < m->nchildren; i++) duet_module_zero_grad(m->children[i].module);
}

/* ---- state dicts ------------------------------------------------------------ */

static char *join_prefix(const char *prefix, const char *name) {
    size_t np = strlen(prefix), nn = strlen(name);
    char *s = malloc(np + nn + 1);
    if (s == NULL) return NULL;
    memcpy(s, prefix, np);
    memcpy(s + np, name, nn + 1);
    return s;
}

int duet_module_save_state(duet_module *m, duet_st_writer *w, const char *prefix) {
    if (prefix == NULL) prefix = "";
    duet_named_tensors st;
    DUET_TRY(duet_module_state(m, &st));
    int rc = DUET_OK;
    for (size_t i = 0; i < st.count && rc == DUET_OK; i++) {
        char *key = join_prefix(prefix, st.items[i].name);
        if (key == NULL) {
            rc = duet__error(DUET_ENOMEM, "module save: out of memory");
            break;
        }
        const duet_tensor *t = st.items[i].tensor;
        if (st.items[i].is_integer) {
            /* Counts are 0-dim int64 tensors in PyTorch state dicts. */
            float f = 0.0f;
            rc = duet_tensor_item(t, &f);
            int64_t v = (int64_t)f;
            if (rc == DUET_OK) rc = duet_st_writer_add_raw(w, key, "I64", 0, NULL, &v, sizeof v);
        } else {
            rc = duet_st_writer_add(w, key, t);
        }
        if (rc != DUET_OK) rc = duet__error_context(rc, "module save: %s", key);
        free(key);
    }
    duet_named_tensors_clear(&st);
    return rc;
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* Whether the file entry's shape fits t. A count (is_integer) is one value,
 * stored as a 0-dim or a one-element tensor. */
static bool shape_fits(const duet_tensor *t, bool is_integer, int ndim, const int64_t *shape) {
    if (is_integer) {
        int64_t n = 1;
        for (int i = 0; i < ndim; i++) n *= shape[i];
        return n == 1;
    }
    if (ndim != t->ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (shape[i] != t->shape[i]) return false;
    return true;
}

static int read_count(const duet_st *st, const char *key, duet_tensor *dst) {
    const char *dtype;
    const void *bytes;
    size_t nbytes;
    DUET_TRY(duet_st_raw(st, key, &dtype, &bytes, &nbytes, NULL, NULL));
    if (strcmp(dtype, "I64") == 0 && nbytes == 8) {
        int64_t v;
        memcpy(&v, bytes, sizeof v);
        const float f = (float)v;
        return duet_tensor_write_range(dst, 0, 1, &f);
    }
    if (strcmp(dtype, "I32") == 0 && nbytes == 4) {
        int32_t v;
        memcpy(&v, bytes, sizeof v);
        const float f = (float)v;
        return duet_tensor_write_range(dst, 0, 1, &f);
    }
    /* Any other dtype: let the reader convert it. */
    duet_tensor *tmp = NULL;
    float f = 0.0f;
    DUET_TRY(duet_st_get(st, key, &tmp));
    int rc = duet_tensor_read_range(tmp, 0, 1, &f);
    duet_tensor_release(tmp);
    return rc == DUET_OK ? duet_tensor_write_range(dst, 0, 1, &f) : rc;
}

static bool in_state(const duet_named_tensors *l, const char *name) {
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->items[i].name, name) == 0) return true;
    return false;
}

/* What a load found before changing anything. */
typedef struct load_check {
    bool *present; /* per state entry: in the file with a shape that fits */
    duet__str missing, unexpected, mismatch;
    size_t nmiss, nunexp, nmis;
} load_check;

static void load_check_free(load_check *lc) {
    free(lc->present);
    duet__str_free(&lc->missing);
    duet__str_free(&lc->unexpected);
    duet__str_free(&lc->mismatch);
}

/* One state entry against the file: present, missing or a shape mismatch. */
static int check_entry(const duet_named_tensor *item, const duet_st *st, const char *key,
                       load_check *lc, bool *present) {
    if (!duet_st_has(st, key)) {
        duet__str_add_item(&lc->missing, ", ", "%s", key);
        lc->nmiss++;
        return DUET_OK;
    }
    int ndim = 0;
    int64_t shape[DUET_ST_MAX_DIMS];
    DUET_TRY(duet_st_raw(st, key, NULL, NULL, NULL, &ndim, shape));
    if (shape_fits(item->tensor, item->is_integer, ndim, shape)) {
        *present = true;
        return DUET_OK;
    }
    char a[DUET_SHAPE_STR_MAX], b[DUET_SHAPE_STR_MAX];
    shape_str(b, sizeof b, ndim, shape);
    duet__str_add_item(&lc->mismatch, "; ", "%s: the file has %s, the module %s", key, b,
                       duet_shape_str(item->tensor, a, sizeof a));
    lc->nmis++;
    return DUET_OK;
}

/* Every state entry against the file, then the file's entries under prefix
 * that the state lacks. */
static int check_load(const duet_named_tensors *state, const duet_st *st, const char *prefix,
                      load_check *lc) {
    lc->present = calloc(state->count + 1, sizeof *lc->present);
    if (lc->present == NULL) return duet__error(DUET_ENOMEM, "module load: out of memory");
    for (size_t i = 0; i < state->count; i++) {
        char *key = join_prefix(prefix, state->items[i].name);
        if (key == NULL) return duet__error(DUET_ENOMEM, "module load: out of memory");
        int rc = check_entry(&state->items[i], st, key, lc, &lc->present[i]);
        free(key);
        DUET_TRY(rc);
    }
    size_t np = strlen(prefix);
    for (size_t i = 0; i < duet_st_count(st); i++) {
        const char *name = duet_st_name(st, i);
        if (strncmp(name, prefix, np) != 0 || in_state(state, name + np)) continue;
        duet__str_add_item(&lc->unexpected, ", ", "%s", name);
        lc->nunexp++;
    }
    if (lc->missing.failed || lc->unexpected.failed || lc->mismatch.failed)
        return duet__error(DUET_ENOMEM, "module load: out of memory");
    return DUET_OK;
}

/* "a, b.c, b.d" -> "1 under a, 2 under b" (malloc'd; NULL out of memory):
 * the keys counted by their first name, in order of first appearance. */
static char *keys_by_part(const char *list) {
    duet__str out = {0};
    const char *seen_start[16];
    size_t seen_len[16], seen_n[16], nseen = 0, other = 0;
    for (const char *k = list; *k != '\0';) {
        size_t len = strcspn(k, ",");
        size_t head = strcspn(k, ".,");
        size_t i = 0;
        while (i < nseen && !(seen_len[i] == head && strncmp(seen_start[i], k, head) == 0)) i++;
        if (i < nseen) seen_n[i]++;
        else if (nseen < 16) {
            seen_start[nseen] = k;
            seen_len[nseen] = head;
            seen_n[nseen++] = 1;
        } else
            other++;
        k += len;
        while (*k == ',' || *k == ' ') k++;
    }
    for (size_t i = 0; i < nseen; i++)
        duet__str_add_item(&out, ", ", "%zu under %.*s", seen_n[i], (int)seen_len[i],
                           seen_start[i]);
    if (other > 0) duet__str_add_item(&out, ", ", "%zu more", other);
    if (out.failed) {
        duet__str_free(&out);
        return NULL;
    }
    char *r = duet__strdup(duet__str_get(&out));
    duet__str_free(&out);
    return r;
}

/* A shape mismatch, or a missing or unexpected key in a strict load, fails
 * with one message naming every problem (mismatches first); otherwise
 * missing and unexpected keys are warnings. */
static int report_load(const duet_module *m, const char *prefix, bool strict,
                       const load_check *lc) {
    const char *type = m->type->name;
    if (lc->nmis > 0 || (strict && (lc->nmiss > 0 || lc->nunexp > 0))) {
        const char *sep = "";
        duet__str msg = {0};
        duet__str_addf(&msg, "loading %s state%s%s%s: ", type, prefix[0] ? " under " : "", prefix,
                       strict ? " strictly" : "");
        if (lc->nmis > 0) {
            duet__str_addf(&msg, "%zu shape mismatch%s: %s", lc->nmis, lc->nmis == 1 ? "" : "es",
                           duet__str_get(&lc->mismatch));
            sep = "; ";
        }
        if (lc->nmiss > 0) {
            duet__str_addf(&msg, "%s%zu missing key%s [%s]", sep, lc->nmiss,
                           lc->nmiss == 1 ? "" : "s", duet__str_get(&lc->missing));
            sep = "; ";
        }
        if (lc->nunexp > 0)
            duet__str_addf(&msg, "%s%zu unexpected key%s [%s]", sep, lc->nunexp,
                           lc->nunexp == 1 ? "" : "s", duet__str_get(&lc->unexpected));
        if (lc->nmis == 0)
            duet__str_addf(&msg, "; load non-strictly to skip missing and unexpected keys");
        int rc = duet__error(lc->nmis > 0 ? DUET_ESHAPE : DUET_ENOTFOUND, "%s",
                             msg.failed ? "out of memory for the message" : duet__str_get(&msg));
        duet__str_free(&msg);
        return rc;
    }
    /* A count per top-level part in the warning (a partial load_from can
     * miss a whole discriminator: a wall of names says less); the names
     * at DEBUG. */
    if (lc->nmiss > 0) {
        char *parts = keys_by_part(duet__str_get(&lc->missing));
        duet_log(DUET_LOG_WARN, "loading %s state: %zu missing key%s (%s; the names with "
                 "log_level = \"DEBUG\")", type, lc->nmiss, lc->nmiss == 1 ? "" : "s",
                 parts != NULL ? parts : "?");
        duet_log(DUET_LOG_DEBUG, "loading %s state: missing: %s", type,
                 duet__str_get(&lc->missing));
        free(parts);
    }
    if (lc->nunexp > 0) {
        char *parts = keys_by_part(duet__str_get(&lc->unexpected));
        duet_log(DUET_LOG_WARN, "loading %s state: %zu unexpected key%s (%s; the names with "
                 "log_level = \"DEBUG\")", type, lc->nunexp, lc->nunexp == 1 ? "" : "s",
                 parts != NULL ? parts : "?");
        duet_log(DUET_LOG_DEBUG, "loading %s state: unexpected: %s", type,
                 duet__str_get(&lc->unexpected));
        free(parts);
    }
    return DUET_OK;
}

/* Copies the checked entries into the module's tensors. */
static int copy_load(const duet_named_tensors *state, const duet_st *st, const char *prefix,
                     const bool *present) {
    for (size_t i = 0; i < state->count; i++) {
        if (!present[i]) continue;
        char *key = join_prefix(prefix, state->items[i].name);
        if (key == NULL) return duet__error(DUET_ENOMEM, "module load: out of memory");
        int rc = state->items[i].is_integer ? read_count(st, key, state->items[i].tensor)
                                            : duet_st_copy_into(st, key, state->items[i].tensor);
        if (rc != DUET_OK) rc = duet__error_context(rc, "module load: %s", key);
        free(key);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

int duet_module_load_state(duet_module *m, const duet_st *st, const char *prefix, bool strict,
                           size_t *nmissing, size_t *nunexpected) {
    if (prefix == NULL) prefix = "";
    if (nmissing != NULL) *nmissing = 0;
    if (nunexpected != NULL) *nunexpected = 0;
    duet_named_tensors state;
    DUET_TRY(duet_module_state(m, &state));
    /* Check everything first, so that a failing load changes nothing. */
    load_check lc = {0};
    int rc = check_load(&state, st, prefix, &lc);
    if (rc == DUET_OK) rc = report_load(m, prefix, strict, &lc);
    if (rc == DUET_OK) rc = copy_load(&state, st, prefix, lc.present);
    if (rc == DUET_OK) {
        if (nmissing != NULL) *nmissing = lc.nmiss;
        if (nunexpected != NULL) *nunexpected = lc.nunexp;
    }
    load_check_free(&lc);
    duet_named_tensors_clear(&state);
    return rc;
}
