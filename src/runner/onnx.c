/* duet export: a generator as an ONNX model (opset 17), written by hand
 * through protobuf.h: no ONNX or protobuf library. The graph maps the
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
#include "runner/runner_internal.h"

#include "runner/protobuf.h"

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
    int stride = 1, pad = 0;
    int rc = duet_conv2d_module_geometry(m, &stride, &pad);
    if (rc != DUET_OK) {
        fail(g, duet__error_context(rc, "export: %s", path));
        return;
    }
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    char wn[600], bn[600];
    snprintf(wn, sizeof wn, "%s.weight", path);
    snprintf(bn, sizeof bn, "%s.bias", path);
    init_tensor(g, wn, w);
    if (b != NULL) init_tensor(g, bn, b);
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
    };
    const char *type = duet_module_type_name(m);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(type, table[i].type) == 0) {
            table[i].fn(g, m, path, in, out);
            return;
        }
    fail(g, duet__error(DUET_EUNSUPPORTED, "export: %s is a %s, which duet cannot write as "
                        "ONNX yet (it exports MSRResNet and RRDBNet generators)", path, type));
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

/* The first and last convolutions' channels: the graph's input and output. */
static int64_t io_channels(duet_module *m, bool first) {
    int64_t c = 0;
    for (size_t i = 0; i < duet_module_child_count(m); i++) {
        duet_module *k = duet_module_child_at(m, first ? i : duet_module_child_count(m) - 1 - i);
        duet_tensor *w = duet_module_param(k, "weight");
        c = w != NULL ? w->shape[first ? 1 : 0] : io_channels(k, first);
        if (c > 0) return c;
    }
    return c;
}

int duet__onnx_export(duet_module *net, const char *part, const char *path, size_t *nodes) {
    gx g = {.rc = DUET_OK};
    char out[NAME_MAX_LEN];
    emit(&g, net, part, "input", out);
    if (g.rc == DUET_OK) {
        /* The graph's output is a node output named "output". */
        node(&g, "Identity", 1, (const char *[]){out}, "output", 0, NULL);
        duet__pb_string(&g.graph, 2, part);
        value_info(&g.graph, 11, "input", io_channels(net, true));
        value_info(&g.graph, 12, "output", io_channels(net, false));
    }
    duet__pb model = {0}, opset = {0};
    if (g.rc == DUET_OK) {
        duet__pb_uint(&model, 1, 8); /* IR version 8: opset 17's */
        duet__pb_string(&model, 2, "duet");
        duet__pb_string(&model, 3, DUET_VERSION_STRING);
        duet__pb_message(&model, 7, &g.graph);
        duet__pb_string(&opset, 1, "");
        duet__pb_uint(&opset, 2, 17);
        duet__pb_message(&model, 8, &opset);
        if (model.failed || g.graph.failed)
            g.rc = duet__error(DUET_ENOMEM, "export: out of memory building the model");
    }
    if (g.rc == DUET_OK) {
        char *tmp = duet__strf("%s.duet-tmp", path);
        int fd = tmp != NULL ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644)
                             : -1;
        FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        int e = f == NULL ? errno : 0;
        if (f != NULL && (fwrite(model.b, 1, model.n, f) != model.n || fflush(f) != 0)) e = errno;
        if (f != NULL && fclose(f) != 0 && e == 0) e = errno;
        if (f == NULL && fd >= 0) close(fd);
        if (e == 0 && rename(tmp, path) != 0) e = errno;
        if (e != 0) {
            if (fd >= 0) unlink(tmp);
            g.rc = duet__error(DUET_EIO, "cannot write %s: %s", path, strerror(e));
        }
        free(tmp);
    }
    *nodes = (size_t)g.nodes;
    duet__pb_free(&model);
    duet__pb_free(&opset);
    duet__pb_free(&g.graph);
    return g.rc;
}
