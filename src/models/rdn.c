/* MMEditing's RDN (mmedit/models/backbones/sr_backbones/rdn.py), under its
 * names: sfe1, sfe2, rdbs.<i> (RDB: layers.<j>.conv, lff), gff.0, gff.1,
 * upscale.<k> (Conv2d and PixelShuffle in a Sequential), output. Every conv
 * keeps PyTorch's default init: RDN.init_weights(None) does nothing. */
#include "models/models_internal.h"

#include <stdio.h>

/* *cur = m(*cur), releasing the old tensor. */
static int step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_tensor_release(*cur);
    *cur = next;
    return rc;
}

static int add_conv(duet_module *m, const char *name, int in, int out, int kernel,
                    duet_rng *rng) {
    duet_module *conv = NULL;
    DUET_TRY(duet_conv2d_module_create(in, out, kernel, 1, kernel / 2, true, rng, &conv));
    return duet_module_add_child(m, name, conv);
}

/* ---- nn.PixelShuffle(r): no parameters ----------------------------------------- */

typedef struct shuffle_impl {
    int r;
} shuffle_impl;

static int shuffle_forward(duet_module *self, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "PixelShuffle takes one input");
    const shuffle_impl *p = duet_module_impl(self);
    return duet_pixel_shuffle(in[0], p->r, out);
}

static const duet_module_type shuffle_type = {"PixelShuffle", shuffle_forward, free};

static int shuffle_create(int r, duet_module **out) {
    *out = NULL;
    shuffle_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "PixelShuffle: out of memory");
    p->r = r;
    return duet_module_create(&shuffle_type, p, out);
}

/* ---- DenseLayer: cat([x, relu(conv(x))], 1) ------------------------------------- */

static int dense_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "DenseLayer takes one input");
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = step(duet_module_child_at(self, 0), &h);
    if (rc == DUET_OK) {
        /* the conv's output is fresh: ReLU(inplace=True) over it */
        duet_tensor *a = NULL;
        rc = duet_relu_inplace(h, &a);
        duet_tensor_release(h);
        h = a;
    }
    if (rc == DUET_OK) {
        duet_tensor *parts[2] = {in[0], h};
        rc = duet_concat_channels(2, parts, out);
    }
    duet_tensor_release(h);
    return rc;
}

static const duet_module_type dense_type = {"DenseLayer", dense_forward, NULL};

static int dense_create(int in_ch, int out_ch, duet_rng *rng, duet_module **out) {
    DUET_TRY(duet_module_create(&dense_type, NULL, out));
    int rc = add_conv(*out, "conv", in_ch, out_ch, 3, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- RDB: x + lff(layers(x)) ------------------------------------------------------ */

static int rdb_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "RDB takes one input");
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = step(duet_module_child(self, "layers"), &h);
    if (rc == DUET_OK) rc = step(duet_module_child(self, "lff"), &h);
    /* lff's output is fresh: the residual addition runs in place on it. */
    if (rc == DUET_OK) rc = duet_add_inplace(h, in[0], out);
    duet_tensor_release(h);
    return rc;
}

static const duet_module_type rdb_type = {"RDB", rdb_forward, NULL};

static int rdb_create(int in_ch, int growth, int num_layers, duet_rng *rng, duet_module **out) {
    duet_module *m = NULL, *layers = NULL, *layer = NULL;
    DUET_TRY(duet_module_create(&rdb_type, NULL, &m));
    int rc = duet_sequential_create(&layers);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "layers", layers);
    for (int i = 0; i < num_layers && rc == DUET_OK; i++) {
        rc = dense_create(in_ch + growth * i, growth, rng, &layer);
        if (rc == DUET_OK) rc = duet_sequential_append(layers, layer);
    }
    /* local feature fusion */
    if (rc == DUET_OK) rc = add_conv(m, "lff", in_ch + growth * num_layers, in_ch, 1, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- RDN ---------------------------------------------------------------------------- */

typedef struct rdn_impl {
    duet_rdn_opts opts;
} rdn_impl;

duet_rdn_opts duet_rdn_opts_default(void) {
    return (duet_rdn_opts){.in_channels = 3, .out_channels = 3, .mid_channels = 64,
                           .num_blocks = 16, .upscale_factor = 4, .num_layers = 8,
                           .channel_growth = 64};
}

static int rdn_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "RDN takes one input, got %d", nin);
    const rdn_impl *g = duet_module_impl(self);
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != g->opts.in_channels) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "RDN: input %s; expected (N, %d, H, W)",
                           duet_shape_str(x, s, sizeof s), g->opts.in_channels);
    }
    duet_module *rdbs = duet_module_child(self, "rdbs");
    DUET_ASSERT(rdbs != NULL);
    const int nb = g->opts.num_blocks;
    /* sfe1 = sfe1(x); x = sfe2(sfe1); local_features[i] = x = rdbs[i](x);
     * x = gff(cat(local_features)) + sfe1; output(upscale(x)). */
    duet_tensor **local = calloc((size_t)nb + 1, sizeof *local);
    if (local == NULL) return duet__error(DUET_ENOMEM, "RDN: out of memory");
    duet_tensor *sfe1 = NULL, *h = NULL, *y = NULL;
    int rc = duet_module_forward(duet_module_child(self, "sfe1"), x, &sfe1);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "sfe2"), sfe1, &h);
    for (int i = 0; i < nb && rc == DUET_OK; i++) {
        rc = duet_module_forward(duet_module_child_at(rdbs, (size_t)i), h, &local[i]);
        duet_tensor_release(h);
        h = rc == DUET_OK ? duet_tensor_retain(local[i]) : NULL;
    }
    duet_tensor_release(h);
    h = NULL;
    if (rc == DUET_OK) rc = duet_concat_channels(nb, local, &h);
    for (int i = 0; i < nb; i++) duet_tensor_release(local[i]);
    free(local);
    if (rc == DUET_OK) rc = step(duet_module_child(self, "gff"), &h);
    /* gff's last conv's output is fresh: the global residual in place. */
    if (rc == DUET_OK) rc = duet_add_inplace(h, sfe1, &y);
    duet_tensor_release(h);
    duet_tensor_release(sfe1);
    if (rc == DUET_OK) rc = step(duet_module_child(self, "upscale"), &y);
    if (rc == DUET_OK) rc = step(duet_module_child(self, "output"), &y);
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return duet__error_context(rc, "RDN forward");
    }
    *out = y;
    return DUET_OK;
}

static const duet_module_type rdn_type = {"RDN", rdn_forward, free};

/* upscale: x2 and x4 one (conv to 4 mid, PixelShuffle(2)) per factor of 2;
 * x3 one (conv to 9 mid, PixelShuffle(3)). */
static int upscale_create(int f, int mid, duet_rng *rng, duet_module **out) {
    DUET_TRY(duet_sequential_create(out));
    const int r = f == 3 ? 3 : 2, n = f == 3 ? 1 : f / 2;
    int rc = DUET_OK;
    for (int i = 0; i < n && rc == DUET_OK; i++) {
        duet_module *conv = NULL, *shuffle = NULL;
        rc = duet_conv2d_module_create(mid, mid * r * r, 3, 1, 1, true, rng, &conv);
        if (rc == DUET_OK) rc = duet_sequential_append(*out, conv);
        if (rc == DUET_OK) rc = shuffle_create(r, &shuffle);
        if (rc == DUET_OK) rc = duet_sequential_append(*out, shuffle);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

int duet_rdn_create(const duet_rdn_opts *opts, duet_rng *rng, duet_module **out) {
    *out = NULL;
    const duet_rdn_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.mid_channels < 1 || o.num_blocks < 1 ||
        o.num_layers < 0 || o.channel_growth < 1)
        return duet__error(DUET_EINVAL, "RDN: in %d, out %d, mid %d channels, %d blocks of %d "
                           "layers growing by %d; channels and blocks must be positive, layers "
                           "non-negative", o.in_channels, o.out_channels, o.mid_channels,
                           o.num_blocks, o.num_layers, o.channel_growth);
    if (o.upscale_factor < 2 || o.upscale_factor > 4)
        return duet__error(DUET_EINVAL, "RDN: upscale_factor %d; RDN has 2, 3 and 4",
                           o.upscale_factor);
    rdn_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "RDN: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *rdbs = NULL, *gff = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&rdn_type, impl, &m));
    const int mid = o.mid_channels;
    /* In MMEditing's construction order. */
    int rc = add_conv(m, "sfe1", o.in_channels, mid, 3, rng);
    if (rc == DUET_OK) rc = add_conv(m, "sfe2", mid, mid, 3, rng);
    if (rc == DUET_OK) rc = duet_sequential_create(&rdbs); /* a ModuleList: never run whole */
    if (rc == DUET_OK) rc = duet_module_add_child(m, "rdbs", rdbs);
    for (int i = 0; i < o.num_blocks && rc == DUET_OK; i++) {
        rc = rdb_create(mid, o.channel_growth, o.num_layers, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(rdbs, part);
    }
    /* global feature fusion */
    if (rc == DUET_OK) rc = duet_sequential_create(&gff);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "gff", gff);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(mid * o.num_blocks, mid, 1, 1, 0, true, rng,
                                                      &part);
    if (rc == DUET_OK) rc = duet_sequential_append(gff, part);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(mid, mid, 3, 1, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(gff, part);
    if (rc == DUET_OK) rc = upscale_create(o.upscale_factor, mid, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upscale", part);
    if (rc == DUET_OK) rc = add_conv(m, "output", mid, o.out_channels, 3, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
