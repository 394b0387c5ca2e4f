/* duet export: a generator as an ONNX model (opset 13..18, default 17),
 * written by hand through protobuf.h: no ONNX or protobuf library. The graph maps the
 * network's input tensor "input" (N, C, H, W; N, H and W symbolic) to
 * "output", the weights as initializers, float32.
 *
 * The graph is emitted by a walk over duet's module tree that mirrors each
 * module type's forward (msrresnet.c, rrdbnet.c, layers.c): Conv2d,
 * Sequential, ResidualBlockNoBN, PixelShufflePack (DepthToSpace, CRD: the
 * order of F.pixel_shuffle), MSRResNet (its bilinear image upsampler a
 * Resize, linear, half_pixel: F.interpolate(align_corners=False)),
 * ResidualDenseBlock, RRDB, RRDBNet (nearest x2 upsampling a Resize,
 * nearest, asymmetric, floor). A module type without an emitter is refused
 * by name, so a network this file does not know is never exported wrong.
 *
 * ONNX's messages, the fields used:
 *   ModelProto     ir_version 1, producer_name 2, producer_version 3,
 *                  graph 7, opset_import 8 {domain 1, version 2}
 *   GraphProto     node 1, name 2, initializer 5, input 11, output 12
 *   NodeProto      input 1, output 2, name 3, op_type 4, attribute 5
 *   AttributeProto name 1, f 2, i 3, s 4, ints 8, type 20
 *   TensorProto    dims 1, data_type 2 (FLOAT 1, INT64 7), name 8, raw_data 9
 *   ValueInfoProto name 1, type 2 {tensor_type 1 {elem_type 1, shape 2
 *                  {dim 1 {dim_value 1 | dim_param 2}}}} */
#include "export/export.h"

#include "export/protobuf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { ONNX_FLOAT = 1, ONNX_INT64 = 7 };
enum { ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_STRING = 3, ATTR_INTS = 7 };
#define NAME_MAX_LEN 96

typedef struct gx {
    duet__pb graph;
    int next;   /* for fresh value names */
    int rc;     /* the first error */
    int nodes;
    bool batch_stats; /* BatchNorm2d with the batch's statistics (training mode) */
    int64_t channels; /* output channels of the last convolution written */
    int dropouts;     /* Dropout layers with p > 0, written as identities */
    int batch_norms;
    int opset;
} gx;

static void fresh(gx *g, char *name) { snprintf(name, NAME_MAX_LEN, "t%d", g->next++); }

static void fail(gx *g, int rc) {
    if (g->rc == DUET_OK) g->rc = rc;
}

/* ---- initializers and nodes ------------------------------------------------------ */

static void initializer(gx *g, const char *name, int dtype, int ndim, const int64_t *dims,
                        const void *data, size_t bytes) {
    duet__pb t = {0};
    for (int i = 0; i < ndim; i++) duet__pb_uint(&t, 1, (uint64_t)dims[i]);
    duet__pb_uint(&t, 2, (uint64_t)dtype);
    duet__pb_string(&t, 8, name);
    duet__pb_bytes(&t, 9, data, bytes); /* little-endian, as raw_data is defined */
    duet__pb_message(&g->graph, 5, &t);
    duet__pb_free(&t);
}

static void init_tensor(gx *g, const char *name, const duet_tensor *t) {
    initializer(g, name, ONNX_FLOAT, t->ndim, t->shape, t->data, (size_t)t->numel * sizeof(float));
}

static void init_floats(gx *g, const char *name, int n, const float *v) {
    initializer(g, name, ONNX_FLOAT, 1, (int64_t[]){n}, v, (size_t)n * sizeof(float));
}

static void init_float_scalar(gx *g, const char *name, float v) {
    initializer(g, name, ONNX_FLOAT, 0, NULL, &v, sizeof v);
}

/* A per-channel vector (C) as a (C, 1, 1) tensor, to broadcast over N, C, H, W. */
static void init_channels(gx *g, const char *name, int64_t c, const float *v) {
    initializer(g, name, ONNX_FLOAT, 3, (int64_t[]){c, 1, 1}, v, (size_t)c * sizeof(float));
}

typedef struct attr {
    const char *name;
    int type;
    int64_t i;
    float f;
    const char *s;
    int n;
    int64_t ints[8];
} attr;

static void node(gx *g, const char *op, int nin, const char *const *in, const char *out,
                 int nattr, const attr *attrs) {
    duet__pb n = {0};
    for (int i = 0; i < nin; i++) duet__pb_string(&n, 1, in[i]);
    duet__pb_string(&n, 2, out);
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s_%d", op, g->nodes++);
    duet__pb_string(&n, 3, name);
    duet__pb_string(&n, 4, op);
    for (int k = 0; k < nattr; k++) {
        const attr *a = &attrs[k];
        duet__pb p = {0};
        duet__pb_string(&p, 1, a->name);
        if (a->type == ATTR_FLOAT) duet__pb_float(&p, 2, a->f);
        if (a->type == ATTR_INT) duet__pb_uint(&p, 3, (uint64_t)a->i);
        if (a->type == ATTR_STRING) duet__pb_string(&p, 4, a->s);
        for (int j = 0; a->type == ATTR_INTS && j < a->n; j++)
            duet__pb_uint(&p, 8, (uint64_t)a->ints[j]);
        duet__pb_uint(&p, 20, (uint64_t)a->type);
        duet__pb_message(&n, 5, &p);
        duet__pb_free(&p);
    }
    duet__pb_message(&g->graph, 1, &n);
    duet__pb_free(&n);
}

/* out = op(in) for the one-input activations. */
static void unary(gx *g, const char *op, const char *in, char *out) {
    fresh(g, out);
    node(g, op, 1, (const char *[]){in}, out, 0, NULL);
}

static void leaky(gx *g, float slope, const char *in, char *out) {
    fresh(g, out);
    node(g, "LeakyRelu", 1, (const char *[]){in}, out, 1,
         (attr[]){{.name = "alpha", .type = ATTR_FLOAT, .f = slope}});
}

static void add(gx *g, const char *a, const char *b, char *out) {
    fresh(g, out);
    node(g, "Add", 2, (const char *[]){a, b}, out, 0, NULL);
}

/* out = in * s */
static void scale(gx *g, const char *in, float s, char *out) {
    char c[NAME_MAX_LEN];
    fresh(g, c);
    init_float_scalar(g, c, s);
    fresh(g, out);
    node(g, "Mul", 2, (const char *[]){in, c}, out, 0, NULL);
}

/* Resize by an integer factor: bilinear (align_corners=False) or nearest. */
static void resize(gx *g, const char *in, int factor, bool bilinear, char *out) {
    char scales[NAME_MAX_LEN];
    fresh(g, scales);
    init_floats(g, scales, 4, (float[]){1.0f, 1.0f, (float)factor, (float)factor});
    fresh(g, out);
    if (bilinear)
        node(g, "Resize", 3, (const char *[]){in, "", scales}, out, 2,
             (attr[]){{.name = "mode", .type = ATTR_STRING, .s = "linear"},
                      {.name = "coordinate_transformation_mode", .type = ATTR_STRING,
                       .s = "half_pixel"}});
    else
        node(g, "Resize", 3, (const char *[]){in, "", scales}, out, 3,
             (attr[]){{.name = "mode", .type = ATTR_STRING, .s = "nearest"},
                      {.name = "coordinate_transformation_mode", .type = ATTR_STRING,
                       .s = "asymmetric"},
                      {.name = "nearest_mode", .type = ATTR_STRING, .s = "floor"}});
}

/* ---- module emitters ------------------------------------------------------------- */

static void emit(gx *g, duet_module *m, const char *path, const char *in, char *out);

static duet_module *child(gx *g, duet_module *m, const char *path, const char *name) {
    duet_module *c = duet_module_child(m, name);
    if (c == NULL)
        fail(g, duet__error(DUET_ENOTFOUND, "export: %s (%s) has no child '%s'", path,
                            duet_module_type_name(m), name));
    return c;
}

static void emit_child(gx *g, duet_module *m, const char *path, const char *name, const char *in,
                       char *out) {
    duet_module *c = child(g, m, path, name);
    if (c == NULL) {
        snprintf(out, NAME_MAX_LEN, "%s", in);
        return;
    }
    char sub[512];
    snprintf(sub, sizeof sub, "%s.%s", path, name);
    emit(g, c, sub, in, out);
}

static void emit_conv(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings ls;
    int rc = duet_layer_settings_of(m, &ls);
    if (rc != DUET_OK) {
        fail(g, duet__error_context(rc, "export: %s", path));
        return;
    }
    const int stride = ls.stride, pad = ls.padding;
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    char wn[600], bn[600];
    snprintf(wn, sizeof wn, "%s.weight", path);
    snprintf(bn, sizeof bn, "%s.bias", path);
    init_tensor(g, wn, w);
    if (b != NULL) init_tensor(g, bn, b);
    g->channels = w->shape[0];
    fresh(g, out);
    node(g, "Conv", b != NULL ? 3 : 2, (const char *[]){in, wn, bn}, out, 3,
         (attr[]){{.name = "kernel_shape", .type = ATTR_INTS, .n = 2, .ints = {w->shape[2], w->shape[3]}},
                  {.name = "pads", .type = ATTR_INTS, .n = 4, .ints = {pad, pad, pad, pad}},
                  {.name = "strides", .type = ATTR_INTS, .n = 2, .ints = {stride, stride}}});
}

static void emit_children(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char cur[NAME_MAX_LEN];
    snprintf(cur, sizeof cur, "%s", in);
    for (size_t i = 0; i < duet_module_child_count(m) && g->rc == DUET_OK; i++) {
        char next[NAME_MAX_LEN];
        emit_child(g, m, path, duet_module_child_name_at(m, i), cur, next);
        memcpy(cur, next, sizeof cur);
    }
    snprintf(out, NAME_MAX_LEN, "%s", cur);
}

/* PixelShufflePack: its conv, then DepthToSpace by sqrt(out / in channels). */
static int pack_scale(duet_module *m) {
    duet_module *conv = duet_module_child(m, "upsample_conv");
    duet_tensor *w = conv != NULL ? duet_module_param(conv, "weight") : NULL;
    if (w == NULL) return 0;
    int s = (int)lround(sqrt((double)w->shape[0] / (double)w->shape[1]));
    return s * s * w->shape[1] == w->shape[0] ? s : 0;
}

static void emit_pack(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char h[NAME_MAX_LEN];
    emit_child(g, m, path, "upsample_conv", in, h);
    int s = pack_scale(m);
    if (s == 0) {
        fail(g, duet__error(DUET_EUNSUPPORTED, "export: %s: cannot tell the pixel-shuffle "
                            "factor from its conv", path));
        return;
    }
    fresh(g, out);
    node(g, "DepthToSpace", 1, (const char *[]){h}, out, 2,
         (attr[]){{.name = "blocksize", .type = ATTR_INT, .i = s},
                  {.name = "mode", .type = ATTR_STRING, .s = "CRD"}});
}

static void emit_resblock(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char a[NAME_MAX_LEN], b[NAME_MAX_LEN], c[NAME_MAX_LEN];
    emit_child(g, m, path, "conv1", in, a);
    unary(g, "Relu", a, b);
    emit_child(g, m, path, "conv2", b, c);
    add(g, c, in, out);
}

static void emit_msrresnet(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char h[NAME_MAX_LEN], t[NAME_MAX_LEN];
    emit_child(g, m, path, "conv_first", in, t);
    leaky(g, 0.1f, t, h);
    emit_child(g, m, path, "trunk_net", h, t);
    emit_child(g, m, path, "upsample1", t, h);
    int factor = pack_scale(child(g, m, path, "upsample1"));
    duet_module *up2 = duet_module_child(m, "upsample2");
    if (up2 != NULL) {
        emit_child(g, m, path, "upsample2", h, t);
        memcpy(h, t, sizeof h);
        factor *= pack_scale(up2);
    }
    emit_child(g, m, path, "conv_hr", h, t);
    leaky(g, 0.1f, t, h);
    emit_child(g, m, path, "conv_last", h, t);
    char up[NAME_MAX_LEN];
    resize(g, in, factor, true, up);
    add(g, t, up, out);
}

/* ResidualDenseBlock: x_{i+1} = lrelu(conv_i(cat(x_0..x_i))), out = 0.2 x_5 + x_0. */
static void emit_rdb(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char feats[5][NAME_MAX_LEN], h[NAME_MAX_LEN], t[NAME_MAX_LEN];
    snprintf(feats[0], NAME_MAX_LEN, "%s", in);
    for (int i = 0; i < 5 && g->rc == DUET_OK; i++) {
        char src[NAME_MAX_LEN];
        if (i == 0) {
            snprintf(src, sizeof src, "%s", in);
        } else {
            const char *ins[5];
            for (int k = 0; k <= i; k++) ins[k] = feats[k];
            fresh(g, src);
            node(g, "Concat", i + 1, ins, src, 1,
                 (attr[]){{.name = "axis", .type = ATTR_INT, .i = 1}});
        }
        char cname[8];
        snprintf(cname, sizeof cname, "conv%d", i + 1);
        emit_child(g, m, path, cname, src, h);
        if (i < 4) leaky(g, 0.2f, h, feats[i + 1]);
    }
    scale(g, h, 0.2f, t);
    add(g, t, in, out);
}

static void emit_rrdb(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char h[NAME_MAX_LEN], t[NAME_MAX_LEN];
    emit_children(g, m, path, in, h);
    scale(g, h, 0.2f, t);
    add(g, t, in, out);
}

static void emit_rrdbnet(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    char feat[NAME_MAX_LEN], h[NAME_MAX_LEN], t[NAME_MAX_LEN];
    emit_child(g, m, path, "conv_first", in, feat);
    emit_child(g, m, path, "body", feat, h);
    emit_child(g, m, path, "conv_body", h, t);
    add(g, t, feat, h);
    for (int i = 1; i <= 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "conv_up%d", i);
        resize(g, h, 2, false, t);
        emit_child(g, m, path, name, t, feat);
        leaky(g, 0.2f, feat, h);
    }
    emit_child(g, m, path, "conv_hr", h, t);
    leaky(g, 0.2f, t, h);
    emit_child(g, m, path, "conv_last", h, out);
}

/* ---- the translation generators' layers ---------------------------------------- */

static bool settings(gx *g, duet_module *m, const char *path, duet_layer_settings *s) {
    int rc = duet_layer_settings_of(m, s);
    if (rc != DUET_OK) fail(g, duet__error_context(rc, "export: %s", path));
    return rc == DUET_OK;
}

static void param_name(char *dst, const char *path, const char *what) {
    snprintf(dst, 600, "%s.%s", path, what);
}

/* ConvTranspose2d: duet's weight (IN, OUT, K, K) is ONNX's (C, M, kH, kW). */
static void emit_tconv(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (!settings(g, m, path, &st)) return;
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    char wn[600], bn[600];
    param_name(wn, path, "weight");
    param_name(bn, path, "bias");
    init_tensor(g, wn, w);
    if (b != NULL) init_tensor(g, bn, b);
    g->channels = w->shape[1];
    const int64_t p = st.padding, s = st.stride, op = st.output_padding;
    fresh(g, out);
    node(g, "ConvTranspose", b != NULL ? 3 : 2, (const char *[]){in, wn, bn}, out, 4,
         (attr[]){{.name = "kernel_shape", .type = ATTR_INTS, .n = 2,
                   .ints = {w->shape[2], w->shape[3]}},
                  {.name = "pads", .type = ATTR_INTS, .n = 4, .ints = {p, p, p, p}},
                  {.name = "strides", .type = ATTR_INTS, .n = 2, .ints = {s, s}},
                  {.name = "output_padding", .type = ATTR_INTS, .n = 2, .ints = {op, op}}});
}

/* ReflectionPad2d: Pad, mode reflect; pads are all begins (N, C, H, W), then all ends. */
static void emit_pad(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (!settings(g, m, path, &st)) return;
    const int64_t p = st.padding, pads[8] = {0, 0, p, p, 0, 0, p, p};
    char pn[NAME_MAX_LEN];
    fresh(g, pn);
    initializer(g, pn, ONNX_INT64, 1, (int64_t[]){8}, pads, sizeof pads);
    fresh(g, out);
    node(g, "Pad", 2, (const char *[]){in, pn}, out, 1,
         (attr[]){{.name = "mode", .type = ATTR_STRING, .s = "reflect"}});
}

/* The mean over N, H and W, kept as (1, C, 1, 1); the axes are an attribute
 * up to opset 17 and an input from 18. */
static void reduce_mean(gx *g, const char *in, char *out) {
    const attr keep = {.name = "keepdims", .type = ATTR_INT, .i = 1};
    if (g->opset >= 18) {
        char axes[NAME_MAX_LEN];
        fresh(g, axes);
        initializer(g, axes, ONNX_INT64, 1, (int64_t[]){3}, (int64_t[]){0, 2, 3},
                    3 * sizeof(int64_t));
        fresh(g, out);
        node(g, "ReduceMean", 2, (const char *[]){in, axes}, out, 1, &keep);
        return;
    }
    fresh(g, out);
    node(g, "ReduceMean", 1, (const char *[]){in}, out, 2,
         (attr[]){{.name = "axes", .type = ATTR_INTS, .n = 3, .ints = {0, 2, 3}}, keep});
}

static void binary(gx *g, const char *op, const char *a, const char *b, char *out) {
    fresh(g, out);
    node(g, op, 2, (const char *[]){a, b}, out, 0, NULL);
}

/* BatchNorm2d. With the running statistics (eval) one BatchNormalization;
 * with the batch's (training mode, as duet infer and MMEditing's
 * forward_test run Pix2Pix's generator) the normalisation spelled out:
 * d = x - mean(x), y = d / sqrt(mean(d^2) + eps) * weight + bias, the
 * means over N, H and W (the biased variance, as PyTorch normalises). */
static void emit_bn(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (!settings(g, m, path, &st)) return;
    g->batch_norms++;
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    char full[4][600];
    for (int i = 0; i < 4; i++) param_name(full[i], path, names[i]);
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    if (!g->batch_stats) {
        duet_tensor *t[4] = {w, b, duet_module_buffer(m, "running_mean"),
                             duet_module_buffer(m, "running_var")};
        for (int i = 0; i < 4; i++) init_tensor(g, full[i], t[i]);
        fresh(g, out);
        node(g, "BatchNormalization", 5, (const char *[]){in, full[0], full[1], full[2], full[3]},
             out, 1, (attr[]){{.name = "epsilon", .type = ATTR_FLOAT, .f = st.eps}});
        return;
    }
    char mean[NAME_MAX_LEN], d[NAME_MAX_LEN], sq[NAME_MAX_LEN], var[NAME_MAX_LEN],
        eps[NAME_MAX_LEN], ve[NAME_MAX_LEN], sd[NAME_MAX_LEN], n[NAME_MAX_LEN], s[NAME_MAX_LEN];
    reduce_mean(g, in, mean);
    binary(g, "Sub", in, mean, d);
    binary(g, "Mul", d, d, sq);
    reduce_mean(g, sq, var);
    fresh(g, eps);
    init_float_scalar(g, eps, st.eps);
    binary(g, "Add", var, eps, ve);
    unary(g, "Sqrt", ve, sd);
    binary(g, "Div", d, sd, n);
    init_channels(g, full[0], w->shape[0], w->data);
    init_channels(g, full[1], b->shape[0], b->data);
    binary(g, "Mul", n, full[0], s);
    binary(g, "Add", s, full[1], out);
}

/* InstanceNorm2d: InstanceNormalization, whose scale and bias are ones and
 * zeros without affine (g->channels of them: the layer has no tensor that
 * says how many, the convolution before it does). */
static void emit_in(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (!settings(g, m, path, &st)) return;
    char wn[600], bn[600];
    param_name(wn, path, "weight");
    param_name(bn, path, "bias");
    if (st.affine) {
        init_tensor(g, wn, duet_module_param(m, "weight"));
        init_tensor(g, bn, duet_module_param(m, "bias"));
    } else {
        const int64_t c = g->channels;
        float *v = c > 0 ? malloc((size_t)c * sizeof *v) : NULL;
        if (v == NULL) {
            fail(g, duet__error(c > 0 ? DUET_ENOMEM : DUET_EUNSUPPORTED,
                                "export: %s: %s", path,
                                c > 0 ? "out of memory" : "no convolution before it"));
            return;
        }
        for (int64_t i = 0; i < c; i++) v[i] = 1.0f;
        init_floats(g, wn, (int)c, v);
        for (int64_t i = 0; i < c; i++) v[i] = 0.0f;
        init_floats(g, bn, (int)c, v);
        free(v);
    }
    fresh(g, out);
    node(g, "InstanceNormalization", 3, (const char *[]){in, wn, bn}, out, 1,
         (attr[]){{.name = "epsilon", .type = ATTR_FLOAT, .f = st.eps}});
}

static void emit_relu(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    (void)m, (void)path;
    unary(g, "Relu", in, out);
}

static void emit_tanh(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    (void)m, (void)path;
    unary(g, "Tanh", in, out);
}

static void emit_sigmoid(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    (void)m, (void)path;
    unary(g, "Sigmoid", in, out);
}

static void emit_lrelu(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (settings(g, m, path, &st)) leaky(g, st.negative_slope, in, out);
}

/* Dropout: the identity of eval mode (no node); counted, for the warning
 * that duet infer drops units where the model tests in training mode. */
static void emit_dropout(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_layer_settings st;
    if (!settings(g, m, path, &st)) return;
    if (st.p > 0.0f) g->dropouts++;
    snprintf(out, NAME_MAX_LEN, "%s", in);
}

/* mmcv's ConvModule in its order (duet__conv_module_forward): [act],
 * [padding_layer], conv, [bn | in], [act]; skip_act leaves a leading act
 * out (UnetSkipConnectionBlock applies it itself, for its skip). */
static void emit_cm_from(gx *g, duet_module *m, const char *path, const char *in, char *out,
                         bool skip_act) {
    bool act_first = false;
    int rc = duet_conv_module_act_first(m, &act_first);
    if (rc != DUET_OK) {
        fail(g, duet__error_context(rc, "export: %s", path));
        return;
    }
    const bool has_act = duet_module_child(m, "activate") != NULL;
    char cur[NAME_MAX_LEN], next[NAME_MAX_LEN];
    snprintf(cur, sizeof cur, "%s", in);
    static const char *const order[] = {"activate", "padding_layer", "conv", "bn", "in",
                                        "activate"};
    for (int i = 0; i < 6 && g->rc == DUET_OK; i++) {
        const char *name = order[i];
        if (duet_module_child(m, name) == NULL) continue;
        if (i == 0 && (!act_first || skip_act || !has_act)) continue;
        if (i == 5 && act_first) continue;
        emit_child(g, m, path, name, cur, next);
        memcpy(cur, next, sizeof cur);
    }
    snprintf(out, NAME_MAX_LEN, "%s", cur);
}

static void emit_cm(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    emit_cm_from(g, m, path, in, out, false);
}

/* UnetSkipConnectionBlock (unet_generator.c): the outermost is its model;
 * any other returns cat([act(x), rest(act(x))]) with act the down
 * ConvModule's leading LeakyReLU and rest the model without that act. */
static void emit_unet_block_as(gx *g, duet_module *m, const char *path, const char *in,
                               char *out, bool outermost) {
    char seq_path[512];
    snprintf(seq_path, sizeof seq_path, "%s.model", path);
    duet_module *seq = child(g, m, path, "model");
    if (seq == NULL) return;
    if (outermost) {
        emit_children(g, seq, seq_path, in, out);
        return;
    }
    if (duet_module_child_count(seq) == 0) {
        fail(g, duet__error(DUET_EUNSUPPORTED, "export: %s has an empty model", path));
        return;
    }
    duet_module *down = duet_module_child_at(seq, 0);
    char down_path[600], skip[NAME_MAX_LEN], h[NAME_MAX_LEN];
    snprintf(down_path, sizeof down_path, "%s.%s", seq_path, duet_module_child_name_at(seq, 0));
    snprintf(skip, sizeof skip, "%s", in);
    if (duet_module_child(down, "activate") != NULL)
        emit_child(g, down, down_path, "activate", in, skip);
    emit_cm_from(g, down, down_path, skip, h, true);
    for (size_t i = 1; i < duet_module_child_count(seq) && g->rc == DUET_OK; i++) {
        char next[NAME_MAX_LEN];
        emit_child(g, seq, seq_path, duet_module_child_name_at(seq, i), h, next);
        memcpy(h, next, sizeof h);
    }
    fresh(g, out);
    node(g, "Concat", 2, (const char *[]){skip, h}, out, 1,
         (attr[]){{.name = "axis", .type = ATTR_INT, .i = 1}});
}

static void emit_unet_block(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    emit_unet_block_as(g, m, path, in, out, false);
}

static void emit_unet(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    duet_module *outer = child(g, m, path, "model");
    char sub[512];
    snprintf(sub, sizeof sub, "%s.model", path);
    if (outer != NULL) emit_unet_block_as(g, outer, sub, in, out, true);
}

/* ResidualBlockWithDropout: x + block(x). */
static void emit_resblock_dropout(gx *g, duet_module *m, const char *path, const char *in,
                                  char *out) {
    char h[NAME_MAX_LEN];
    emit_child(g, m, path, "block", in, h);
    add(g, in, h, out);
}

static void emit_model_child(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    emit_child(g, m, path, "model", in, out);
}

static void emit(gx *g, duet_module *m, const char *path, const char *in, char *out) {
    snprintf(out, NAME_MAX_LEN, "%s", in);
    if (g->rc != DUET_OK) return;
    static const struct {
        const char *type;
        void (*fn)(gx *, duet_module *, const char *, const char *, char *);
    } table[] = {
        {"Conv2d", emit_conv},           {"Sequential", emit_children},
        {"ResidualBlockNoBN", emit_resblock}, {"PixelShufflePack", emit_pack},
        {"MSRResNet", emit_msrresnet},   {"ResidualDenseBlock", emit_rdb},
        {"RRDB", emit_rrdb},             {"RRDBNet", emit_rrdbnet},
        {"ConvTranspose2d", emit_tconv}, {"ReflectionPad2d", emit_pad},
        {"BatchNorm2d", emit_bn},        {"InstanceNorm2d", emit_in},
        {"ReLU", emit_relu},             {"LeakyReLU", emit_lrelu},
        {"Tanh", emit_tanh},             {"Sigmoid", emit_sigmoid},
        {"Dropout", emit_dropout},       {"ConvModule", emit_cm},
        {"UnetSkipConnectionBlock", emit_unet_block}, {"UnetGenerator", emit_unet},
        {"ResidualBlockWithDropout", emit_resblock_dropout},
        {"ResnetGenerator", emit_model_child},
    };
    const char *type = duet_module_type_name(m);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(type, table[i].type) == 0) {
            table[i].fn(g, m, path, in, out);
            return;
        }
    fail(g, duet__error(DUET_EUNSUPPORTED, "export: %s is a %s, which duet cannot write as "
                        "ONNX yet (it exports the MSRResNet, RRDBNet, UnetGenerator and "
                        "ResnetGenerator generators)", path, type));
}

/* ---- the model ------------------------------------------------------------------- */

static void value_info(duet__pb *graph, unsigned field, const char *name, int64_t channels) {
    duet__pb dims = {0}, d = {0}, tt = {0}, type = {0}, vi = {0};
    const char *params[4] = {"batch", NULL, "height", "width"};
    for (int i = 0; i < 4; i++) {
        d = (duet__pb){0};
        if (params[i] != NULL)
            duet__pb_string(&d, 2, params[i]);
        else
            duet__pb_uint(&d, 1, (uint64_t)channels);
        duet__pb_message(&dims, 1, &d);
        duet__pb_free(&d);
    }
    duet__pb_uint(&tt, 1, ONNX_FLOAT);
    duet__pb_message(&tt, 2, &dims);
    duet__pb_message(&type, 1, &tt);
    duet__pb_string(&vi, 1, name);
    duet__pb_message(&vi, 2, &type);
    duet__pb_message(graph, field, &vi);
    bool failed = dims.failed || tt.failed || type.failed || vi.failed;
    duet__pb_free(&dims);
    duet__pb_free(&tt);
    duet__pb_free(&type);
    duet__pb_free(&vi);
    if (failed) graph->failed = true;
}

/* The first and last convolutions' channels: the graph's input and output
 * (a Conv2d's weight is (OUT, IN, K, K), a ConvTranspose2d's (IN, OUT, K, K)). */
static int64_t io_channels(duet_module *m, bool first) {
    const size_t n = duet_module_child_count(m);
    for (size_t i = 0; i < n; i++) {
        duet_module *k = duet_module_child_at(m, first ? i : n - 1 - i);
        duet_tensor *w = duet_module_param(k, "weight");
        int64_t c = 0;
        if (w != NULL && duet_module_is(k, "ConvTranspose2d"))
            c = w->shape[first ? 0 : 1];
        else if (w != NULL && w->ndim == 4)
            c = w->shape[first ? 1 : 0];
        else
            c = io_channels(k, first);
        if (c > 0) return c;
    }
    return 0;
}

int duet__onnx_export(duet_module *net, const char *part, const char *path, int opset,
                      bool batch_stats, duet__onnx_stats *stats) {
    gx g = {.rc = DUET_OK, .batch_stats = batch_stats, .opset = opset};
    if (opset < DUET__ONNX_OPSET_MIN || opset > DUET__ONNX_OPSET_MAX)
        g.rc = duet__error(DUET_EINVAL, "export: opset %d; duet writes opsets %d to %d", opset,
                           DUET__ONNX_OPSET_MIN, DUET__ONNX_OPSET_MAX);
    char out[NAME_MAX_LEN];
    if (g.rc == DUET_OK) emit(&g, net, part, "input", out);
    if (g.rc == DUET_OK) {
        /* The graph's output is a node output named "output". */
        node(&g, "Identity", 1, (const char *[]){out}, "output", 0, NULL);
        duet__pb_string(&g.graph, 2, part);
        value_info(&g.graph, 11, "input", io_channels(net, true));
        value_info(&g.graph, 12, "output", io_channels(net, false));
    }
    duet__pb model = {0}, opset_pb = {0};
    if (g.rc == DUET_OK) {
        /* The IR version of the ONNX release that brought the opset: 7
         * for 13 and 14 (ONNX 1.8, 1.9), 8 for 15 to 18 (1.10 to 1.13). */
        duet__pb_uint(&model, 1, opset <= 14 ? 7 : 8);
        duet__pb_string(&model, 2, "duet");
        duet__pb_string(&model, 3, DUET_VERSION_STRING);
        duet__pb_message(&model, 7, &g.graph);
        duet__pb_string(&opset_pb, 1, "");
        duet__pb_uint(&opset_pb, 2, (uint64_t)opset);
        duet__pb_message(&model, 8, &opset_pb);
        if (model.failed || g.graph.failed)
            g.rc = duet__error(DUET_ENOMEM, "export: out of memory building the model");
    }
    if (g.rc == DUET_OK) {
        g.rc = duet__safe_write(path, model.b, model.n);
    }
    *stats = (duet__onnx_stats){(size_t)g.nodes, g.batch_norms, g.dropouts};
    duet__pb_free(&model);
    duet__pb_free(&opset_pb);
    duet__pb_free(&g.graph);
    return g.rc;
}
