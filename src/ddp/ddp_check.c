/* Cross-rank agreement: at creation, that every rank wraps the same module
 * (names, shapes, requires_grad); later, that replicas hold the same bits.
 * Both first compare one hash per rank (cheap), and only on disagreement
 * exchange details, so that every rank reports the same first difference and
 * no rank is left waiting. */
#include "ddp/ddp_internal.h"

#include <string.h>


/* 64-bit FNV-1a over 8-byte words (tail bytewise): a checksum, not a
 * cryptographic hash. */
uint64_t duet__hash_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    const uint64_t prime = 0x100000001b3ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * prime;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * prime;
    return h;
}

#define HASH_SEED 0xcbf29ce484222325ULL

/* One line per entry: "<kind> '<name>'\t<shape> <flag>\n". */
static int describe(const duet_named_tensors *params, const duet_named_tensors *buffers,
                    char **out, size_t *len) {
    size_t cap = 64;
    for (size_t i = 0; i < params->count; i++) cap += strlen(params->items[i].name) + 128;
    for (size_t i = 0; i < buffers->count; i++) cap += strlen(buffers->items[i].name) + 128;
    char *s = malloc(cap);
    if (s == NULL) return duet__error(DUET_ENOMEM, "DDP: out of memory");
    size_t used = 0;
    for (int l = 0; l < 2; l++) {
        const duet_named_tensors *list = l == 0 ? params : buffers;
        for (size_t i = 0; i < list->count; i++) {
            const duet_tensor *t = list->items[i].tensor;
            char shape[DUET_SHAPE_STR_MAX];
            duet_shape_str(t, shape, sizeof shape);
            const char *flag = l == 1 ? "" : t->requires_grad ? " (requires grad)" : " (frozen)";
            int n = snprintf(s + used, cap - used, "%s '%s'\t%s%s\n", l == 0 ? "parameter" : "buffer",
                             list->items[i].name, shape, flag);
            used += (size_t)n;
        }
    }
    *out = s;
    *len = used;
    return DUET_OK;
}

/* Line `k` of a description as (left, right) spans; false past the end. */
static bool line_at(const char *s, size_t len, size_t k, const char **left, int *nleft,
                    const char **right, int *nright) {
    size_t pos = 0;
    for (size_t i = 0; i < k; i++) {
        const char *nl = memchr(s + pos, '\n', len - pos);
        if (nl == NULL) return false;
        pos = (size_t)(nl - s) + 1;
    }
    if (pos >= len) return false;
    const char *nl = memchr(s + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - s) : len;
    const char *tab = memchr(s + pos, '\t', end - pos);
    size_t mid = tab ? (size_t)(tab - s) : end;
    *left = s + pos;
    *nleft = (int)(mid - pos);
    *right = tab ? tab + 1 : s + end;
    *nright = tab ? (int)(end - mid - 1) : 0;
    return true;
}

/* Broadcasts a byte string of unknown length from `root`; *s is allocated on
 * the other ranks. */
static int bcast_string(duet_comm *c, char **s, size_t *len, int root) {
    uint64_t n = *len;
    DUET_TRY(duet_comm_bcast(c, &n, 1, DUET_DTYPE_U64, root));
    if (duet_comm_rank(c) != root) {
        *s = malloc((size_t)n + 1);
        if (*s == NULL) return duet__error(DUET_ENOMEM, "DDP: out of memory");
        *len = (size_t)n;
    }
    return duet_comm_bcast(c, *s, (size_t)n, DUET_DTYPE_U8, root);
}

/* "1, 2, 5" for the ranks whose value differs from rank 0's (at most 16). */
static void differing_ranks(const uint64_t *all, int size, char *buf, size_t cap, int *ndiff) {
    size_t used = 0;
    *ndiff = 0;
    buf[0] = '\0';
    for (int r = 1; r < size; r++) {
        if (all[r] == all[0]) continue;
        if (*ndiff < 16 && used < cap)
            used += (size_t)snprintf(buf + used, cap - used, "%s%d", *ndiff ? ", " : "", r);
        else if (*ndiff == 16 && used < cap)
            used += (size_t)snprintf(buf + used, cap - used, ", ...");
        (*ndiff)++;
    }
}

int duet__ddp_verify_module(ddp_state *d, const duet_named_tensors *params,
                            const duet_named_tensors *buffers) {
    char *mine = NULL;
    size_t len = 0;
    DUET_TRY(describe(params, buffers, &mine, &len));
    uint64_t h = duet__hash_bytes(HASH_SEED, mine, len);
    uint64_t *all = malloc((size_t)d->size * sizeof *all);
    if (all == NULL) {
        free(mine);
        return duet__error(DUET_ENOMEM, "DDP: out of memory");
    }
    int rc = duet_comm_allgather(d->comm, &h, all, 1, DUET_DTYPE_U64);
    int other = -1;
    for (int r = 1; rc == DUET_OK && r < d->size && other < 0; r++)
        if (all[r] != all[0]) other = r;
    if (rc != DUET_OK || other < 0) {
        free(all);
        free(mine);
        return rc;
    }
    /* Everybody learns rank 0's and the first differing rank's description. */
    char *desc0 = d->rank == 0 ? mine : NULL, *descr = d->rank == other ? mine : NULL;
    size_t len0 = d->rank == 0 ? len : 0, lenr = d->rank == other ? len : 0;
    rc = bcast_string(d->comm, &desc0, &len0, 0);
    if (rc == DUET_OK) rc = bcast_string(d->comm, &descr, &lenr, other);
    if (rc == DUET_OK) {
        char ranks[160];
        int ndiff = 0;
        differing_ranks(all, d->size, ranks, sizeof ranks, &ndiff);
        char what[1200];
        what[0] = '\0';
        for (size_t k = 0;; k++) {
            const char *l0 = NULL, *r0 = NULL, *l1 = NULL, *r1 = NULL;
            int nl0 = 0, nr0 = 0, nl1 = 0, nr1 = 0;
            bool has0 = line_at(desc0, len0, k, &l0, &nl0, &r0, &nr0);
            bool has1 = line_at(descr, lenr, k, &l1, &nl1, &r1, &nr1);
            if (!has0 && !has1) {
                snprintf(what, sizeof what, "their descriptions differ");
                break;
            }
            if (has0 && has1 && nl0 == nl1 && nr0 == nr1 && memcmp(l0, l1, (size_t)nl0) == 0 &&
                memcmp(r0, r1, (size_t)nr0) == 0)
                continue;
            if (has0 && has1 && nl0 == nl1 && memcmp(l0, l1, (size_t)nl0) == 0)
                snprintf(what, sizeof what, "%.*s is %.*s on rank 0 but %.*s on rank %d", nl0, l0,
                         nr0, r0, nr1, r1, other);
            else if (has0 && has1)
                snprintf(what, sizeof what,
                         "entry %zu is %.*s %.*s on rank 0 but %.*s %.*s on rank %d", k, nl0, l0,
                         nr0, r0, nl1, l1, nr1, r1, other);
            else if (has0)
                snprintf(what, sizeof what, "rank 0 has %.*s %.*s, which rank %d lacks", nl0, l0,
                         nr0, r0, other);
            else
                snprintf(what, sizeof what, "rank %d has %.*s %.*s, which rank 0 lacks", other,
                         nl1, l1, nr1, r1);
            break;
        }
        rc = duet__error(DUET_EMISMATCH,
                         "DDP '%s': the ranks do not wrap the same module (rank%s %s differ%s "
                         "from rank 0): %s. Build the same network, with the same parameters "
                         "requiring grad, on every rank before wrapping it",
                         d->name, ndiff > 1 ? "s" : "", ranks, ndiff > 1 ? "" : "s", what);
    }
    if (desc0 != mine) free(desc0);
    if (descr != mine) free(descr);
    free(mine);
    free(all);
    return rc;
}

int duet_ddp_check_replicas(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    if (d == NULL)
        return duet__error(DUET_EINVAL, "duet_ddp_check_replicas: the module is not a "
                                        "DistributedDataParallel");
    if (d->inner == NULL) return duet__error(DUET_ESTATE, "DDP '%s' has no module", d->name);
    duet_named_tensors state = {0, NULL};
    DUET_TRY(duet_module_state(d->inner, &state));
    size_t n = state.count;
    uint64_t *mx = malloc((n + 1) * sizeof *mx), *mn = malloc((n + 1) * sizeof *mn);
    uint64_t *all = malloc((size_t)d->size * sizeof *all);
    int rc = DUET_OK;
    if (mx == NULL || mn == NULL || all == NULL) rc = duet__error(DUET_ENOMEM, "DDP: out of memory");
    for (size_t i = 0; rc == DUET_OK && i < n; i++) {
        const duet_tensor *t = state.items[i].tensor;
        mx[i] = mn[i] = duet__hash_bytes(HASH_SEED, t->data, (size_t)t->numel * sizeof(float));
    }
    if (rc == DUET_OK) rc = duet_comm_allreduce(d->comm, mx, n, DUET_DTYPE_U64, DUET_REDUCE_MAX);
    if (rc == DUET_OK) rc = duet_comm_allreduce(d->comm, mn, n, DUET_DTYPE_U64, DUET_REDUCE_MIN);
    size_t first = n, ndiff = 0;
    for (size_t i = 0; rc == DUET_OK && i < n; i++) {
        if (mx[i] == mn[i]) continue;
        if (first == n) first = i;
        ndiff++;
    }
    if (rc == DUET_OK && first < n) {
        const duet_tensor *t = state.items[first].tensor;
        uint64_t h = duet__hash_bytes(HASH_SEED, t->data, (size_t)t->numel * sizeof(float));
        rc = duet_comm_allgather(d->comm, &h, all, 1, DUET_DTYPE_U64);
        if (rc == DUET_OK) {
            char ranks[160];
            int nr = 0;
            differing_ranks(all, d->size, ranks, sizeof ranks, &nr);
            rc = duet__error(DUET_EMISMATCH,
                             "DDP '%s': the replicas differ: '%s' is not bit-identical on every "
                             "rank (rank%s %s differ%s from rank 0); %zu of %zu tensors differ",
                             d->name, state.items[first].name, nr > 1 ? "s" : "", ranks,
                             nr > 1 ? "" : "s", ndiff, n);
        }
    }
    free(mx);
    free(mn);
    free(all);
    duet_named_tensors_clear(&state);
    return rc;
}
