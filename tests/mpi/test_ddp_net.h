/* Helpers shared by the DDP tests: a small conv/linear network whose every
 * rank can build the same replica from a seed, seeded batches, training
 * steps, and comparisons (closeness to a single-process reference, and
 * bit-identity across ranks checked with plain MPI, independently of the
 * DDP's own replica check). */
#ifndef DUET_TEST_DDP_NET_H
#define DUET_TEST_DDP_NET_H

#include "testutil.h"

#include <math.h>
#include <string.h>

static int g_rank, g_size;
static duet_comm *g_comm;

/* TinyNet: conv1 (3->4, 3x3, pad 1) [-> bn] -> leaky 0.2 -> conv2 (4->C2,
 * 3x3, stride 2, pad 1) -> leaky 0.2 -> flatten -> fc (C2*16 -> 3); an
 * optional `aux` Linear (C2*16 -> 3) that forward never uses (an unused
 * branch). Input (B, 3, 8, 8), output (B, 3). */
typedef struct tiny_cfg {
    bool bn;
    bool aux;
    int c2; /* 4 unless a test wants a different replica */
} tiny_cfg;

static const tiny_cfg TINY_PLAIN = {false, false, 4};

static inline int tiny_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    (void)nin;
    duet_tensor *h = NULL, *a = NULL, *h2 = NULL, *a2 = NULL, *f = NULL, *b = NULL;
    duet_module *bn = duet_module_child(self, "bn");
    int rc = duet_module_forward(duet_module_child(self, "conv1"), in[0], &h);
    if (rc == DUET_OK && bn != NULL) {
        rc = duet_module_forward(bn, h, &b);
        duet_tensor_release(h);
        h = b;
    }
    if (rc == DUET_OK) rc = duet_leaky_relu(h, 0.2f, &a);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "conv2"), a, &h2);
    if (rc == DUET_OK) rc = duet_leaky_relu(h2, 0.2f, &a2);
    if (rc == DUET_OK) rc = duet_flatten(a2, &f);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "fc"), f, out);
    duet_tensor_release(h);
    duet_tensor_release(a);
    duet_tensor_release(h2);
    duet_tensor_release(a2);
    duet_tensor_release(f);
    return rc;
}

static const duet_module_type tiny_type = {"TinyNet", tiny_forward, NULL};

static inline duet_module *tiny_create(uint64_t seed, tiny_cfg cfg) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *m = NULL, *c = NULL;
    TU_OK(duet_module_create(&m, &tiny_type, NULL));
    /* Before a BatchNorm a bias gets only rounding noise as gradient, which
     * Adam would amplify: no bias there, as in practice. */
    TU_OK(duet_conv2d_module_create(&c, 3, 4, 3, 1, 1, !cfg.bn, &rng));
    TU_OK(duet_module_add_child(m, "conv1", c));
    if (cfg.bn) {
        TU_OK(duet_batchnorm2d_module_create(&c, 4, 1e-5f, 0.1f));
        TU_OK(duet_module_add_child(m, "bn", c));
    }
    TU_OK(duet_conv2d_module_create(&c, 4, cfg.c2, 3, 2, 1, true, &rng));
    TU_OK(duet_module_add_child(m, "conv2", c));
    TU_OK(duet_linear_module_create(&c, cfg.c2 * 16, 3, true, &rng));
    TU_OK(duet_module_add_child(m, "fc", c));
    if (cfg.aux) {
        TU_OK(duet_linear_module_create(&c, cfg.c2 * 16, 3, true, &rng));
        TU_OK(duet_module_add_child(m, "aux", c));
    }
    return m;
}

/* The full batch, identical on every rank: x (B, 3, 8, 8), target (B, 3). */
static inline void make_batch(uint64_t seed, int64_t B, duet_tensor **x, duet_tensor **t) {
    duet_rng rng = duet_rng_make(seed, 7);
    *x = tu_randn(&rng, 4, (int64_t[]){B, 3, 8, 8}, 1.0f);
    *t = tu_randn(&rng, 2, (int64_t[]){B, 3}, 1.0f);
}

static inline duet_tensor *slice(duet_tensor *t, int64_t start, int64_t count) {
    duet_tensor *s = NULL;
    TU_OK(duet_tensor_slice0(&s, t, start, count));
    return s;
}

/* forward + weight * mse + backward. */
static inline void fwd_bwd(duet_module *m, duet_tensor *x, duet_tensor *t, float weight) {
    duet_tensor *y = NULL, *loss = NULL;
    TU_OK(duet_module_forward(m, x, &y));
    TU_OK(duet_mse_loss(y, t, weight, &loss));
    TU_OK(duet_backward(loss));
    duet_tensor_release(y);
    duet_tensor_release(loss);
}

static inline duet_optimizer *adam_for(duet_module *m, float lr) {
    duet_named_tensors p = {0, NULL};
    TU_OK(duet_module_named_parameters(m, true, &p));
    duet_adam_opts o = duet_adam_opts_default();
    o.lr = lr;
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&opt, &p, o));
    duet_named_tensors_free(&p);
    return opt;
}

/* Every parameter (and buffer) of `got` close to the same-named one of
 * `want` (both lists in the same order, names checked). */
static inline void assert_state_close(duet_module *got, duet_module *want, double rtol, double atol) {
    duet_named_tensors a = {0, NULL}, b = {0, NULL};
    TU_OK(duet_module_state(got, &a));
    TU_OK(duet_module_state(want, &b));
    assert_int_equal(a.count, b.count);
    for (size_t i = 0; i < a.count; i++) {
        assert_string_equal(a.items[i].name, b.items[i].name);
        assert_int_equal(a.items[i].tensor->numel, b.items[i].tensor->numel);
        char what[256];
        snprintf(what, sizeof what, "rank %d: %s", g_rank, a.items[i].name);
        tu_assert_close(a.items[i].tensor->data, b.items[i].tensor->data, a.items[i].tensor->numel,
                        rtol, atol, what);
    }
    duet_named_tensors_free(&a);
    duet_named_tensors_free(&b);
}

/* Same for gradients of the trainable parameters. */
static inline void assert_grads_close(duet_module *got, duet_module *want, double rtol, double atol) {
    duet_named_tensors a = {0, NULL}, b = {0, NULL};
    TU_OK(duet_module_named_parameters(got, true, &a));
    TU_OK(duet_module_named_parameters(want, true, &b));
    assert_int_equal(a.count, b.count);
    for (size_t i = 0; i < a.count; i++) {
        assert_string_equal(a.items[i].name, b.items[i].name);
        assert_non_null(a.items[i].tensor->grad);
        assert_non_null(b.items[i].tensor->grad);
        char what[256];
        snprintf(what, sizeof what, "rank %d: grad of %s", g_rank, a.items[i].name);
        tu_assert_close(a.items[i].tensor->grad, b.items[i].tensor->grad,
                        a.items[i].tensor->numel, rtol, atol, what);
    }
    duet_named_tensors_free(&a);
    duet_named_tensors_free(&b);
}

/* Rank 0's copy of every parameter and buffer (and gradient, when
 * with_grads) is broadcast with plain MPI and compared bit for bit. */
static inline void assert_bit_identical(duet_module *m, bool with_grads) {
    duet_named_tensors s = {0, NULL};
    TU_OK(duet_module_state(m, &s));
    for (size_t i = 0; i < s.count; i++) {
        duet_tensor *t = s.items[i].tensor;
        for (int g = 0; g < (with_grads ? 2 : 1); g++) {
            const float *mine = g == 0 ? t->data : t->grad;
            if (mine == NULL) continue;
            float *root = malloc((size_t)t->numel * sizeof *root);
            memcpy(root, mine, (size_t)t->numel * sizeof *root);
            MPI_Bcast(root, (int)t->numel, MPI_FLOAT, 0, MPI_COMM_WORLD);
            if (memcmp(root, mine, (size_t)t->numel * sizeof *root) != 0)
                fail_msg("rank %d: %s of %s differs from rank 0's", g_rank,
                         g == 0 ? "data" : "grad", s.items[i].name);
            free(root);
        }
    }
    duet_named_tensors_free(&s);
}

static inline duet_module *ddp_of(duet_module *net, const duet_ddp_opts *o) {
    duet_module *ddp = NULL;
    TU_OK(duet_ddp_create(&ddp, net, g_comm, o));
    return ddp;
}

static inline int ddp_setup(void **state) {
    (void)state;
    if (duet_comm_world(&g_comm) != DUET_OK) return -1;
    g_rank = duet_comm_rank(g_comm);
    g_size = duet_comm_size(g_comm);
    return 0;
}

static inline int ddp_teardown(void **state) {
    (void)state;
    duet_comm_destroy(g_comm);
    return 0;
}

#endif
