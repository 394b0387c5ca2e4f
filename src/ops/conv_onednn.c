/* Convolutions on oneDNN's convolution primitives, in float32 and in bf16
 * mixed precision. oneDNN's direct JIT kernels read the input once where
 * im2col writes and the GEMM reads K = C*KH*KW values per output pixel.
 * - bf16: inputs rounded to bfloat16, products summed in float32, outputs
 *   and gradients float32, as in the im2col path of conv.c, but without
 *   columns (in bf16 the GEMM is twice as fast and the columns became a
 *   third of a conv's time).
 * - float32 (only with the conv paths "onednn" and "winograd": DUET_CONV
 *   or the config's conv; duet_conv_path): the forward and the input
 *   gradient on the same primitives with float32 data, PyTorch 2's path on
 *   this CPU.
 *   Not the weight gradient: oneDNN 2.6's float32 backward-weights kernel
 *   sums all N*OH*OW products of a weight in one float32 chain (a 129x127
 *   input's weight gradient missed test_ops_conv's 1e-4), where conv.c's
 *   GEMM sums in blocks. Not the default: the forward and dX are as close
 *   to float64 as im2col's (bench: rms 2-3e-7 relative on both), but the
 *   other rounding moves MMEditing's 2-process SRGAN run past its float64
 *   check (docs/performance.md).
 * - float32 on the Winograd kernels (conv path "winograd"): the 3x3
 *   stride-1 shapes on oneDNN's F(4x4, 3x3) kernels, the weight gradient
 *   too (it sums over tiles in the transformed domain: 5e-7 relative rms
 *   against float64 where the direct kernel's chain gives 1e-6, and the
 *   forward and dX 7.8e-7 against the direct 2.2e-7; 64->64 at 24x24 and
 *   96x96). Other shapes, and a CPU without the kernels, run as "onednn".
 *   In bf16 mixed precision the same shapes run on the same float32
 *   Winograd kernels (oneDNN 2.6 has no bf16 ones; the full SRGAN's bf16
 *   step took 6.5 CPU s against 7.25 on the bf16 direct kernels).
 *
 * The primitives want blocked layouts (nChw16c), so each call reorders:
 * x, w and dY from duet's NCHW float32 into the primitive's layout (in bf16
 * the reorder is the rounding; a float32 operand whose chosen layout is
 * NCHW or OIHW already is read in place, and a float32 output written in
 * place), the float32
 * result back into NCHW, adding into dX and dW where the op accumulates
 * (the reorder's "sum" post-op). The blocked copies live in conv.c's
 * scratch slots 0-3 and the primitives' scratchpad in slot 5, reused from
 * call to call.
 *
 * A shape's primitives (forward, backward data, in bf16 backward weights,
 * and the reorders) are made once and kept in a small table: a training step
 * repeats the same few dozen conv shapes, keyed by shape and precision.
 * Where oneDNN has no JIT kernel for a shape (its reference or GEMM-based
 * implementations would be slower than duet's own im2col), or where
 * bench_ops measured im2col faster (see entry_make), the entry says so and
 * conv.c keeps its path.
 * Calls take the table's lock for their whole run: convolutions are run by
 * one thread at a time, each on all of duet's threads (oneDNN's OpenMP
 * team), so the scratch, the stream and the entries are never shared. */
#include "ops/onednn_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define CONV_SLOTS 96


/* A primitive and the scratchpad it asks for (user-managed). */
typedef struct prim {
    dnnl_primitive_t p;
    size_t scratch;
} prim;

/* A table key: the shape and the precision (all int64_t: no padding for
 * memcmp). */
typedef struct conv_key {
    duet__conv_dims d;
    int64_t bf16;
    int64_t wino; /* float32 3x3 stride 1 on the Winograd kernels, where they have it */
} conv_key;

typedef struct conv_entry {
    conv_key key;
    bool made, usable; /* usable: JIT kernels for all three passes */
    char impl[64];     /* the forward's implementation ("jit:avx512_core", "jit_wino_4x3:...") */
    uint64_t last_use;
    prim fwd[2], bwd_data, bwd_weights; /* fwd[1] adds the bias */
    /* Reorders: user float32 -> the primitives' layouts, and their float32
     * results -> user NCHW / OIHW (dx and dw adding). An input reorder left
     * NULL: the primitive reads the user's layout in place. */
    prim x_fwd, w_fwd, y_out, dy_data, w_data, dx_out, x_wei, dy_wei, dw_out;
    dnnl_memory_desc_t user_x, user_w, user_y, bias;
    dnnl_memory_desc_t x_fwd_md, w_fwd_md, y_md;        /* forward */
    dnnl_memory_desc_t dy_data_md, w_data_md, dx_md;    /* backward data */
    dnnl_memory_desc_t x_wei_md, dy_wei_md, dw_md;      /* backward weights */
    bool dy_shared; /* backward weights reads dY in backward data's layout */
} conv_entry;

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    int init_rc;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    conv_entry slots[CONV_SLOTS];
    uint64_t clock;
} cb = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static _Atomic bool enabled = true;
static _Atomic uint64_t runs, wino_runs;

bool duet__conv_onednn_enable(bool on) { return atomic_exchange(&enabled, on); }

uint64_t duet__conv_onednn_runs(void) { return atomic_load(&runs); }

uint64_t duet__conv_onednn_winograd_runs(void) { return atomic_load(&wino_runs); }

#define DNNL_TRY(call, what) DUET__DNNL_TRY("oneDNN conv", call, what)

static int dnnl_fail(dnnl_status_t st, const char *what) {
    return duet__dnnl_fail("oneDNN conv", st, what);
}

static void conv_onednn_init(void) {
    cb.init_rc = duet__dnnl_engine(&cb.engine);
    if (cb.init_rc == DUET_OK &&
        dnnl_stream_create(&cb.stream, cb.engine, dnnl_stream_default_flags) != dnnl_success)
        cb.init_rc = duet__error(DUET_EUNSUPPORTED, "oneDNN conv: cannot create a stream");
}

static void prim_free(prim *p) {
    if (p->p != NULL) dnnl_primitive_destroy(p->p);
    p->p = NULL;
}

static void entry_free(conv_entry *e) {
    prim *all[] = {&e->fwd[0], &e->fwd[1], &e->bwd_data, &e->bwd_weights, &e->x_fwd,
                   &e->w_fwd,  &e->y_out,  &e->dy_data,  &e->w_data,      &e->dx_out,
                   &e->x_wei,  &e->dy_wei, &e->dw_out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) prim_free(all[i]);
    memset(e, 0, sizeof *e);
}

/* An attribute with a user-managed scratchpad, and the "sum" post-op when
 * adding into the destination. */
static int attr_make(bool add, dnnl_primitive_attr_t *out) {
    dnnl_post_ops_t po = NULL;
    DNNL_TRY(dnnl_primitive_attr_create(out), "attr");
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(*out, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && add) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*out, po);
        dnnl_post_ops_destroy(po);
    }
    if (st != dnnl_success) {
        dnnl_primitive_attr_destroy(*out);
        return dnnl_fail(st, "primitive attributes");
    }
    return DUET_OK;
}

/* The primitive of pd into *p, with its scratchpad size; pd is destroyed. */
static int prim_from(dnnl_primitive_desc_t pd, prim *p, const char *what) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch = sp != NULL ? dnnl_memory_desc_get_size(sp) : 0;
    dnnl_status_t st = dnnl_primitive_create(&p->p, pd);
    dnnl_primitive_desc_destroy(pd);
    return st == dnnl_success ? DUET_OK : dnnl_fail(st, what);
}

static int reorder_make(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, bool add,
                        prim *p) {
    dnnl_primitive_attr_t attr;
    DUET_TRY(attr_make(add, &attr));
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st =
        dnnl_reorder_primitive_desc_create(&pd, from, cb.engine, to, cb.engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return dnnl_fail(st, "reorder");
    return prim_from(pd, p, "reorder");
}

/* The name of the implementation oneDNN chose for pd ("" when unknown). */
static const char *impl_of(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        impl == NULL)
        return "";
    return impl;
}

/* Whether oneDNN chose one of its JIT kernels (direct, Winograd or
 * brgemm-based). */
static bool is_jit(const_dnnl_primitive_desc_t pd) {
    const char *impl = impl_of(pd);
    return strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0;
}

static const dnnl_memory_desc_t *md_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* Whether im2col + SGEMM beat oneDNN's float32 kernels for d on this
 * machine (bench_ops against bench_ops --im2col, 1 thread, batch 8): with
 * fewer than 16 input or output channels (an image's 3) oneDNN pads them to
 * its block of 16. An image in: backward 30.8 against 34.2 GF/s (3->64 at
 * 32x32), 20.3 against 44.4 (at 128x128); an image out (64->3 at 128x128):
 * forward 12.9 against 26.0. The inner layers gain 10-35% on oneDNN
 * (64->64 3x3 at 32x32: forward 110 against 84 GF/s, backward 99 against
 * 69). Such shapes keep conv.c's path. */
static bool f32_prefers_im2col(const duet__conv_dims *d) { return d->c < 16 || d->o < 16; }

/* An input reorder from user into the primitive's layout md, or none
 * (p->p NULL) in float32 when md is the user's layout already. */
static int input_reorder(const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *md, prim *p) {
    if (dnnl_memory_desc_equal(user, md)) return DUET_OK;
    return reorder_make(user, md, false, p);
}

/* The primitive descriptors of one algorithm into pd[0..3] for d with
 * padding pl/pr, on inputs of type in_t (float32 outputs): the forward
 * without and with the bias, backward data, and backward weights when
 * `weights` (else pd[3] NULL). *ok false, every pd[i] NULL, when oneDNN
 * has not got them all as JIT kernels, or when the bias changes the
 * layouts (the backward does not know which forward ran). */
static int pds_create(dnnl_alg_kind_t alg, const duet__conv_dims *d, const dnnl_dims_t pl,
                      const dnnl_dims_t pr, dnnl_data_type_t in_t, bool weights,
                      const dnnl_memory_desc_t *bias, dnnl_primitive_desc_t *pd[4], bool *ok) {
    *ok = false;
    dnnl_dims_t xd = {d->n, d->c, d->h, d->w}, wd = {d->o, d->c, d->kh, d->kw};
    dnnl_dims_t yd = {d->n, d->o, d->oh, d->ow}, strides = {d->stride, d->stride};
    dnnl_memory_desc_t xa, wa, ya, dya, dxa, dwa;
    const dnnl_memory_desc_t *x_any = &xa, *w_any = &wa, *y_any = &ya, *dy_any = &dya,
                             *dx_any = &dxa, *dw_any = &dwa;
    dnnl_memory_desc_init_by_tag(&xa, 4, xd, in_t, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wa, 4, wd, in_t, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dya, 4, yd, in_t, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dxa, 4, xd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dwa, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t fd, fbd, bdd, bwd;
    dnnl_status_t st = dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, x_any,
                                                          w_any, NULL, y_any, strides, pl, pr);
    if (st == dnnl_success)
        st = dnnl_convolution_forward_desc_init(&fbd, dnnl_forward_training, alg, x_any, w_any,
                                                bias, y_any, strides, pl, pr);
    if (st == dnnl_success)
        st = dnnl_convolution_backward_data_desc_init(&bdd, alg, dx_any, w_any, dy_any, strides,
                                                      pl, pr);
    if (st == dnnl_success)
        st = dnnl_convolution_backward_weights_desc_init(&bwd, alg, x_any, dw_any, NULL, dy_any,
                                                         strides, pl, pr);
    /* A shape the direct kernels refuse is an error; the Winograd ones
     * leave it to the direct. */
    if (st != dnnl_success)
        return alg == dnnl_convolution_winograd ? DUET_OK : dnnl_fail(st, "convolution desc");
    dnnl_primitive_attr_t attr;
    DUET_TRY(attr_make(false, &attr));
    st = dnnl_primitive_desc_create(pd[0], &fd, attr, cb.engine, NULL);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(pd[1], &fbd, attr, cb.engine, NULL);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(pd[2], &bdd, attr, cb.engine, *pd[0]);
    if (st == dnnl_success && weights)
        st = dnnl_primitive_desc_create(pd[3], &bwd, attr, cb.engine, *pd[0]);
    dnnl_primitive_attr_destroy(attr);
    *ok = st == dnnl_success && is_jit(*pd[0]) && is_jit(*pd[1]) && is_jit(*pd[2]) &&
          (!weights || is_jit(*pd[3])) &&
          dnnl_memory_desc_equal(md_query(*pd[0], dnnl_query_src_md),
                                 md_query(*pd[1], dnnl_query_src_md)) &&
          dnnl_memory_desc_equal(md_query(*pd[0], dnnl_query_weights_md),
                                 md_query(*pd[1], dnnl_query_weights_md)) &&
          dnnl_memory_desc_equal(md_query(*pd[0], dnnl_query_dst_md),
                                 md_query(*pd[1], dnnl_query_dst_md));
    if (!*ok)
        for (int i = 0; i < 4; i++) {
            dnnl_primitive_desc_destroy(*pd[i]);
            *pd[i] = NULL;
        }
    return DUET_OK;
}

/* Makes e's primitives for key: the forward without and with a bias (the
 * backward does not know which the forward had), the backward passes
 * (backward weights in bf16 and on the Winograd kernels; on float32's
 * direct kernels backward data only) and the reorders. e->usable stays false (and
 * DUET_OK is returned) when oneDNN has no JIT kernel for one of them. */
static int entry_make(conv_entry *e, const conv_key *key) {
    const duet__conv_dims *d = &key->d;
    const bool bf16 = key->bf16 != 0;
    e->key = *key;
    e->made = true;
    const int64_t pad_r_h = (d->oh - 1) * d->stride + d->kh - d->h - d->pad;
    const int64_t pad_r_w = (d->ow - 1) * d->stride + d->kw - d->w - d->pad;
    if (pad_r_h < 0 || pad_r_w < 0) return DUET_OK; /* rows or columns never read */
    /* Fewer input channels than oneDNN's block of 16 (an image's 3): its
     * bf16 kernels pad the channels and lose to im2col, the backward most
     * (bench_ops --bf16 against --bf16-im2col, 3->64 3x3 @128, 1 thread:
     * backward 61 against 87 GF/s); float32 as f32_prefers_im2col says
     * (below). */
    dnnl_dims_t xd = {d->n, d->c, d->h, d->w}, wd = {d->o, d->c, d->kh, d->kw};
    dnnl_dims_t yd = {d->n, d->o, d->oh, d->ow}, bd = {d->o};
    dnnl_dims_t pl = {d->pad, d->pad}, pr = {pad_r_h, pad_r_w};
    dnnl_memory_desc_init_by_tag(&e->user_x, 4, xd, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&e->user_w, 4, wd, dnnl_f32, dnnl_oihw);
    dnnl_memory_desc_init_by_tag(&e->user_y, 4, yd, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&e->bias, 1, bd, dnnl_f32, dnnl_a);
    dnnl_primitive_desc_t fpd = NULL, fbpd = NULL, dpd = NULL, wpd = NULL;
    dnnl_primitive_desc_t *pd_all[4] = {&fpd, &fbpd, &dpd, &wpd};
    /* Winograd where asked for and oneDNN has its float32 kernels for the
     * shape (3x3, stride 1, 16 channels in and out and more), in bf16 mixed
     * precision too (there are no bf16 ones: float32 Winograd is faster
     * than the bf16 direct kernels and nearer float32); else the direct
     * kernels. */
    const bool wino = key->wino && d->kh == 3 && d->kw == 3 && d->stride == 1 &&
                      !f32_prefers_im2col(d);
    bool ok = false;
    if (wino)
        DUET_TRY(pds_create(dnnl_convolution_winograd, d, pl, pr, dnnl_f32, true, &e->bias,
                            pd_all, &ok));
    if (!ok && ((bf16 && d->c < 16) || (!bf16 && f32_prefers_im2col(d)))) return DUET_OK;
    if (!ok)
        DUET_TRY(pds_create(dnnl_convolution_direct, d, pl, pr, bf16 ? dnnl_bf16 : dnnl_f32, bf16,
                            &e->bias, pd_all, &ok));
    if (!ok) return DUET_OK;
    const bool wei = wpd != NULL; /* the weight gradient on oneDNN's kernels too */
    snprintf(e->impl, sizeof e->impl, "%s", impl_of(fpd));
    e->x_fwd_md = *md_query(fpd, dnnl_query_src_md);
    e->w_fwd_md = *md_query(fpd, dnnl_query_weights_md);
    e->y_md = *md_query(fpd, dnnl_query_dst_md);
    e->dy_data_md = *md_query(dpd, dnnl_query_diff_dst_md);
    e->w_data_md = *md_query(dpd, dnnl_query_weights_md);
    e->dx_md = *md_query(dpd, dnnl_query_diff_src_md);
    if (wei) {
        e->x_wei_md = *md_query(wpd, dnnl_query_src_md);
        e->dy_wei_md = *md_query(wpd, dnnl_query_diff_dst_md);
        e->dw_md = *md_query(wpd, dnnl_query_diff_weights_md);
        e->dy_shared = dnnl_memory_desc_equal(&e->dy_wei_md, &e->dy_data_md) != 0;
    }
    int rc = prim_from(fpd, &e->fwd[0], "forward convolution");
    int rc_b = prim_from(fbpd, &e->fwd[1], "forward convolution with bias");
    int rc_d = prim_from(dpd, &e->bwd_data, "backward-data convolution");
    int rc_w = wei ? prim_from(wpd, &e->bwd_weights, "backward-weights convolution") : DUET_OK;
    DUET_TRY(rc);
    DUET_TRY(rc_b);
    DUET_TRY(rc_d);
    DUET_TRY(rc_w);
    DUET_TRY(input_reorder(&e->user_x, &e->x_fwd_md, &e->x_fwd));
    DUET_TRY(input_reorder(&e->user_w, &e->w_fwd_md, &e->w_fwd));
    if (!dnnl_memory_desc_equal(&e->y_md, &e->user_y))
        DUET_TRY(reorder_make(&e->y_md, &e->user_y, false, &e->y_out));
    DUET_TRY(input_reorder(&e->user_y, &e->dy_data_md, &e->dy_data));
    DUET_TRY(input_reorder(&e->user_w, &e->w_data_md, &e->w_data));
    DUET_TRY(reorder_make(&e->dx_md, &e->user_x, true, &e->dx_out));
    if (wei) {
        DUET_TRY(input_reorder(&e->user_x, &e->x_wei_md, &e->x_wei));
        if (!e->dy_shared) DUET_TRY(input_reorder(&e->user_y, &e->dy_wei_md, &e->dy_wei));
        DUET_TRY(reorder_make(&e->dw_md, &e->user_w, true, &e->dw_out));
    }
    e->usable = true;
    return DUET_OK;
}

/* The entry for key, made when missing (evicting the least recently used).
 * With the lock held. */
static int entry_get(const conv_key *key, conv_entry **out) {
    conv_entry *victim = &cb.slots[0];
    for (int i = 0; i < CONV_SLOTS; i++) {
        conv_entry *e = &cb.slots[i];
        if (e->made && memcmp(&e->key, key, sizeof *key) == 0) {
            e->last_use = ++cb.clock;
            *out = e;
            return DUET_OK;
        }
        if (victim->made && (!e->made || e->last_use < victim->last_use)) victim = e;
    }
    entry_free(victim);
    int rc = entry_make(victim, key);
    if (rc != DUET_OK) {
        entry_free(victim);
        return rc;
    }
    victim->last_use = ++cb.clock;
    *out = victim;
    return DUET_OK;
}

/* Memory of md over buf (dnnl_memory_destroy it after use). */
static int mem_of(const dnnl_memory_desc_t *md, const void *buf, dnnl_memory_t *out) {
    DNNL_TRY(dnnl_memory_create(out, md, cb.engine, (void *)buf), "memory");
    return DUET_OK;
}

/* A primitive's argument: its kind (DNNL_ARG_SRC, ...), layout and buffer. */
typedef struct arg {
    int kind;
    const dnnl_memory_desc_t *md;
    const void *buf;
} arg;

/* Runs p on this module's stream with the n arguments of args and its
 * scratchpad (scratch slot 5), and waits for it. */
static int run(const prim *p, int n, const arg *args) {
    dnnl_exec_arg_t ex[6];
    dnnl_memory_t mem[6] = {NULL};
    DUET_ASSERT(n + 1 <= 6);
    int rc = DUET_OK;
    void *scratch = NULL;
    if (p->scratch > 0 &&
        (scratch = duet__scratch(5, (p->scratch + sizeof(float) - 1) / sizeof(float))) == NULL)
        return DUET_ENOMEM;
    int used = 0;
    for (; used < n && rc == DUET_OK; used++) {
        rc = mem_of(args[used].md, args[used].buf, &mem[used]);
        ex[used] = (dnnl_exec_arg_t){args[used].kind, mem[used]};
    }
    if (rc == DUET_OK && p->scratch > 0) {
        dnnl_memory_desc_t s_md;
        dnnl_dims_t s_dims = {(int64_t)p->scratch};
        dnnl_memory_desc_init_by_tag(&s_md, 1, s_dims, dnnl_u8, dnnl_a);
        rc = mem_of(&s_md, scratch, &mem[used]);
        ex[used] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[used]};
        used++;
    }
    if (rc == DUET_OK) {
        dnnl_status_t st = dnnl_primitive_execute(p->p, cb.stream, used, ex);
        if (st == dnnl_success) st = dnnl_stream_wait(cb.stream);
        if (st != dnnl_success) rc = dnnl_fail(st, "execution");
    }
    for (int i = 0; i < 6; i++)
        if (mem[i] != NULL) dnnl_memory_destroy(mem[i]);
    return rc;
}

static int reorder(const prim *p, const dnnl_memory_desc_t *from_md, const void *from,
                   const dnnl_memory_desc_t *to_md, void *to) {
    const arg a[2] = {{DNNL_ARG_FROM, from_md, from}, {DNNL_ARG_TO, to_md, to}};
    return run(p, 2, a);
}

/* Scratch slot `slot` large enough for md (NULL when out of memory). */
static void *buffer(int slot, const dnnl_memory_desc_t *md) {
    return duet__scratch(slot, (dnnl_memory_desc_get_size(md) + sizeof(float) - 1) / sizeof(float));
}

/* An operand in the primitive's layout md: the user's buffer itself when p
 * has no reorder (same layout), else reordered into scratch slot `slot`.
 * *out NULL and DUET_ENOMEM when out of memory. */
static int operand(const prim *p, const dnnl_memory_desc_t *user_md, const float *user,
                   const dnnl_memory_desc_t *md, int slot, const void **out) {
    if (p->p == NULL) {
        *out = user;
        return DUET_OK;
    }
    void *buf = buffer(slot, md);
    *out = buf;
    if (buf == NULL) return DUET_ENOMEM;
    return reorder(p, user_md, user, md, buf);
}

/* Samples per oneDNN call. The primitives' blocked copies of x and y (or dY
 * and dX) live in scratch for a call's whole batch, and the Winograd
 * kernels' scratchpad grows with it (188 MB for the full SRGAN's 64->256
 * 3x3 at 64x64, batch 16): a call runs on chunks of samples whose input and
 * output together take about CHUNK_BYTES, and a chunk is halved while a
 * primitive's scratchpad is over SCRATCH_MAX. The forward and dX are the
 * same sample by sample; dW adds the chunks' sums.
 * Measured on the full SRGAN step, one thread, DUET_CONV=winograd (peak
 * resident MB, CPU s per step): whole batches 1443 MB, 7.6 s; 16 MB chunks
 * 1188 MB; 32 MB 1236 MB; 8 MB 1175 MB. bench_ops --batch 16: the
 * Winograd kernels keep 250-330 GF/s (direct-equivalent) on 16 MB chunks,
 * except where the transformed 512x512 weights dominate the scratchpad
 * (VGG's 512->512 at 16x16: 116 MB whole, 57 ms; halved to 32 MB, 141 ms),
 * hence SCRATCH_MAX above that. */
#define CHUNK_BYTES ((int64_t)16 << 20)
#define SCRATCH_MAX ((size_t)128 << 20)

static _Atomic int64_t chunk_bytes = CHUNK_BYTES;

int64_t duet__conv_onednn_chunk_bytes(int64_t bytes) {
    return atomic_exchange(&chunk_bytes, bytes > 0 ? bytes : CHUNK_BYTES);
}

/* The call's plan: chunks of nb samples on e[0], the last one (when
 * shorter) on e[1]. */
typedef struct chunks {
    conv_entry *e[2];
    int64_t nb;
} chunks;

static int64_t chunk_samples(const duet__conv_dims *d) {
    const int64_t per = (int64_t)sizeof(float) * (d->c * d->h * d->w + d->o * d->oh * d->ow);
    int64_t most = atomic_load_explicit(&chunk_bytes, memory_order_relaxed) / (per > 0 ? per : 1);
    if (most < 1) most = 1;
    if (most >= d->n) return d->n;
    for (int64_t nb = most; 2 * nb >= most; nb--) /* a divisor of n: one shape */
        if (d->n % nb == 0) return nb;
    return most;
}

static size_t entry_scratch(const conv_entry *e) {
    const prim *all[] = {&e->fwd[0], &e->fwd[1], &e->bwd_data, &e->bwd_weights};
    size_t most = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->scratch > most) most = all[i]->scratch;
    return most;
}

static bool on_winograd(const conv_entry *e) { return strncmp(e->impl, "jit_wino", 8) == 0; }

/* The entry of d's shape with n samples. With the lock held. */
static int entry_for(const duet__conv_dims *d, int64_t n, bool bf16, bool wino, conv_entry **e) {
    conv_key key = {*d, bf16, wino};
    key.d.n = n;
    return entry_get(&key, e);
}

/* Plans the call with the lock taken; on DUET_OK with c->e[0] NULL the
 * shape is conv.c's (lock released); otherwise the caller unlocks. */
static int begin(const duet__conv_dims *d, bool bf16, bool wino, chunks *c) {
    memset(c, 0, sizeof *c);
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return DUET_OK;
    pthread_once(&cb.once, conv_onednn_init);
    if (cb.init_rc != DUET_OK) return cb.init_rc;
    pthread_mutex_lock(&cb.lock);
    int64_t nb = chunk_samples(d);
    int rc = entry_for(d, nb, bf16, wino, &c->e[0]);
    while (rc == DUET_OK && c->e[0]->usable && nb > 1 && entry_scratch(c->e[0]) > SCRATCH_MAX) {
        nb = (nb + 1) / 2;
        rc = entry_for(d, nb, bf16, wino, &c->e[0]);
    }
    c->nb = nb;
    if (rc == DUET_OK && c->e[0]->usable && d->n % nb != 0)
        rc = entry_for(d, d->n % nb, bf16, wino, &c->e[1]);
    if (rc != DUET_OK || !c->e[0]->usable || (c->e[1] != NULL && !c->e[1]->usable)) {
        c->e[0] = c->e[1] = NULL;
        pthread_mutex_unlock(&cb.lock);
    }
    return rc;
}

/* The GEMM-equivalent work of one pass (2 N O C KH KW OH OW), counted with
 * duet_sgemm's so that bench_train's GEMM rate covers these convolutions. */
static void count_pass(const duet__conv_dims *d) {
    duet__gemm_count_flops(2u * (uint64_t)(d->n * d->o) * (uint64_t)(d->c * d->kh * d->kw) *
                           (uint64_t)(d->oh * d->ow));
}

/* The weights in e's layout md, reordered by p into scratch slot 2 unless
 * the previous chunk's entry left them there in the same layout (*had). */
static int weights_in(const prim *p, const dnnl_memory_desc_t *user_md, const float *w,
                      const dnnl_memory_desc_t *md, const dnnl_memory_desc_t **had,
                      const void **out) {
    if (*had != NULL && dnnl_memory_desc_equal(*had, md)) return DUET_OK;
    *had = md;
    return operand(p, user_md, w, md, 2, out);
}

static int forward_chunk(conv_entry *e, const float *x, const float *w, const float *bias,
                         float *y, const dnnl_memory_desc_t **w_had, const void **ws) {
    const void *xs = NULL;
    void *yb = e->y_out.p != NULL ? buffer(1, &e->y_md) : y;
    int rc = yb != NULL ? DUET_OK : DUET_ENOMEM;
    if (rc == DUET_OK) rc = operand(&e->x_fwd, &e->user_x, x, &e->x_fwd_md, 0, &xs);
    if (rc == DUET_OK) rc = weights_in(&e->w_fwd, &e->user_w, w, &e->w_fwd_md, w_had, ws);
    if (rc == DUET_OK) {
        const arg a[4] = {{DNNL_ARG_SRC, &e->x_fwd_md, xs},
                          {DNNL_ARG_WEIGHTS, &e->w_fwd_md, *ws},
                          {DNNL_ARG_DST, &e->y_md, yb},
                          {DNNL_ARG_BIAS, &e->bias, bias}};
        rc = run(&e->fwd[bias != NULL], bias != NULL ? 4 : 3, a);
    }
    if (rc == DUET_OK && e->y_out.p != NULL) rc = reorder(&e->y_out, &e->y_md, yb, &e->user_y, y);
    return rc;
}

static int forward_held(const duet__conv_dims *d, bool bf16, bool wino, const float *x,
                        const float *w, const float *bias, float *y, bool *done) {
    chunks c;
    *done = false;
    DUET_TRY(begin(d, bf16, wino, &c));
    if (c.e[0] == NULL) return DUET_OK;
    const int64_t xs = d->c * d->h * d->w, ys = d->o * d->oh * d->ow;
    const dnnl_memory_desc_t *w_had = NULL;
    const void *ws = NULL;
    int rc = DUET_OK;
    for (int64_t n0 = 0; n0 < d->n && rc == DUET_OK; n0 += c.nb) {
        conv_entry *e = d->n - n0 >= c.nb ? c.e[0] : c.e[1];
        rc = forward_chunk(e, x + n0 * xs, w, bias, y + n0 * ys, &w_had, &ws);
    }
    pthread_mutex_unlock(&cb.lock);
    *done = rc == DUET_OK;
    if (*done) {
        atomic_fetch_add(&runs, 1);
        if (on_winograd(c.e[0])) atomic_fetch_add(&wino_runs, 1);
        count_pass(d);
    }
    return rc;
}

/* One chunk's dX (dx not NULL) and dW (dw not NULL). */
static int backward_chunk(conv_entry *e, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, const dnnl_memory_desc_t **w_had,
                          const void **ws) {
    int rc = DUET_OK;
    const void *dyb = NULL; /* dY in backward data's layout, when made */
    if (dx != NULL) {
        void *dxb = buffer(1, &e->dx_md);
        rc = dxb != NULL ? DUET_OK : DUET_ENOMEM;
        if (rc == DUET_OK) rc = operand(&e->dy_data, &e->user_y, dy, &e->dy_data_md, 3, &dyb);
        if (rc == DUET_OK) rc = weights_in(&e->w_data, &e->user_w, w, &e->w_data_md, w_had, ws);
        if (rc == DUET_OK) {
            const arg a[3] = {{DNNL_ARG_DIFF_DST, &e->dy_data_md, dyb},
                              {DNNL_ARG_WEIGHTS, &e->w_data_md, *ws},
                              {DNNL_ARG_DIFF_SRC, &e->dx_md, dxb}};
            rc = run(&e->bwd_data, 3, a);
        }
        if (rc == DUET_OK) rc = reorder(&e->dx_out, &e->dx_md, dxb, &e->user_x, dx);
    }
    if (dw != NULL && rc == DUET_OK) {
        const void *xs = NULL, *dyw = NULL;
        void *dwb = buffer(1, &e->dw_md);
        rc = dwb != NULL ? DUET_OK : DUET_ENOMEM;
        if (rc == DUET_OK) rc = operand(&e->x_wei, &e->user_x, x, &e->x_wei_md, 0, &xs);
        if (rc == DUET_OK) {
            if (e->dy_shared && dyb != NULL) dyw = dyb;
            else rc = operand(e->dy_shared ? &e->dy_data : &e->dy_wei, &e->user_y, dy,
                              &e->dy_wei_md, 3, &dyw);
        }
        if (rc == DUET_OK) {
            const arg a[3] = {{DNNL_ARG_SRC, &e->x_wei_md, xs},
                              {DNNL_ARG_DIFF_DST, &e->dy_wei_md, dyw},
                              {DNNL_ARG_DIFF_WEIGHTS, &e->dw_md, dwb}};
            rc = run(&e->bwd_weights, 3, a);
        }
        if (rc == DUET_OK) rc = reorder(&e->dw_out, &e->dw_md, dwb, &e->user_w, dw);
    }
    return rc;
}

static int backward_held(const duet__conv_dims *d, bool bf16, const float *x, const float *w,
                         const float *dy, float *dx, float *dw, bool *dx_done, bool *dw_done) {
    chunks c;
    *dx_done = *dw_done = false;
    DUET_TRY(begin(d, bf16, duet__conv_winograd_on(), &c));
    if (c.e[0] == NULL) return DUET_OK;
    /* dW on oneDNN's kernels where every chunk's entry has them; else the
     * caller's GEMM. */
    if (c.e[0]->bwd_weights.p == NULL || (c.e[1] != NULL && c.e[1]->bwd_weights.p == NULL))
        dw = NULL;
    const int64_t xs = d->c * d->h * d->w, ys = d->o * d->oh * d->ow;
    const dnnl_memory_desc_t *w_had = NULL;
    const void *ws = NULL;
    int rc = DUET_OK;
    for (int64_t n0 = 0; n0 < d->n && (dx != NULL || dw != NULL) && rc == DUET_OK; n0 += c.nb) {
        conv_entry *e = d->n - n0 >= c.nb ? c.e[0] : c.e[1];
        rc = backward_chunk(e, x + n0 * xs, w, dy + n0 * ys, dx != NULL ? dx + n0 * xs : NULL, dw,
                            &w_had, &ws);
    }
    pthread_mutex_unlock(&cb.lock);
    if (rc == DUET_OK && (dx != NULL || dw != NULL)) {
        *dx_done = dx != NULL;
        *dw_done = dw != NULL;
        atomic_fetch_add(&runs, 1);
        if (on_winograd(c.e[0])) atomic_fetch_add(&wino_runs, 1);
        if (dx != NULL) count_pass(d);
        if (dw != NULL) count_pass(d);
    }
    return rc;
}

/* The passes run with the signals held (see duet__signals_hold). */
int duet__conv_onednn_forward(const duet__conv_dims *d, bool bf16, const float *x, const float *w,
                              const float *bias, float *y, bool *done) {
    sigset_t old;
    duet__signals_hold(&old);
    int rc = forward_held(d, bf16, duet__conv_winograd_on(), x, w, bias, y, done);
    duet__signals_release(&old);
    return rc;
}

int duet__conv_onednn_backward(const duet__conv_dims *d, bool bf16, const float *x,
                               const float *w, const float *dy, float *dx, float *dw,
                               bool *dx_done, bool *dw_done) {
    sigset_t old;
    duet__signals_hold(&old);
    int rc = backward_held(d, bf16, x, w, dy, dx, dw, dx_done, dw_done);
    duet__signals_release(&old);
    return rc;
}

int duet__conv_onednn_check(bool bf16, bool winograd, char *impl, size_t size) {
    /* 16 channels at 8x8, 3x3: the shape of a network's inner layers. */
    enum { C = 16, H = 8, K = 3 };
    float x[C * H * H], w[C * C * K * K], y[C * H * H];
    for (int i = 0; i < C * H * H; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < C * C * K * K; i++) w[i] = (float)(i % 5) - 2.0f;
    const duet__conv_dims d = {.n = 1, .c = C, .h = H, .w = H, .o = C, .kh = K, .kw = K,
                               .oh = H, .ow = H, .stride = 1, .pad = 1};
    bool done;
    sigset_t old;
    duet__signals_hold(&old);
    int rc = forward_held(&d, bf16, winograd, x, w, NULL, y, &done);
    duet__signals_release(&old);
    DUET_TRY(rc);
    snprintf(impl, size, "%s", bf16 ? "im2col + matmul" : "im2col + sgemm");
    if (!done) return DUET_OK;
    pthread_mutex_lock(&cb.lock);
    conv_entry *e = NULL;
    rc = entry_for(&d, d.n, bf16, winograd, &e); /* the one the forward ran on */
    if (rc == DUET_OK && e->usable) snprintf(impl, size, "%s", e->impl);
    pthread_mutex_unlock(&cb.lock);
    return rc;
}
