/* PConvInpaintor as MMEditing 0.16.1 trains it (mmedit/models/inpaintors/
 * pconv_inpaintor.py on one_stage.py, without a discriminator): the
 * generator (PConvEncoderDecoder, pconv.c) on the masked image and the
 * valid-pixel mask 1 - mask spread over the image's channels; fake_img =
 * gt * (1 - mask) + fake_res * mask; generator_loss's terms in its order
 * (loss_l1_hole, loss_l1_valid, loss_composed_percep, loss_composed_style,
 * loss_out_percep, loss_out_style, loss_tv), summed, one generator update.
 * MaskedTVLoss is here too (mmedit/models/losses/pixelwise_loss.py). */
#include "models/models_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- MaskedTVLoss: L1 of vertical and horizontal neighbour differences,
 * weighted by the mask at the first of each pair ----------------------------------- */

typedef struct tv_impl {
    float weight;
} tv_impl;

/* pred[:, :, :-dy, :-dx] - pred[:, :, dy:, dx:] as a (1, 1, 1 + dy, 1 + dx)
 * convolution with kernel (1, -1) over pred's channels one by one (each
 * difference rounds once, as PyTorch's subtraction); mask's slice
 * mask[:, :, :-dy, :-dx] (a constant) as *msl. */
static int neighbour_diff(duet_tensor *pred, const duet_tensor *mask, int dy, int dx,
                          duet_tensor **diff, duet_tensor **msl) {
    *diff = *msl = NULL;
    const int64_t n = pred->shape[0], c = pred->shape[1], h = pred->shape[2], w = pred->shape[3];
    const int64_t mc = mask->shape[1];
    duet_tensor *flat = NULL, *k = NULL, *d = NULL, *m = NULL;
    const float taps[4] = {1.0f, -1.0f, 0.0f, 0.0f}; /* (1 + dy) x (1 + dx) <= 2 x 2 */
    const float *md = NULL;
    float *sl = NULL;
    int rc = duet_reshape(pred, 4, (int64_t[]){n * c, 1, h, w}, &flat);
    if (rc == DUET_OK)
        rc = duet_tensor_from_host_on(duet_tensor_device(pred), 4,
                                      (int64_t[]){1, 1, 1 + dy, 1 + dx}, taps, &k);
    if (rc == DUET_OK) rc = duet_conv2d(flat, k, NULL, 1, 0, &d);
    if (rc == DUET_OK) rc = duet_reshape(d, 4, (int64_t[]){n, c, h - dy, w - dx}, diff);
    /* the mask's slice, cut on the host (in place on the CPU) */
    if (rc == DUET_OK)
        rc = duet_tensor_create_on(duet_tensor_device(mask), 4,
                                   (int64_t[]){n, mc, h - dy, w - dx}, &m);
    if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &md);
    if (rc == DUET_OK) rc = duet_tensor_map_write(m, false, &sl);
    for (int64_t i = 0; rc == DUET_OK && i < n * mc; i++)
        for (int64_t y = 0; y < h - dy; y++)
            memcpy(&sl[(i * (h - dy) + y) * (w - dx)], &md[(i * h + y) * w],
                   (size_t)(w - dx) * sizeof(float));
    duet_tensor_unmap_read(mask, md);
    if (m != NULL) {
        int urc = duet_tensor_unmap_write(m, sl);
        if (rc == DUET_OK) rc = urc;
    }
    duet_tensor_release(flat);
    duet_tensor_release(k);
    duet_tensor_release(d);
    if (rc != DUET_OK) {
        duet_tensor_release(*diff);
        *diff = NULL;
        duet_tensor_release(m);
        return rc;
    }
    *msl = m;
    return DUET_OK;
}

int duet_masked_tv_loss(duet_module *m, duet_tensor *pred, duet_tensor *mask, duet_tensor **out) {
    *out = NULL;
    const tv_impl *t = duet_module_impl(m);
    char sp[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    if (pred->ndim != 4 || mask->ndim != 4 || mask->shape[0] != pred->shape[0] ||
        (mask->shape[1] != 1 && mask->shape[1] != pred->shape[1]) ||
        mask->shape[2] != pred->shape[2] || mask->shape[3] != pred->shape[3] ||
        pred->shape[2] < 2 || pred->shape[3] < 2)
        return duet__error(DUET_ESHAPE, "MaskedTVLoss: pred %s and mask %s; expected (N, C, H, W) "
                           "and (N, 1 or C, H, W), H and W at least 2",
                           duet_shape_str(pred, sp, sizeof sp), duet_shape_str(mask, sm, sizeof sm));
    duet_tensor *dy = NULL, *my = NULL, *dx = NULL, *mx = NULL, *zy = NULL, *zx = NULL,
                *ly = NULL, *lx = NULL;
    int rc = neighbour_diff(pred, mask, 1, 0, &dy, &my);
    if (rc == DUET_OK) rc = neighbour_diff(pred, mask, 0, 1, &dx, &mx);
    if (rc == DUET_OK) rc = duet_tensor_create_like(dy, &zy);
    if (rc == DUET_OK) rc = duet_tensor_create_like(dx, &zx);
    if (rc == DUET_OK) rc = duet_l1_loss_masked(dy, zy, my, t->weight, &ly);
    if (rc == DUET_OK) rc = duet_l1_loss_masked(dx, zx, mx, t->weight, &lx);
    /* loss = x_diff + y_diff */
    if (rc == DUET_OK) rc = duet_add(lx, ly, out);
    duet_tensor *ts[8] = {dy, my, dx, mx, zy, zx, ly, lx};
    for (int i = 0; i < 8; i++) duet_tensor_release(ts[i]);
    return rc;
}

static int tv_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 2) return duet__error(DUET_EINVAL, "MaskedTVLoss takes (pred, mask)");
    return duet_masked_tv_loss(self, in[0], in[1], out);
}

static const duet_module_type tv_type = {"MaskedTVLoss", tv_forward, free};

int duet_masked_tv_loss_module_create(float loss_weight, duet_module **out) {
    *out = NULL;
    tv_impl *t = malloc(sizeof *t);
    if (t == NULL) return duet__error(DUET_ENOMEM, "MaskedTVLoss: out of memory");
    t->weight = loss_weight;
    return duet_module_create(&tv_type, t, out);
}

/* ---- PConvInpaintor ----------------------------------------------------------------- */

typedef struct pconv_inpaintor {
    float l1_hole_weight, l1_valid_weight;
    bool out_percep;
    int nmetrics;
    const char *metrics[4];
} pconv_inpaintor;

duet_pconv_inpaintor_opts duet_pconv_inpaintor_opts_default(void) {
    duet_pconv_inpaintor_opts o;
    memset(&o, 0, sizeof o);
    o.encdec = duet_pconv_encdec_opts_default();
    o.perceptual_loss = duet_perceptual_loss_opts_default();
    o.nmetrics = 1;
    o.metrics[0] = "l1";
    return o;
}

/* generator(masked_img, 1 - mask spread over its channels): fake_res. */
static int generate(duet_module *gen, duet_tensor *masked, duet_tensor *mask,
                    duet_tensor **fake_res) {
    *fake_res = NULL;
    char sx[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    if (masked->ndim != 4 || mask->ndim != 4 || mask->shape[0] != masked->shape[0] ||
        (mask->shape[1] != 1 && mask->shape[1] != masked->shape[1]) ||
        mask->shape[2] != masked->shape[2] || mask->shape[3] != masked->shape[3])
        return duet__error(DUET_ESHAPE, "PConvInpaintor: masked_img %s and mask %s; expected "
                           "(N, C, H, W) and (N, 1 or C, H, W)",
                           duet_shape_str(masked, sx, sizeof sx),
                           duet_shape_str(mask, sm, sizeof sm));
    /* 1 - mask over masked's channels, on the host (in place on the CPU) */
    duet_tensor *valid = NULL;
    const float *md = NULL;
    float *vd = NULL;
    DUET_TRY(duet_tensor_create_like(masked, &valid));
    const int64_t hw = masked->shape[2] * masked->shape[3], c = masked->shape[1];
    const int64_t mc = mask->shape[1];
    int rc = duet_tensor_map_read(mask, &md);
    if (rc == DUET_OK) rc = duet_tensor_map_write(valid, false, &vd);
    for (int64_t i = 0; rc == DUET_OK && i < valid->numel; i++) {
        const int64_t n = i / (c * hw), ch = i / hw % c, p = i % hw;
        vd[i] = 1.0f - md[(n * mc + (mc == 1 ? 0 : ch)) * hw + p];
    }
    duet_tensor_unmap_read(mask, md);
    int urc = duet_tensor_unmap_write(valid, vd);
    if (rc == DUET_OK) rc = urc;
    if (rc == DUET_OK) rc = duet_module_forward2(gen, masked, valid, fake_res);
    duet_tensor_release(valid);
    return rc;
}

/* term = the loss; logs it under key; adds it to terms. */
static int add_term(duet_tensor *term, const char *key, duet_tensor **terms, int *n,
                    duet_log_vars *log) {
    if (term == NULL) return DUET_OK;
    terms[(*n)++] = term;
    return duet__log_scalar(log, key, term);
}

/* The perceptual and style terms (either may be NULL) as <prefix>_percep and
 * <prefix>_style; both are kept in terms whatever happens. */
static int add_terms(duet_tensor *percep, duet_tensor *style, const char *prefix,
                     duet_tensor **terms, int *n, duet_log_vars *log) {
    char k1[32], k2[32];
    snprintf(k1, sizeof k1, "%s_percep", prefix);
    snprintf(k2, sizeof k2, "%s_style", prefix);
    int rc = add_term(percep, k1, terms, n, log);
    int rc2 = add_term(style, k2, terms, n, log);
    return rc != DUET_OK ? rc : rc2;
}

static int pconv_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                            duet_log_vars *log) {
    pconv_inpaintor *p = duet_model_impl(m);
    duet_tensor *gt = NULL, *mask = NULL, *masked = NULL;
    duet_optimizer *opt_g = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet_batch_require(batch, "gt_img", &gt));
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    duet_module *percep = duet_model_part(m, "loss_percep"), *tv = duet_model_part(m, "loss_tv");
    duet_tensor *fake_res = NULL, *fake_img = NULL, *valid = NULL, *loss = NULL;
    duet_tensor *terms[8] = {NULL};
    int n = 0;
    int rc = generate(gen, masked, mask, &fake_res);
    if (rc == DUET_OK) rc = duet_mask_composite(gt, fake_res, mask, &fake_img);
    if (rc == DUET_OK && p->l1_hole_weight > 0.0f) {
        duet_tensor *t = NULL;
        rc = duet_l1_loss_masked(fake_res, gt, mask, p->l1_hole_weight, &t);
        if (rc == DUET_OK) rc = add_term(t, "loss_l1_hole", terms, &n, log);
    }
    if (rc == DUET_OK && p->l1_valid_weight > 0.0f) {
        duet_tensor *t = NULL;
        rc = duet__inpaint_valid_mask(mask, &valid);
        if (rc == DUET_OK) rc = duet_l1_loss_masked(fake_res, gt, valid, p->l1_valid_weight, &t);
        if (rc == DUET_OK) rc = add_term(t, "loss_l1_valid", terms, &n, log);
    }
    if (rc == DUET_OK && percep != NULL) {
        duet_tensor *pc = NULL, *st = NULL;
        rc = duet_perceptual_loss(percep, fake_img, gt, &pc, &st);
        if (rc == DUET_OK) rc = add_terms(pc, st, "loss_composed", terms, &n, log);
        if (rc == DUET_OK && p->out_percep) {
            rc = duet_perceptual_loss(percep, fake_res, gt, &pc, &st);
            if (rc == DUET_OK) rc = add_terms(pc, st, "loss_out", terms, &n, log);
        }
    }
    if (rc == DUET_OK && tv != NULL) {
        duet_tensor *t = NULL;
        rc = duet_module_forward2(tv, fake_img, mask, &t);
        if (rc == DUET_OK) rc = add_term(t, "loss_tv", terms, &n, log);
    }
    if (rc == DUET_OK && n == 0)
        rc = duet__error(DUET_ESTATE, "PConvInpaintor: no loss to train on (no loss_l1_hole, "
                         "loss_l1_valid, loss_composed_percep or loss_tv)");
    /* parse_losses: the sum in the dict's order, logged as loss */
    if (rc == DUET_OK) {
        loss = duet_tensor_retain(terms[0]);
        for (int i = 1; i < n && rc == DUET_OK; i++) {
            duet_tensor *sum = NULL;
            rc = duet_add(loss, terms[i], &sum);
            duet_tensor_release(loss);
            loss = sum;
        }
    }
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", loss);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt_g);
        rc = duet_backward(loss);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    for (int i = 0; i < n; i++) duet_tensor_release(terms[i]);
    duet_tensor_release(fake_res);
    duet_tensor_release(fake_img);
    duet_tensor_release(valid);
    duet_tensor_release(loss);
    if (rc != DUET_OK) duet_tape_clear();
    return rc;
}

/* forward on cat(masked_img, mask) (N, C + 1, H, W): forward_test's
 * fake_res * mask + masked_img * (1 - mask). */
static int pconv_forward(duet_model *m, duet_tensor *x, duet_tensor **out) {
    *out = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet__need_part(m, "generator", &gen));
    if (x->ndim != 4 || x->shape[1] < 2)
        return duet__error(DUET_ESHAPE, "PConvInpaintor: forward takes cat(masked_img, mask), "
                           "(N, C + 1, H, W)");
    const int64_t c = x->shape[1] - 1;
    duet_tensor *masked = NULL, *mask = NULL, *fake_res = NULL;
    int rc = duet_slice_channels(x, 0, c, &masked);
    if (rc == DUET_OK) rc = duet_slice_channels(x, c, 1, &mask);
    if (rc == DUET_OK) rc = generate(gen, masked, mask, &fake_res);
    if (rc == DUET_OK) rc = duet_mask_composite(masked, fake_res, mask, out);
    duet_tensor_release(masked);
    duet_tensor_release(mask);
    duet_tensor_release(fake_res);
    return rc;
}

static int pconv_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    pconv_inpaintor *p = duet_model_impl(m);
    duet_tensor *mask = NULL, *masked = NULL, *fake_res = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    duet_tensor *gt = duet_batch_tensor_get(batch, "gt_img");
    int rc = generate(gen, masked, mask, &fake_res);
    if (rc == DUET_OK) rc = duet_mask_composite(masked, fake_res, mask, &out->output);
    out->nsamples = masked->shape[0];
    duet_log_vars_clear(&out->metrics);
    if (rc == DUET_OK && gt != NULL)
        rc = duet_inpainting_evaluate(p->metrics, p->nmetrics, fake_res, out->output, gt, mask,
                                      &out->metrics);
    duet_tensor_release(fake_res);
    return rc;
}

static const char *pconv_input_key(duet_model *m) {
    (void)m;
    return "masked_img";
}

static const char *const eval_parts[] = {"generator", NULL};

static const duet_module_type pconv_module_type = {"PConvInpaintor", NULL, NULL};

static const duet_model_ops pconv_ops = {
    .name = "PConvInpaintor",
    .forward = pconv_forward,
    .train_step = pconv_train_step,
    .val_step = pconv_val_step,
    .destroy = free,
    .input_key = pconv_input_key,
    .eval_parts = eval_parts,
};

int duet_pconv_inpaintor_create(const duet_pconv_inpaintor_opts *o, duet_rng *rng,
                                duet_model **out) {
    *out = NULL;
    if (o->nmetrics < 0 || o->nmetrics > 4)
        return duet__error(DUET_EINVAL, "PConvInpaintor: %d metrics (0 to 4)", o->nmetrics);
    DUET_TRY(duet__inpaint_check_metrics("PConvInpaintor", o->metrics, o->nmetrics));
    pconv_inpaintor *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "PConvInpaintor: out of memory");
    p->l1_hole_weight = o->l1_hole_weight;
    p->l1_valid_weight = o->l1_valid_weight;
    p->out_percep = o->out_percep;
    p->nmetrics = o->nmetrics;
    for (int j = 0; j < o->nmetrics; j++) p->metrics[j] = o->metrics[j];
    duet_module *root = NULL, *part = NULL;
    int rc = duet_module_create(&pconv_module_type, NULL, &root);
    if (rc != DUET_OK) {
        free(p);
        return rc;
    }
    /* MMEditing's attribute names: generator (from encdec), loss_percep
     * (from loss_composed_percep; its frozen VGG is in the state dict),
     * loss_tv. */
    rc = duet_pconv_encdec_create(&o->encdec, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generator", part);
    if (rc == DUET_OK && o->perceptual) {
        rc = duet_perceptual_loss_create(&o->perceptual_loss, rng, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_percep", part);
    }
    if (rc == DUET_OK && o->tv_weight > 0.0f) {
        rc = duet_masked_tv_loss_module_create(o->tv_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_tv", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "PConvInpaintor");
        duet_module_destroy(root);
        free(p);
        return rc;
    }
    return duet_model_create(&pconv_ops, p, root, out);
}
