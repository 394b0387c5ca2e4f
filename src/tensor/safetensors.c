/* safetensors files: validating reader (whole file in memory, JSON header
 * through jansson, conversion to float32) and an atomic writer.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON, then the body.
 * Every entry's data_offsets [begin, end) are relative to the body; the
 * entries, sorted by offset, must tile the body exactly (no holes, no
 * overlap), as the reference implementation requires.
 *
 * Checksums. The writer stores, for every tensor, a 64-bit checksum of its
 * bytes in the metadata ("checksum/<name>": 16 hex digits, and
 * "checksum_algorithm": "duet-h64"); the reader verifies them in file order
 * and names the first tensor that fails. duet-h64: h = FNV-1a's offset
 * basis; for each little-endian 8-byte word w, h = (h ^ w) * FNV prime; then
 * each tail byte the same way; then h = (h ^ nbytes) * prime and h ^= h >>
 * 32. Each step is a bijection of h, so any change within one word is
 * always caught. */
#include "duet/tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "duet's safetensors code assumes a little-endian host"
#endif

/* The reference implementation refuses headers over 100 MB. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Dimensions an entry may have in a file (duet tensors use at most 4). */
#define ST_MAX_FILE_DIMS DUET_ST_MAX_DIMS

/* ---- dtypes ------------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t size; /* bytes per element */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},     {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},      {"F64", 8},
};

static const st_dtype *dtype_find(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

/* Converts n elements of `dtype` at src (possibly unaligned) to float32.
 * Returns false for dtypes without a float conversion (F8). */
static bool convert_to_f32(float *dst, const unsigned char *src, const char *dtype, int64_t n) {
#define ST_CONVERT(ctype)                                                       \
    for (int64_t i = 0; i < n; i++) {                                          \
        ctype v;                                                               \
        memcpy(&v, src + (size_t)i * sizeof v, sizeof v);                      \
        dst[i] = (float)v;                                                     \
    }                                                                          \
    return true
    if (strcmp(dtype, "F32") == 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    }
    if (strcmp(dtype, "F16") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * (size_t)i, 2);
            duet_f16_to_f32(&dst[i], &h, 1);
        }
        return true;
    }
    if (strcmp(dtype, "BF16") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * (size_t)i, 2);
            duet_bf16_to_f32(&dst[i], &h, 1);
        }
        return true;
    }
    if (strcmp(dtype, "F64") == 0) { ST_CONVERT(double); }
    if (strcmp(dtype, "I64") == 0) { ST_CONVERT(int64_t); }
    if (strcmp(dtype, "I32") == 0) { ST_CONVERT(int32_t); }
    if (strcmp(dtype, "U8") == 0) { ST_CONVERT(uint8_t); }
    if (strcmp(dtype, "BOOL") == 0) {
        for (int64_t i = 0; i < n; i++) dst[i] = src[i] != 0 ? 1.0f : 0.0f;
        return true;
    }
    if (strcmp(dtype, "I8") == 0) { ST_CONVERT(int8_t); }
    if (strcmp(dtype, "I16") == 0) { ST_CONVERT(int16_t); }
    if (strcmp(dtype, "U16") == 0) { ST_CONVERT(uint16_t); }
    if (strcmp(dtype, "U32") == 0) { ST_CONVERT(uint32_t); }
    if (strcmp(dtype, "U64") == 0) { ST_CONVERT(uint64_t); }
#undef ST_CONVERT
    return false;
}

/* ---- checksums ------------------------------------------------------------ */

#define ST_CK_PREFIX "checksum/"
#define ST_CK_META_PREFIX "checksum_meta/"
#define ST_CK_ALGO_KEY "checksum_algorithm"
#define ST_CK_ALGO "duet-h64"

static uint64_t checksum(const unsigned char *p, size_t n) {
    const uint64_t prime = 0x100000001b3ull;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * prime;
    }
    for (; i < n; i++) h = (h ^ p[i]) * prime;
    h = (h ^ (uint64_t)n) * prime;
    return h ^ (h >> 32);
}

/* A metadata entry's checksum: over "key" NUL "value", so that a value
 * moved to another key fails too. */
static uint64_t meta_checksum(const char *key, const char *value) {
    size_t kn = strlen(key), vn = strlen(value);
    unsigned char *buf = malloc(kn + vn + 1);
    if (buf == NULL) return 0; /* callers treat 0 as "cannot tell" */
    memcpy(buf, key, kn + 1);
    memcpy(buf + kn + 1, value, vn);
    uint64_t h = checksum(buf, kn + vn + 1);
    free(buf);
    return h != 0 ? h : 1;
}

/* Whether a metadata key is one of the checksums themselves. */
static bool is_checksum_key(const char *k) {
    return strncmp(k, ST_CK_PREFIX, strlen(ST_CK_PREFIX)) == 0 ||
           strncmp(k, ST_CK_META_PREFIX, strlen(ST_CK_META_PREFIX)) == 0 ||
           strcmp(k, ST_CK_ALGO_KEY) == 0;
}

/* ---- reader ------------------------------------------------------------- */

typedef struct {
    char *name;
    const st_dtype *dtype;
    int ndim;
    int64_t shape[ST_MAX_FILE_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte offsets in the body */
    size_t json_index;   /* position in the JSON object, to keep sorting stable */
} st_entry;

typedef struct {
    char *key;
    char *value;
} st_meta;

struct duet_st {
    char *path;
    unsigned char *file; /* whole file; body at file + 8 + header_len */
    bool borrowed_file;  /* a view's file belongs to the duet_st it came from */
    const unsigned char *body;
    uint64_t body_len;
    st_entry *entries; /* file order (by data offset) */
    size_t count;
    size_t *by_name; /* entry indices sorted by name, for lookup */
    st_meta *meta;
    size_t meta_count;
};

void duet_st_destroy(duet_st *st) {
    if (st == NULL) return;
    for (size_t i = 0; i < st->count; i++) free(st->entries[i].name);
    for (size_t i = 0; i < st->meta_count; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->entries);
    free(st->by_name);
    free(st->meta);
    if (!st->borrowed_file) duet_aligned_free(st->file);
    free(st->path);
    free(st);
}

static int entry_cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->json_index < y->json_index ? -1 : x->json_index > y->json_index;
}

/* qsort has no context argument in C11: the name index sorts pairs. */
typedef struct {
    const char *name;
    size_t index;
} st_name_ref;

static int name_ref_cmp(const void *a, const void *b) {
    return strcmp(((const st_name_ref *)a)->name, ((const st_name_ref *)b)->name);
}

/* Fills st->by_name: entry indices sorted by name, for binary search. */
static int build_name_index(duet_st *st) {
    st_name_ref *refs = malloc((st->count > 0 ? st->count : 1) * sizeof *refs);
    st->by_name = malloc((st->count > 0 ? st->count : 1) * sizeof *st->by_name);
    if (refs == NULL || st->by_name == NULL) {
        free(refs);
        return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
    }
    for (size_t i = 0; i < st->count; i++) refs[i] = (st_name_ref){st->entries[i].name, i};
    qsort(refs, st->count, sizeof *refs, name_ref_cmp);
    for (size_t i = 0; i < st->count; i++) st->by_name[i] = refs[i].index;
    free(refs);
    return DUET_OK;
}

/* Non-negative JSON integer, else false. */
static bool json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_entry(duet_st *st, const char *name, json_t *info, st_entry *e) {
    const char *path = st->path;
    if (!json_is_object(info))
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' is not an "
                           "object", path, name);
    json_t *jd = json_object_get(info, "dtype");
    json_t *js = json_object_get(info, "shape");
    json_t *jo = json_object_get(info, "data_offsets");
    if (!json_is_string(jd))
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' has no "
                           "string 'dtype'", path, name);
    e->dtype = dtype_find(json_string_value(jd));
    if (e->dtype == NULL)
        return duet__error(DUET_EFORMAT, "%s: entry '%s' has unknown dtype '%s' (known: BOOL, "
                           "U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64, F8_E4M3, "
                           "F8_E5M2)", path, name, json_string_value(jd));
    if (!json_is_array(js))
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' has no "
                           "'shape' array", path, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_FILE_DIMS)
        return duet__error(DUET_EUNSUPPORTED, "%s: entry '%s' has %zu dimensions; duet reads "
                           "at most %d", path, name, nd, ST_MAX_FILE_DIMS);
    e->ndim = (int)nd;
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (!json_u64(json_array_get(js, d), &dim))
            return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' "
                               "dimension %zu is not a non-negative integer", path, name, d);
        e->shape[d] = (int64_t)dim;
        if (dim != 0 && numel > UINT64_MAX / dim / 8) overflow = true;
        numel *= dim;
    }
    if (overflow)
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' shape "
                           "overflows a 64-bit byte count", path, name);
    e->numel = (int64_t)numel;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_u64(json_array_get(jo, 0), &e->begin) || !json_u64(json_array_get(jo, 1), &e->end))
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' needs "
                           "'data_offsets' as [begin, end] non-negative integers", path, name);
    if (e->end < e->begin)
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' has "
                           "data_offsets [%" PRIu64 ", %" PRIu64 "] with end before begin",
                           path, name, e->begin, e->end);
    uint64_t want = numel * e->dtype->size;
    if (e->end - e->begin != want)
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' (%s, %"
                           PRIu64 " elements) needs %" PRIu64 " bytes but data_offsets [%"
                           PRIu64 ", %" PRIu64 "] span %" PRIu64, path, name, e->dtype->name,
                           numel, want, e->begin, e->end, e->end - e->begin);
    if (e->end > st->body_len)
        return duet__error(DUET_EFORMAT, "%s: truncated or corrupt: entry '%s' data_offsets [%"
                           PRIu64 ", %" PRIu64 "] run past the end of the data (%" PRIu64
                           " bytes)", path, name, e->begin, e->end, st->body_len);
    e->name = duet__strdup(name);
    if (e->name == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    return DUET_OK;
}

static int parse_metadata(duet_st *st, json_t *jm) {
    if (!json_is_object(jm))
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: '__metadata__' is not "
                           "an object", st->path);
    size_t n = json_object_size(jm);
    st->meta = calloc(n > 0 ? n : 1, sizeof *st->meta);
    if (st->meta == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
    const char *key;
    json_t *v;
    json_object_foreach(jm, key, v) {
        if (!json_is_string(v))
            return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: metadata '%s' is "
                               "not a string", st->path, key);
        st_meta *m = &st->meta[st->meta_count];
        m->key = duet__strdup(key);
        m->value = duet__strdup(json_string_value(v));
        if (m->key == NULL || m->value == NULL) {
            free(m->key);
            free(m->value);
            return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
        }
        st->meta_count++;
    }
    return DUET_OK;
}

/* Parses and validates the JSON header; fills entries (file order), the name
 * index and metadata. */
static int parse_header(duet_st *st, const char *text, size_t len) {
    const char *path = st->path;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: bad JSON at line %d, "
                           "column %d: %s", path, jerr.line, jerr.column, jerr.text);
    int rc = DUET_OK;
    if (!json_is_object(root)) {
        rc = duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: the JSON is not an "
                         "object", path);
        goto done;
    }
    size_t n = json_object_size(root);
    st->entries = calloc(n > 0 ? n : 1, sizeof *st->entries);
    if (st->entries == NULL) {
        rc = duet__error(DUET_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    const char *key;
    json_t *v;
    size_t pos = 0;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            rc = parse_metadata(st, v);
        } else {
            st_entry *e = &st->entries[st->count];
            e->json_index = pos;
            rc = parse_entry(st, key, v, e);
            if (rc == DUET_OK) st->count++;
        }
        if (rc != DUET_OK) goto done;
        pos++;
    }
    /* File order is data order; the entries must tile the body. */
    qsort(st->entries, st->count, sizeof *st->entries, entry_cmp_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < st->count; i++) {
        const st_entry *e = &st->entries[i];
        if (e->begin != at) {
            if (e->begin < at)
                rc = duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: entry '%s' at "
                                 "[%" PRIu64 ", %" PRIu64 ") overlaps '%s' which ends at %"
                                 PRIu64, path, e->name, e->begin, e->end,
                                 st->entries[i - 1].name, at);
            else
                rc = duet__error(DUET_EFORMAT, "%s: corrupt safetensors header: a hole in the "
                                 "data: bytes [%" PRIu64 ", %" PRIu64 ") before entry '%s' "
                                 "belong to no entry", path, at, e->begin, e->name);
            goto done;
        }
        at = e->end;
    }
    if (at != st->body_len) {
        rc = duet__error(DUET_EFORMAT, "%s: corrupt safetensors file: the entries cover %"
                         PRIu64 " bytes of data but the file has %" PRIu64 " after the "
                         "header", path, at, st->body_len);
        goto done;
    }
    rc = build_name_index(st);
done:
    json_decref(root);
    return rc;
}

bool duet_st_has_checksums(const duet_st *st) { return duet_st_meta(st, ST_CK_ALGO_KEY) != NULL; }

static const st_entry *find(const duet_st *st, const char *name);

/* Every metadata entry (iter, rng_counter, the sampler's position, ...)
 * against its "checksum_meta/<key>"; an entry without one was added, a
 * checksum without its entry means one was removed. Files that record no
 * metadata checksums at all (duet before they existed) pass. */
static int verify_meta_checksums(const duet_st *st) {
    bool any = false;
    for (size_t i = 0; i < st->meta_count && !any; i++)
        any = strncmp(st->meta[i].key, ST_CK_META_PREFIX, strlen(ST_CK_META_PREFIX)) == 0;
    if (!any) return DUET_OK;
    for (size_t i = 0; i < st->meta_count; i++) {
        const char *k = st->meta[i].key;
        if (strncmp(k, ST_CK_META_PREFIX, strlen(ST_CK_META_PREFIX)) == 0) {
            const char *entry = k + strlen(ST_CK_META_PREFIX);
            if (duet_st_meta(st, entry) == NULL)
                return duet__error(DUET_EFORMAT, "%s: corrupt file: the metadata has a checksum "
                                   "for entry '%s', which the file lacks (removed after duet "
                                   "wrote it)", st->path, entry);
            continue;
        }
        if (is_checksum_key(k)) continue;
        duet__str key = {0};
        duet__str_addf(&key, ST_CK_META_PREFIX "%s", k);
        if (key.failed) return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
        const char *want = duet_st_meta(st, duet__str_get(&key));
        duet__str_free(&key);
        char *end = NULL;
        uint64_t w = want != NULL ? strtoull(want, &end, 16) : 0;
        if (want == NULL || strlen(want) != 16 || *end != '\0')
            return duet__error(DUET_EFORMAT, "%s: corrupt file: metadata entry '%s' has %s "
                               "checksum (added or edited after duet wrote the file)", st->path,
                               k, want == NULL ? "no" : "a malformed");
        uint64_t got = meta_checksum(k, st->meta[i].value);
        if (got == 0) return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
        if (got != w)
            return duet__error(DUET_EFORMAT, "%s: corrupt file: metadata entry '%s' = '%.64s' "
                               "fails its checksum (recorded %016" PRIx64 ", computed %016"
                               PRIx64 "); it was changed after duet wrote it, and resuming "
                               "from it would not continue the run that wrote it: use another "
                               "checkpoint (e.g. an earlier iter_N.safetensors)", st->path, k,
                               st->meta[i].value, w, got);
    }
    return DUET_OK;
}

/* Every tensor against its recorded checksum, in file order; a file
 * without "checksum_algorithm" passes (PyTorch's, older duet's). */
static int verify_checksums(const duet_st *st) {
    const char *algo = duet_st_meta(st, ST_CK_ALGO_KEY);
    if (algo == NULL) return DUET_OK;
    if (strcmp(algo, ST_CK_ALGO) != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s: unknown checksum_algorithm '%s' (duet knows "
                           "'%s')", st->path, algo, ST_CK_ALGO);
    for (size_t i = 0; i < st->count; i++) {
        const st_entry *e = &st->entries[i];
        /* The key in full: a long tensor name must not lose its checksum. */
        duet__str key = {0};
        duet__str_addf(&key, ST_CK_PREFIX "%s", e->name);
        if (key.failed) return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
        const char *want = duet_st_meta(st, duet__str_get(&key));
        char *end = NULL;
        uint64_t w = want != NULL ? strtoull(want, &end, 16) : 0;
        if (want == NULL || strlen(want) != 16 || *end != '\0') {
            int rc = duet__error(DUET_EFORMAT, "%s: corrupt checkpoint: tensor '%s' has %s "
                                 "checksum in the metadata (want 16 hex digits under '%s')",
                                 st->path, e->name, want == NULL ? "no" : "a malformed",
                                 duet__str_get(&key));
            duet__str_free(&key);
            return rc;
        }
        duet__str_free(&key);
        uint64_t got = checksum(st->body + e->begin, (size_t)(e->end - e->begin));
        if (got != w)
            return duet__error(DUET_EFORMAT, "%s: corrupt file: tensor '%s' (bytes [%" PRIu64
                               ", %" PRIu64 ") of the data) fails its checksum (recorded %016"
                               PRIx64 ", computed %016" PRIx64 "); the data was changed after "
                               "duet wrote it: use another checkpoint (e.g. an earlier "
                               "iter_N.safetensors)", st->path, e->name, e->begin, e->end, w, got);
    }
    DUET_TRY(verify_meta_checksums(st));
    /* A checksum for a tensor the file lacks: entries were removed. */
    for (size_t i = 0; i < st->meta_count; i++) {
        const char *k = st->meta[i].key;
        if (strncmp(k, ST_CK_PREFIX, strlen(ST_CK_PREFIX)) == 0 &&
            find(st, k + strlen(ST_CK_PREFIX)) == NULL)
            return duet__error(DUET_EFORMAT, "%s: corrupt file: the metadata has a checksum for "
                               "tensor '%s', which the file lacks", st->path,
                               k + strlen(ST_CK_PREFIX));
    }
    return DUET_OK;
}

int duet_st_load(const char *path, duet_st **out) {
    DUET_ASSERT(path != NULL && out != NULL);
    *out = NULL;
    duet_st *st = calloc(1, sizeof *st);
    if (st == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    st->path = duet__strdup(path);
    if (st->path == NULL) {
        free(st);
        return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    }
    size_t nread = 0;
    int rc = duet__read_file(path, &st->file, &nread);
    uint64_t len = nread;
    if (rc != DUET_OK) goto fail;
    if (len < 8) {
        rc = duet__error(DUET_EFORMAT, "%s: not a safetensors file: %" PRIu64 " bytes, shorter "
                         "than the 8-byte header length (truncated?)", path, len);
        goto fail;
    }
    uint64_t hlen;
    memcpy(&hlen, st->file, 8);
    /* A PyTorch checkpoint given where duet wants safetensors (load_from,
     * duet test): torch.save's zip (PK\3\4) or legacy pickle (PROTO 2, then
     * the 10-byte magic number), whose first bytes read as an impossible
     * header length. */
    if ((hlen > ST_MAX_HEADER || hlen > len - 8) &&
        (memcmp(st->file, "PK\3\4", 4) == 0 || memcmp(st->file, "\x80\x02\x8a\x0a", 4) == 0)) {
        rc = duet__error(DUET_EFORMAT, "%s: a PyTorch file (torch.save's %s format), not "
                         "safetensors: convert it first with `python3 scripts/convert-pth.py "
                         "%s` (MMEditing checkpoints and torchvision VGGs; it runs no code from "
                         "the file)", path, st->file[0] == 'P' ? "zip" : "legacy pickle", path);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER || hlen > len - 8) {
        rc = duet__error(DUET_EFORMAT, "%s: not a safetensors file or truncated: the header "
                         "length field says %" PRIu64 " bytes of JSON but the file has %"
                         PRIu64 " bytes after it", path, hlen, len - 8);
        goto fail;
    }
    if (hlen < 2) {
        rc = duet__error(DUET_EFORMAT, "%s: corrupt safetensors file: header length %" PRIu64
                         " is too short for a JSON object", path, hlen);
        goto fail;
    }
    st->body = st->file + 8 + hlen;
    st->body_len = len - 8 - hlen;
    rc = parse_header(st, (const char *)st->file + 8, (size_t)hlen);
    if (rc == DUET_OK) rc = verify_checksums(st);
    if (rc != DUET_OK) goto fail;
    *out = st;
    return DUET_OK;
fail:
    duet_st_destroy(st);
    return rc;
}

int duet_st_view_without(const duet_st *st, const char *prefix, duet_st **out) {
    *out = NULL;
    size_t np = strlen(prefix);
    duet_st *v = calloc(1, sizeof *v);
    if (v == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
    v->borrowed_file = true;
    v->file = st->file;
    v->body = st->body;
    v->body_len = st->body_len;
    v->path = duet__strdup(st->path);
    v->entries = calloc(st->count > 0 ? st->count : 1, sizeof *v->entries);
    v->meta = calloc(st->meta_count > 0 ? st->meta_count : 1, sizeof *v->meta);
    int rc = DUET_OK;
    if (v->path == NULL || v->entries == NULL || v->meta == NULL) goto oom;
    for (size_t i = 0; i < st->count; i++) {
        if (strncmp(st->entries[i].name, prefix, np) == 0) continue;
        st_entry *e = &v->entries[v->count];
        *e = st->entries[i];
        e->name = duet__strdup(e->name);
        if (e->name == NULL) goto oom;
        v->count++;
    }
    for (size_t i = 0; i < st->meta_count; i++) {
        st_meta *m = &v->meta[v->meta_count];
        m->key = duet__strdup(st->meta[i].key);
        m->value = duet__strdup(st->meta[i].value);
        if (m->key == NULL || m->value == NULL) {
            free(m->key);
            free(m->value);
            goto oom;
        }
        v->meta_count++;
    }
    rc = build_name_index(v);
    if (rc != DUET_OK) goto fail;
    *out = v;
    return DUET_OK;
oom:
    rc = duet__error(DUET_ENOMEM, "%s: out of memory", st->path);
fail:
    duet_st_destroy(v);
    return rc;
}

const char *duet_st_path(const duet_st *st) { return st->path; }

size_t duet_st_count(const duet_st *st) { return st->count; }

const char *duet_st_name(const duet_st *st, size_t i) {
    DUET_ASSERT(i < st->count);
    return st->entries[i].name;
}

static const st_entry *find(const duet_st *st, const char *name) {
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_entry *e = &st->entries[st->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

static int find_or_error(const duet_st *st, const char *name, const st_entry **out) {
    *out = find(st, name);
    if (*out == NULL)
        return duet__error(DUET_ENOTFOUND, "%s: no tensor named '%s' in the file (%zu tensors)",
                           st->path, name, st->count);
    return DUET_OK;
}

bool duet_st_has(const duet_st *st, const char *name) { return find(st, name) != NULL; }

static void entry_shape_str(const st_entry *e, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < e->ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, d > 0 ? ", %" PRId64 : "%" PRId64,
                               e->shape[d]);
    if (at < size) snprintf(buf + at, size - at, "]");
}

/* Converts entry e into dst, which holds e->numel floats. */
static int convert_entry(const duet_st *st, const st_entry *e, float *dst) {
    if (!convert_to_f32(dst, st->body + e->begin, e->dtype->name, e->numel))
        return duet__error(DUET_EUNSUPPORTED, "%s: entry '%s' has dtype %s, which duet cannot "
                           "convert to float32", st->path, e->name, e->dtype->name);
    return DUET_OK;
}

int duet_st_get(const duet_st *st, const char *name, duet_tensor **out) {
    *out = NULL;
    const st_entry *e;
    DUET_TRY(find_or_error(st, name, &e));
    char sh[DUET_SHAPE_STR_MAX];
    entry_shape_str(e, sh, sizeof sh);
    if (e->ndim > DUET_MAX_DIMS || e->numel == 0)
        return duet__error(DUET_EUNSUPPORTED, "%s: entry '%s' has shape %s; duet tensors have "
                           "1 to %d non-empty dimensions", st->path, name, sh, DUET_MAX_DIMS);
    /* A 0-d scalar (e.g. PyTorch's num_batches_tracked) becomes shape [1]. */
    int ndim = e->ndim > 0 ? e->ndim : 1;
    int64_t one = 1;
    duet_tensor *t = NULL;
    int rc = duet_tensor_create(ndim, e->ndim > 0 ? e->shape : &one, &t);
    if (rc != DUET_OK) return duet__error_context(rc, "%s: entry '%s'", st->path, name);
    rc = convert_entry(st, e, t->data);
    if (rc != DUET_OK) {
        duet_tensor_release(t);
        return rc;
    }
    *out = t;
    return DUET_OK;
}

int duet_st_copy_into(const duet_st *st, const char *name, duet_tensor *dst) {
    const st_entry *e;
    DUET_TRY(find_or_error(st, name, &e));
    /* Same shape, treating a 0-d scalar as [1]. */
    bool same = e->numel == dst->numel;
    if (same && e->ndim > 0) {
        same = e->ndim == dst->ndim;
        for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == dst->shape[d];
    } else if (same) {
        same = dst->ndim == 1;
    }
    if (!same) {
        char want[DUET_SHAPE_STR_MAX], got[DUET_SHAPE_STR_MAX];
        entry_shape_str(e, got, sizeof got);
        duet_shape_str(dst, want, sizeof want);
        return duet__error(DUET_ESHAPE, "%s: entry '%s' has shape %s but the destination "
                           "tensor has shape %s", st->path, name, got, want);
    }
    if (dst->device.type == DUET_DEVICE_CPU) return convert_entry(st, e, dst->data);
    /* A device tensor: convert on the host, then one copy. */
    float *host = duet_aligned_alloc((size_t)dst->numel * sizeof(float));
    if (host == NULL)
        return duet__error(DUET_ENOMEM, "%s: entry '%s': out of memory for a host copy",
                           st->path, name);
    int rc = convert_entry(st, e, host);
    if (rc == DUET_OK) rc = duet_tensor_copy_from_host(dst, host);
    duet_aligned_free(host);
    return rc;
}

int duet_st_raw(const duet_st *st, const char *name, const char **dtype, const void **bytes,
                size_t *nbytes, int *ndim, int64_t *shape) {
    const st_entry *e;
    DUET_TRY(find_or_error(st, name, &e));
    if (dtype != NULL) *dtype = e->dtype->name;
    if (bytes != NULL) *bytes = st->body + e->begin;
    if (nbytes != NULL) *nbytes = (size_t)(e->end - e->begin);
    if (ndim != NULL) *ndim = e->ndim;
    if (shape != NULL)
        for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
    return DUET_OK;
}

const char *duet_st_meta(const duet_st *st, const char *key) {
    for (size_t i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

/* ---- writer ------------------------------------------------------------- */

typedef struct {
    char *name;
    const st_dtype *dtype;
    int ndim;
    int64_t shape[ST_MAX_FILE_DIMS];
    void *bytes;
    size_t nbytes;
} st_wentry;

struct duet_st_writer {
    st_wentry *entries; /* insertion order */
    size_t count, cap;
    st_meta *meta;
    size_t meta_count, meta_cap;
    void (*progress)(void *ctx);
    void *progress_ctx;
};

void duet_st_writer_set_progress(duet_st_writer *w, void (*fn)(void *ctx), void *ctx) {
    w->progress = fn;
    w->progress_ctx = ctx;
}

/* Writes n bytes in pieces of at most 8 MiB, reporting progress between
 * them. */
#define ST_WRITE_PIECE ((size_t)8 << 20)
static bool write_pieces(duet_st_writer *w, FILE *f, const unsigned char *p, size_t n) {
    while (n > 0) {
        size_t k = n < ST_WRITE_PIECE ? n : ST_WRITE_PIECE;
        if (fwrite(p, 1, k, f) != k) return false;
        p += k;
        n -= k;
        if (w->progress != NULL) w->progress(w->progress_ctx);
    }
    return true;
}

int duet_st_writer_create(duet_st_writer **out) {
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
    return DUET_OK;
}

void duet_st_writer_destroy(duet_st_writer *w) {
    if (w == NULL) return;
    for (size_t i = 0; i < w->count; i++) {
        free(w->entries[i].name);
        free(w->entries[i].bytes);
    }
    for (size_t i = 0; i < w->meta_count; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->entries);
    free(w->meta);
    free(w);
}

int duet_st_writer_add_raw(duet_st_writer *w, const char *name, const char *dtype, int ndim,
                           const int64_t *shape, const void *bytes, size_t nbytes) {
    if (name == NULL || name[0] == '\0' || strcmp(name, "__metadata__") == 0)
        return duet__error(DUET_EINVAL, "safetensors writer: invalid tensor name '%s'",
                           name != NULL ? name : "(null)");
    const st_dtype *dt = dtype != NULL ? dtype_find(dtype) : NULL;
    if (dt == NULL)
        return duet__error(DUET_EINVAL, "safetensors writer: '%s': unknown dtype '%s'", name,
                           dtype != NULL ? dtype : "(null)");
    if (ndim < 0 || ndim > ST_MAX_FILE_DIMS || (ndim > 0 && shape == NULL))
        return duet__error(DUET_EINVAL, "safetensors writer: '%s': %d dimensions (0 to %d "
                           "allowed)", name, ndim, ST_MAX_FILE_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > UINT64_MAX / 8 / (uint64_t)shape[d]))
            return duet__error(DUET_EINVAL, "safetensors writer: '%s': bad dimension %d (%"
                               PRId64 ")", name, d, shape[d]);
        numel *= (uint64_t)shape[d];
    }
    if (numel * dt->size != nbytes)
        return duet__error(DUET_EINVAL, "safetensors writer: '%s': shape and dtype %s need %"
                           PRIu64 " bytes, %zu given", name, dt->name, numel * dt->size, nbytes);
    if (nbytes > 0 && bytes == NULL)
        return duet__error(DUET_EINVAL, "safetensors writer: '%s': NULL data", name);
    for (size_t i = 0; i < w->count; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return duet__error(DUET_EINVAL, "safetensors writer: tensor '%s' added twice", name);
    if (w->count == w->cap) {
        size_t cap = w->cap > 0 ? 2 * w->cap : 16;
        st_wentry *grown = realloc(w->entries, cap * sizeof *grown);
        if (grown == NULL) return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
        w->entries = grown;
        w->cap = cap;
    }
    st_wentry *e = &w->entries[w->count];
    memset(e, 0, sizeof *e);
    e->name = duet__strdup(name);
    e->bytes = malloc(nbytes > 0 ? nbytes : 1);
    if (e->name == NULL || e->bytes == NULL) {
        free(e->name);
        free(e->bytes);
        return duet__error(DUET_ENOMEM, "safetensors writer: out of memory copying '%s' (%zu "
                           "bytes)", name, nbytes);
    }
    if (nbytes > 0) memcpy(e->bytes, bytes, nbytes);
    e->nbytes = nbytes;
    e->dtype = dt;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    w->count++;
    return DUET_OK;
}

int duet_st_writer_add(duet_st_writer *w, const char *name, const duet_tensor *t) {
    const size_t nbytes = (size_t)t->numel * sizeof(float);
    if (t->device.type == DUET_DEVICE_CPU)
        return duet_st_writer_add_raw(w, name, "F32", t->ndim, t->shape, t->data, nbytes);
    /* From the device: one copy to the host, which add_raw copies again. */
    float *host = duet_aligned_alloc(nbytes);
    if (host == NULL)
        return duet__error(DUET_ENOMEM, "safetensors writer: '%s': out of memory for a host "
                           "copy", name != NULL ? name : "(null)");
    int rc = duet_tensor_copy_to_host(t, host);
    if (rc == DUET_OK) rc = duet_st_writer_add_raw(w, name, "F32", t->ndim, t->shape, host, nbytes);
    duet_aligned_free(host);
    return rc;
}

int duet_st_writer_set_meta(duet_st_writer *w, const char *key, const char *value) {
    if (key == NULL || value == NULL)
        return duet__error(DUET_EINVAL, "safetensors writer: NULL metadata key or value");
    if (is_checksum_key(key))
        return duet__error(DUET_EINVAL, "safetensors writer: metadata key '%s' is reserved for "
                           "the checksums the writer records", key);
    char *v = duet__strdup(value);
    if (v == NULL) return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
    for (size_t i = 0; i < w->meta_count; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            free(w->meta[i].value);
            w->meta[i].value = v;
            return DUET_OK;
        }
    }
    if (w->meta_count == w->meta_cap) {
        size_t cap = w->meta_cap > 0 ? 2 * w->meta_cap : 8;
        st_meta *grown = realloc(w->meta, cap * sizeof *grown);
        if (grown == NULL) {
            free(v);
            return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
        }
        w->meta = grown;
        w->meta_cap = cap;
    }
    char *k = duet__strdup(key);
    if (k == NULL) {
        free(v);
        return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
    }
    w->meta[w->meta_count++] = (st_meta){k, v};
    return DUET_OK;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes so that the
 * body starts 8-aligned. Returns a malloc'd buffer (not NUL-terminated
 * beyond len). */
static int build_header(const duet_st_writer *w, char **out, size_t *len) {
    *out = NULL;
    json_t *root = json_object();
    if (root == NULL) return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
    int bad = 0;
    json_t *m = json_object();
    bad |= m == NULL || json_object_set_new(root, "__metadata__", m) != 0;
    for (size_t i = 0; !bad && i < w->meta_count; i++)
        bad |= json_object_set_new(m, w->meta[i].key, json_string(w->meta[i].value)) != 0;
    /* And every metadata entry's (the run's position lives there). */
    for (size_t i = 0; !bad && i < w->meta_count; i++) {
        if (is_checksum_key(w->meta[i].key)) continue;
        char *key = duet__strf(ST_CK_META_PREFIX "%s", w->meta[i].key), hex[17];
        uint64_t h = meta_checksum(w->meta[i].key, w->meta[i].value);
        bad |= key == NULL || h == 0;
        if (!bad) {
            snprintf(hex, sizeof hex, "%016" PRIx64, h);
            bad |= json_object_set_new(m, key, json_string(hex)) != 0;
        }
        free(key);
    }
    /* Every tensor's checksum (the reader verifies them). */
    if (!bad) bad |= json_object_set_new(m, ST_CK_ALGO_KEY, json_string(ST_CK_ALGO)) != 0;
    for (size_t i = 0; !bad && i < w->count; i++) {
        const st_wentry *e = &w->entries[i];
        size_t klen = strlen(ST_CK_PREFIX) + strlen(e->name) + 1;
        char *key = malloc(klen), hex[17];
        bad |= key == NULL;
        if (!bad) {
            snprintf(key, klen, ST_CK_PREFIX "%s", e->name);
            snprintf(hex, sizeof hex, "%016" PRIx64, checksum(e->bytes, e->nbytes));
            bad |= json_object_set_new(m, key, json_string(hex)) != 0;
        }
        free(key);
    }
    uint64_t at = 0;
    for (size_t i = 0; !bad && i < w->count; i++) {
        const st_wentry *e = &w->entries[i];
        json_t *info = json_object(), *shape = json_array(), *offs = json_array();
        bad |= info == NULL || shape == NULL || offs == NULL;
        for (int d = 0; !bad && d < e->ndim; d++)
            bad |= json_array_append_new(shape, json_integer(e->shape[d])) != 0;
        if (!bad) {
            bad |= json_array_append_new(offs, json_integer((json_int_t)at)) != 0;
            bad |= json_array_append_new(offs, json_integer((json_int_t)(at + e->nbytes))) != 0;
            bad |= json_object_set_new(info, "dtype", json_string(e->dtype->name)) != 0;
            bad |= json_object_set(info, "shape", shape) != 0;
            bad |= json_object_set(info, "data_offsets", offs) != 0;
            bad |= json_object_set(root, e->name, info) != 0;
        }
        json_decref(shape);
        json_decref(offs);
        json_decref(info);
        at += e->nbytes;
    }
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (text == NULL)
        return duet__error(DUET_EINVAL, "safetensors writer: cannot encode the JSON header "
                           "(out of memory, or a name or metadata string is not valid UTF-8)");
    size_t n = strlen(text);
    size_t padded = (n + 7) / 8 * 8;
    char *buf = malloc(padded > 0 ? padded : 8);
    if (buf == NULL) {
        free(text);
        return duet__error(DUET_ENOMEM, "safetensors writer: out of memory");
    }
    memcpy(buf, text, n);
    memset(buf + n, ' ', padded - n);
    free(text);
    *out = buf;
    *len = padded;
    return DUET_OK;
}

/* Flushes the folder entry of `path` so that the rename survives a crash. */
int duet_st_writer_save(duet_st_writer *w, const char *path) {
    char *header = NULL;
    size_t hlen = 0;
    DUET_TRY(build_header(w, &header, &hlen));
    duet__safe_file sf;
    int rc = duet__safe_open(path, &sf);
    if (rc != DUET_OK) {
        free(header);
        return rc;
    }
    FILE *f = sf.f;
    uint64_t hlen64 = hlen;
    bool ok = fwrite(&hlen64, 8, 1, f) == 1 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = 0; ok && i < w->count; i++)
        ok = write_pieces(w, f, w->entries[i].bytes, w->entries[i].nbytes);
    free(header);
    int err = errno;
    if (!ok) {
        duet__safe_abort(&sf);
        return duet__error(DUET_EIO, "cannot write %s: %s%s", path, strerror(err),
                           err == ENOSPC ? " (disk full)" : "");
    }
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (w->progress != NULL) w->progress(w->progress_ctx);
    if (!ok) {
        err = errno;
        duet__safe_abort(&sf);
        return duet__error(DUET_EIO, "cannot write %s: %s%s", path, strerror(err),
                           err == ENOSPC ? " (disk full)" : "");
    }
    return duet__safe_commit(&sf);
}
