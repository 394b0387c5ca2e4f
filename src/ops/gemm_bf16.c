/* The bf16 GEMM of mixed precision: C (f32) = op(A) op(B) + beta C with A
 * and B rounded to bfloat16 and products summed in float32, on oneDNN's
 * matmul primitive (its brgemm kernels use AVX512_BF16's dot products or
 * AMX tiles). Master weights, optimizer state, gradients' storage and every
 * reduction outside the GEMM stay float32: only the GEMM inputs are
 * rounded.
 *
 * A matmul primitive is made for one shape, so made ones are kept in a small
 * table keyed by (m, n, k, transposes, ldc, beta): a training step repeats
 * the same few dozen GEMM shapes every iteration.
 *
 * Threads run their products at the same time (a convolution gives each
 * thread whole samples): the table's lock covers only finding an entry.
 * Each call binds its own memory objects, runs on its thread's stream and
 * gives the primitive its thread's scratchpad (user-managed scratchpads:
 * oneDNN's own may be shared between primitives and is then not safe to
 * use from two threads at once). An entry in use is not evicted. */
#include "ops/onednn_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BF16_CACHE_SLOTS 128

typedef struct bf16_key {
    int64_t m, n, k, ldc;
    bool ta, tb, accumulate;
} bf16_key;

typedef struct bf16_entry {
    bf16_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md;
    size_t scratch_bytes; /* the scratchpad it asks for */
    int users;            /* threads running it now */
    uint64_t last_use;
} bf16_entry;

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    int init_rc;
    dnnl_engine_t engine;
    pthread_key_t stream_key; /* each thread's dnnl_stream_t, destroyed at its exit */
    bf16_entry slots[BF16_CACHE_SLOTS];
    uint64_t clock;
    char impl[96]; /* the implementation oneDNN chose, for the log and `duet info` */
} bf = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void stream_destroy(void *stream) { dnnl_stream_destroy(stream); }

static struct {
    pthread_once_t once;
    int rc;
    dnnl_engine_t engine;
} cpu = {.once = PTHREAD_ONCE_INIT};

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_cap(void) {
    const char *names[] = {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && v[0] != '\0') return;
    }
    /* Fails (and changes nothing) on a CPU below AVX512-BF16's level too:
     * oneDNN caps at what the CPU has either way. */
    (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16);
}

void duet__onednn_isa_init(void) { pthread_once(&isa_once, isa_cap); }

static void engine_make(void) {
    duet__onednn_isa_init();
    if (dnnl_engine_create(&cpu.engine, dnnl_cpu, 0) != dnnl_success)
        cpu.rc = duet__error(DUET_EUNSUPPORTED, "oneDNN: cannot create a CPU engine");
}

int duet__dnnl_engine(dnnl_engine_t *out) {
    pthread_once(&cpu.once, engine_make);
    *out = cpu.engine;
    return cpu.rc;
}

int duet__dnnl_fail(const char *who, dnnl_status_t st, const char *what) {
    return duet__error(DUET_EUNSUPPORTED, "%s: oneDNN %s failed (status %d)", who, what, (int)st);
}

#define DNNL_TRY(call, what) DUET__DNNL_TRY("bf16 GEMM", call, what)

static int dnnl_fail(dnnl_status_t st, const char *what) {
    return duet__dnnl_fail("bf16 GEMM", st, what);
}

static void bf16_init(void) {
    bf.init_rc = duet__dnnl_engine(&bf.engine);
    if (bf.init_rc == DUET_OK && pthread_key_create(&bf.stream_key, stream_destroy) != 0)
        bf.init_rc = duet__error(DUET_ENOMEM, "bf16 GEMM: cannot create the streams' thread key");
}

static void entry_free(bf16_entry *e) {
    if (e->prim != NULL) dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

/* op(X) (rows, cols) of a compact bf16 copy of X as stored (row-major,
 * transposed when trans). */
static void md_of(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, bool trans) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
    dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_bf16, strides);
}

static int entry_make(bf16_entry *e, const bf16_key *key) {
    dnnl_memory_desc_t a_md, b_md, c_md;
    md_of(&a_md, key->m, key->k, key->ta);
    md_of(&b_md, key->k, key->n, key->tb);
    dnnl_dims_t cdims = {key->m, key->n}, cstrides = {key->ldc, 1};
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&c_md, 2, cdims, dnnl_f32, cstrides), "dst desc");
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), "matmul desc");
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "attr");
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return dnnl_fail(dnnl_runtime_error, "user scratchpad");
    }
    if (key->accumulate) {
        /* beta = 1: C += A B as the post-op "sum". */
        if (dnnl_post_ops_create(&po) != dnnl_success ||
            dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success) {
            dnnl_post_ops_destroy(po);
            dnnl_primitive_attr_destroy(attr);
            return dnnl_fail(dnnl_runtime_error, "sum post-op");
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, bf.engine, NULL);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return dnnl_fail(st, "matmul primitive descriptor");
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl != NULL)
        snprintf(bf.impl, sizeof bf.impl, "%s", impl);
    e->key = *key;
    e->a_md = a_md;
    e->b_md = b_md;
    e->c_md = c_md;
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = sp != NULL ? dnnl_memory_desc_get_size(sp) : 0;
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        entry_free(e);
        return dnnl_fail(st, "matmul primitive");
    }
    return DUET_OK;
}

/* The entry for key, made (evicting the least recently used one that no
 * thread is running) when missing, its users count raised. Called with the
 * lock held. */
static int entry_get(const bf16_key *key, bf16_entry **out) {
    bf16_entry *victim = NULL; /* an empty slot, else the least recently used idle one */
    for (int i = 0; i < BF16_CACHE_SLOTS; i++) {
        bf16_entry *e = &bf.slots[i];
        if (e->prim != NULL && memcmp(&e->key, key, sizeof *key) == 0) {
            e->last_use = ++bf.clock;
            e->users++;
            *out = e;
            return DUET_OK;
        }
        if (e->users > 0 || (victim != NULL && victim->prim == NULL)) continue;
        if (victim == NULL || e->prim == NULL || e->last_use < victim->last_use) victim = e;
    }
    if (victim == NULL)
        return duet__error(DUET_EUNSUPPORTED, "bf16 GEMM: all %d matmul slots are in use",
                           BF16_CACHE_SLOTS);
    entry_free(victim);
    DUET_TRY(entry_make(victim, key));
    victim->last_use = ++bf.clock;
    victim->users = 1;
    *out = victim;
    return DUET_OK;
}

/* This thread's stream, made on its first product. */
static int thread_stream(dnnl_stream_t *out) {
    *out = pthread_getspecific(bf.stream_key);
    if (*out != NULL) return DUET_OK;
    DNNL_TRY(dnnl_stream_create(out, bf.engine, dnnl_stream_default_flags), "stream");
    if (pthread_setspecific(bf.stream_key, *out) != 0) {
        dnnl_stream_destroy(*out);
        return duet__error(DUET_ENOMEM, "bf16 GEMM: cannot keep a thread's oneDNN stream");
    }
    return DUET_OK;
}

/* Runs e on a (bf16), b (bf16) into c on this thread. */
static int entry_run(const bf16_entry *e, void *a, void *b, float *c) {
    dnnl_stream_t stream;
    DUET_TRY(thread_stream(&stream));
    void *scratch = NULL;
    if (e->scratch_bytes > 0 &&
        (scratch = duet__scratch(5, (e->scratch_bytes + sizeof(float) - 1) / sizeof(float))) ==
            NULL)
        return DUET_ENOMEM;
    dnnl_memory_desc_t s_md;
    dnnl_dims_t s_dims = {(int64_t)e->scratch_bytes};
    dnnl_memory_desc_init_by_tag(&s_md, 1, s_dims, dnnl_u8, dnnl_a);
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    dnnl_status_t st = dnnl_memory_create(&mem[0], &e->a_md, bf.engine, a);
    if (st == dnnl_success) st = dnnl_memory_create(&mem[1], &e->b_md, bf.engine, b);
    if (st == dnnl_success) st = dnnl_memory_create(&mem[2], &e->c_md, bf.engine, c);
    if (st == dnnl_success) st = dnnl_memory_create(&mem[3], &s_md, bf.engine, scratch);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                                   {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]},
                                   {DNNL_ARG_SCRATCHPAD, mem[3]}};
        st = dnnl_primitive_execute(e->prim, stream, e->scratch_bytes > 0 ? 4 : 3, args);
        if (st == dnnl_success) st = dnnl_stream_wait(stream);
    }
    for (int i = 0; i < 4; i++)
        if (mem[i] != NULL) dnnl_memory_destroy(mem[i]);
    return st == dnnl_success ? DUET_OK : dnnl_fail(st, "matmul execution");
}

/* rows x cols of src (leading dimension ld) into a compact bf16 copy. */
static void to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) duet_f32_to_bf16(dst + r * cols, src + r * ld, (size_t)cols);
}

/* The rounded copy of the A that duet__sgemm_held_a names, on this thread
 * (scratch slot 4), until duet__gemm_release_a. */
static _Thread_local struct {
    const float *a;
    int64_t rows, cols, ld;
    bool valid;
} held;

void duet__gemm_release_a(void) { held.valid = false; }

int duet__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, const uint16_t *b_bf16, int64_t ldb, float beta,
                     float *c, int64_t ldc, bool held_a) {
    DUET_ASSERT(beta == 0.0f || beta == 1.0f);
    DUET_ASSERT((b == NULL) != (b_bf16 == NULL));
    pthread_once(&bf.once, bf16_init);
    if (bf.init_rc != DUET_OK) return bf.init_rc;
    /* Compact bf16 copies of A and B as stored: A is (m, k), or (k, m) when
     * transposed; likewise B. Both go to scratch slot 3 (the conv code uses
     * 0..2 for its columns), except a held A, which stays in slot 4, and a
     * B given rounded, used as it is. */
    const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
    const int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
    const size_t a_halves = held_a ? 0 : ((size_t)(ar * ac) + 31) & ~(size_t)31;
    const size_t b_halves = b_bf16 != NULL ? 0 : (size_t)(br * bc);
    uint16_t *buf = NULL;
    if (a_halves + b_halves > 0 &&
        (buf = (uint16_t *)duet__scratch(3, (a_halves + b_halves + 1) / 2)) == NULL)
        return DUET_ENOMEM;
    uint16_t *ah = buf, *bh = NULL;
    if (held_a) {
        const bool reuse =
            held.valid && held.a == a && held.rows == ar && held.cols == ac && held.ld == lda;
        held.valid = false;
        if ((ah = (uint16_t *)duet__scratch(4, ((size_t)(ar * ac) + 1) / 2)) == NULL)
            return DUET_ENOMEM;
        if (!reuse) to_bf16(ah, a, ar, ac, lda);
        held.a = a;
        held.rows = ar;
        held.cols = ac;
        held.ld = lda;
        held.valid = true;
    } else {
        to_bf16(ah, a, ar, ac, lda);
    }
    if (b_bf16 != NULL) {
        DUET_ASSERT(ldb == bc); /* compact */
        bh = (uint16_t *)b_bf16;
    } else {
        bh = buf + a_halves; /* 64-byte aligned */
        to_bf16(bh, b, br, bc, ldb);
    }

    bf16_key key;
    memset(&key, 0, sizeof key); /* padding too: the key is compared by memcmp */
    key.m = m;
    key.n = n;
    key.k = k;
    key.ldc = ldc;
    key.ta = trans_a;
    key.tb = trans_b;
    key.accumulate = beta != 0.0f;
    pthread_mutex_lock(&bf.lock);
    bf16_entry *e = NULL;
    int rc = entry_get(&key, &e);
    pthread_mutex_unlock(&bf.lock);
    if (rc != DUET_OK) return rc;
    rc = entry_run(e, ah, bh, c);
    pthread_mutex_lock(&bf.lock);
    e->users--;
    pthread_mutex_unlock(&bf.lock);
    return rc;
}

int duet__bf16_check(char *impl, size_t size) {
    /* A small product through the real path: it makes the engine and a
     * primitive, and tells which implementation oneDNN picked. */
    float a[4 * 8], b[8 * 4], c[4 * 4];
    for (int i = 0; i < 32; i++)
        a[i] = b[i] = (float)(i % 5) - 2.0f;
    sigset_t old;
    duet__signals_hold(&old);
    int rc = duet__sgemm_bf16(false, false, 4, 4, 8, a, 8, b, NULL, 4, 0.0f, c, 4, false);
    duet__signals_release(&old);
    DUET_TRY(rc);
    pthread_mutex_lock(&bf.lock);
    snprintf(impl, size, "%s", bf.impl[0] ? bf.impl : "?");
    pthread_mutex_unlock(&bf.lock);
    return DUET_OK;
}
