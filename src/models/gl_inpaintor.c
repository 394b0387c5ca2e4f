/* GLInpaintor as MMEditing 0.16.1 trains it (mmedit/models/inpaintors/
 * gl_inpaintor.py on one_stage.py): the schedule of the Global&Local paper,
 * generator alone with L1 up to iter_tc, the discriminators alone up to
 * iter_td, then both (duet/models.h has the step in full). Each part is
 * unused for long stretches; under the wrapper each has its own DDP, which
 * takes a forward without a backward (the generator's in the
 * discriminator-only stretch) like Pix2Pix's disc_init_steps. */
#include "models/models_internal.h"

#include <inttypes.h>
#include <string.h>

typedef struct gl_inpaintor {
    float l1_hole_weight, l1_valid_weight;
    int disc_step;
    int64_t iter_tc, iter_td;
    int local_h, local_w;
    int nmetrics;
    const char *metrics[4];
    int64_t cur_iter;
    int disc_step_count;
} gl_inpaintor;

duet_gl_inpaintor_opts duet_gl_inpaintor_opts_default(void) {
    duet_gl_inpaintor_opts o;
    memset(&o, 0, sizeof o);
    o.disc.global = duet_multi_layer_disc_opts_default();
    o.disc.local = duet_multi_layer_disc_opts_default();
    o.loss_gan = duet_gan_loss_opts_default();
    o.l1_hole_weight = 1.0f;
    o.disc_step = 1;
    o.local_h = o.local_w = 128;
    o.nmetrics = 1;
    o.metrics[0] = "l1";
    return o;
}

/* forward on cat(masked_img, mask): the composite. */
static int inpaint_input(duet_tensor *masked, duet_tensor *mask, duet_tensor **x) {
    duet_tensor *pair[2] = {masked, mask};
    return duet_concat_channels(2, pair, x);
}

/* One half of the discriminator update (forward_train_d, then its own
 * backward): the GAN loss of disc(img, local) against `real`, plus half the
 * disc shift loss of it when the model has one. */
static int disc_half(duet_model *m, duet_tensor *img, duet_tensor *local, bool real,
                     duet_log_vars *log) {
    duet_module *disc = duet_model_part(m, "disc"), *gan = duet_model_part(m, "loss_gan");
    duet_module *shift = duet_model_part(m, "loss_disc_shift");
    duet_tensor *pred = NULL, *l = NULL, *s = NULL, *hs = NULL, *total = NULL;
    int rc = duet_module_forward2(disc, img, local, &pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, pred, real, true, &l);
    if (rc == DUET_OK) rc = duet__log_scalar(log, real ? "real_loss" : "fake_loss", l);
    if (rc == DUET_OK && shift != NULL) {
        rc = duet_module_forward(shift, l, &s);
        if (rc == DUET_OK) rc = duet_scale(s, 0.5f, &hs);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_disc_shift", hs);
        if (rc == DUET_OK) rc = duet_add(l, hs, &total);
    } else if (rc == DUET_OK) {
        total = duet_tensor_retain(l);
    }
    /* parse_losses' total, MMEditing's log "loss" (the last group's). */
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", total);
    /* The generator's graph stays for the generator's update. */
    if (rc == DUET_OK) rc = duet_backward_keep_unreached(total);
    duet_tensor *ts[5] = {pred, l, s, hs, total};
    for (int i = 0; i < 5; i++) duet_tensor_release(ts[i]);
    return rc;
}

static int disc_update(duet_model *m, duet_tensor *fake_img, duet_tensor *fake_local,
                       duet_tensor *gt, duet_tensor *gt_local, duet_optimizer *opt_d,
                       duet_log_vars *log) {
    duet_tensor *fd = NULL, *fld = NULL;
    duet_module_set_requires_grad(duet_model_part(m, "disc"), true);
    duet_optimizer_zero_grad(opt_d);
    int rc = duet_detach(fake_img, &fd);
    if (rc == DUET_OK) rc = duet_detach(fake_local, &fld);
    if (rc == DUET_OK) rc = disc_half(m, fd, fld, false, log);
    if (rc == DUET_OK) rc = disc_half(m, gt, gt_local, true, log);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor_release(fd);
    duet_tensor_release(fld);
    return rc;
}

/* generator_loss, summed in MMEditing's order, then the update. */
static int gen_update(duet_model *m, duet_tensor *fake_res, duet_tensor *fake_img,
                      duet_tensor *fake_local, duet_tensor *gt, duet_tensor *mask,
                      duet_optimizer *opt_g, duet_log_vars *log) {
    gl_inpaintor *p = duet_model_impl(m);
    duet_module *disc = duet_model_part(m, "disc"), *gan = duet_model_part(m, "loss_gan");
    duet_tensor *terms[3] = {NULL, NULL, NULL}, *pred = NULL, *valid = NULL, *loss = NULL;
    int n = 0, rc = DUET_OK;
    duet_module_set_requires_grad(disc, false);
    if (p->cur_iter > p->iter_td) {
        rc = duet_module_forward2(disc, fake_img, fake_local, &pred);
        if (rc == DUET_OK) rc = duet_gan_loss(gan, pred, true, false, &terms[n++]);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_g_fake", terms[n - 1]);
    }
    if (rc == DUET_OK && p->l1_hole_weight > 0.0f) {
        rc = duet_l1_loss_masked(fake_res, gt, mask, p->l1_hole_weight, &terms[n++]);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_l1_hole", terms[n - 1]);
    }
    if (rc == DUET_OK && p->l1_valid_weight > 0.0f) {
        rc = duet__inpaint_valid_mask(mask, &valid);
        if (rc == DUET_OK) rc = duet_l1_loss_masked(fake_res, gt, valid, p->l1_valid_weight,
                                                    &terms[n++]);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_l1_valid", terms[n - 1]);
    }
    if (rc == DUET_OK && n == 0)
        rc = duet__error(DUET_ESTATE, "GLInpaintor: a generator update with no loss (no "
                         "loss_l1_hole, no loss_l1_valid, and cur_iter %" PRId64 " <= iter_td "
                         "%" PRId64 ")", p->cur_iter, p->iter_td);
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
    if (rc == DUET_OK) duet_optimizer_zero_grad(opt_g);
    if (rc == DUET_OK) rc = duet_backward(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    for (int i = 0; i < 3; i++) duet_tensor_release(terms[i]);
    duet_tensor_release(pred);
    duet_tensor_release(valid);
    duet_tensor_release(loss);
    return rc;
}

static int gl_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                         duet_log_vars *log) {
    gl_inpaintor *p = duet_model_impl(m);
    duet_tensor *gt = NULL, *mask = NULL, *masked = NULL, *bbox = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *gen = NULL, *disc = NULL;
    DUET_TRY(duet_batch_require(batch, "gt_img", &gt));
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    DUET_TRY(duet_batch_require(batch, "mask_bbox", &bbox));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    DUET_TRY(duet_optimizer_set_require(opts, "disc", &opt_d));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    DUET_TRY(duet__need_part(m, "disc", &disc));
    const int64_t n = gt->shape[0];
    int64_t *tops = NULL, *lefts = NULL;
    duet_tensor *x = NULL, *fake_res = NULL, *fake_img = NULL, *fake_local = NULL,
                *gt_local = NULL;
    int rc = duet__inpaint_local_boxes("GLInpaintor", p->local_h, p->local_w, bbox, n, &tops,
                                       &lefts);
    if (rc == DUET_OK) rc = inpaint_input(masked, mask, &x);
    if (rc == DUET_OK) rc = duet_module_forward(gen, x, &fake_res);
    if (rc == DUET_OK) rc = duet_mask_composite(gt, fake_res, mask, &fake_img);
    if (rc == DUET_OK)
        rc = duet_crop_boxes(fake_img, tops, lefts, p->local_h, p->local_w, &fake_local);
    if (rc == DUET_OK) rc = duet_crop_boxes(gt, tops, lefts, p->local_h, p->local_w, &gt_local);
    bool done = false;
    if (rc == DUET_OK && p->disc_step > 0 && p->cur_iter > p->iter_tc) {
        rc = disc_update(m, fake_img, fake_local, gt, gt_local, opt_d, log);
        if (rc == DUET_OK) {
            p->disc_step_count = (p->disc_step_count + 1) % p->disc_step;
            done = p->disc_step_count != 0 || p->cur_iter <= p->iter_td;
        }
    }
    if (rc == DUET_OK && !done && (p->cur_iter <= p->iter_tc || p->cur_iter > p->iter_td))
        rc = gen_update(m, fake_res, fake_img, fake_local, gt, mask, opt_g, log);
    duet_module_set_requires_grad(disc, true);
    duet_tensor *ts[5] = {x, fake_res, fake_img, fake_local, gt_local};
    for (int i = 0; i < 5; i++) duet_tensor_release(ts[i]);
    free(tops);
    free(lefts);
    /* Without a generator update (or after a failure) the generator's graph
     * is still recorded; it belongs to this step only. */
    duet_tape_clear();
    DUET_TRY(rc);
    p->cur_iter++;
    return DUET_OK;
}

static int gl_forward(duet_model *m, duet_tensor *x, duet_tensor **out) {
    *out = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet__need_part(m, "generator", &gen));
    if (x->ndim != 4 || x->shape[1] != 4)
        return duet__error(DUET_ESHAPE, "GLInpaintor: forward takes cat(masked_img, mask), "
                           "(N, 4, H, W)");
    duet_tensor *masked = NULL, *mask = NULL, *fake_res = NULL;
    int rc = duet_slice_channels(x, 0, 3, &masked);
    if (rc == DUET_OK) rc = duet_slice_channels(x, 3, 1, &mask);
    if (rc == DUET_OK) rc = duet_module_forward(gen, x, &fake_res);
    /* forward_test's fake_res * mask + masked_img * (1. - mask). */
    if (rc == DUET_OK) rc = duet_mask_composite(masked, fake_res, mask, out);
    duet_tensor_release(masked);
    duet_tensor_release(mask);
    duet_tensor_release(fake_res);
    return rc;
}

/* forward_test with metrics (duet_inpainting_evaluate). */
static int gl_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    gl_inpaintor *p = duet_model_impl(m);
    duet_tensor *mask = NULL, *masked = NULL, *x = NULL, *fake_res = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    duet_tensor *gt = duet_batch_tensor_get(batch, "gt_img");
    int rc = inpaint_input(masked, mask, &x);
    if (rc == DUET_OK) rc = duet_module_forward(gen, x, &fake_res);
    if (rc == DUET_OK) rc = duet_mask_composite(masked, fake_res, mask, &out->output);
    out->nsamples = masked->shape[0];
    duet_log_vars_clear(&out->metrics);
    if (rc == DUET_OK && gt != NULL)
        rc = duet_inpainting_evaluate(p->metrics, p->nmetrics, fake_res, out->output, gt, mask,
                                      &out->metrics);
    duet_tensor_release(x);
    duet_tensor_release(fake_res);
    return rc;
}

static const char *const gl_keys[] = {"gl_inpaintor.cur_iter", "gl_inpaintor.disc_step_count"};

static int gl_save_state(duet_model *m, duet_st_writer *w) {
    const gl_inpaintor *p = duet_model_impl(m);
    DUET_TRY(duet__inpaint_meta_set_int(w, gl_keys[0], p->cur_iter));
    return duet__inpaint_meta_set_int(w, gl_keys[1], p->disc_step_count);
}

static int gl_load_state(duet_model *m, const duet_st *ckpt) {
    gl_inpaintor *p = duet_model_impl(m);
    long long it = 0, count = 0;
    DUET_TRY(duet__inpaint_meta_int(ckpt, "GLInpaintor", gl_keys[0], 0, INT64_MAX, &it));
    DUET_TRY(duet__inpaint_meta_int(ckpt, "GLInpaintor", gl_keys[1], 0,
                                    p->disc_step > 0 ? p->disc_step - 1 : 0, &count));
    p->cur_iter = it;
    p->disc_step_count = (int)count;
    return DUET_OK;
}

static const char *gl_input_key(duet_model *m) {
    (void)m;
    return "masked_img";
}

static const char *const eval_parts[] = {"generator", NULL};

static const duet_module_type gl_module_type = {"GLInpaintor", NULL, NULL};

static const duet_model_ops gl_ops = {
    .name = "GLInpaintor",
    .forward = gl_forward,
    .train_step = gl_train_step,
    .val_step = gl_val_step,
    .destroy = free,
    .save_state = gl_save_state,
    .load_state = gl_load_state,
    .input_key = gl_input_key,
    .eval_parts = eval_parts,
};

int duet_gl_inpaintor_create(const duet_gl_inpaintor_opts *o, duet_rng *rng, duet_model **out) {
    *out = NULL;
    if (o->disc_step < 0 || o->iter_tc < 0 || o->iter_td < 0 || o->local_h < 1 ||
        o->local_w < 1 || o->nmetrics < 0 || o->nmetrics > 4)
        return duet__error(DUET_EINVAL, "GLInpaintor: disc_step %d, iter_tc %" PRId64 ", iter_td "
                           "%" PRId64 " must be >= 0 and local_size %dx%d positive",
                           o->disc_step, o->iter_tc, o->iter_td, o->local_h, o->local_w);
    /* MMEditing's train_step has no outputs to return there and fails. */
    if (o->disc_step == 0 && o->iter_tc < o->iter_td)
        return duet__error(DUET_EINVAL, "GLInpaintor: disc_step 0 leaves iterations %" PRId64
                           "..%" PRId64 " (after iter_tc, up to iter_td) with nothing to train",
                           o->iter_tc + 1, o->iter_td);
    DUET_TRY(duet__inpaint_check_metrics("GLInpaintor", o->metrics, o->nmetrics));
    gl_inpaintor *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "GLInpaintor: out of memory");
    p->l1_hole_weight = o->l1_hole_weight;
    p->l1_valid_weight = o->l1_valid_weight;
    p->disc_step = o->disc_step;
    p->iter_tc = o->iter_tc;
    p->iter_td = o->iter_td;
    p->local_h = o->local_h;
    p->local_w = o->local_w;
    p->nmetrics = o->nmetrics;
    for (int j = 0; j < o->nmetrics; j++) p->metrics[j] = o->metrics[j];
    p->cur_iter = o->start_iter;
    duet_module *root = NULL, *part = NULL;
    int rc = duet_module_create(&gl_module_type, NULL, &root);
    if (rc != DUET_OK) {
        free(p);
        return rc;
    }
    rc = duet_gl_encdec_create(&o->encdec, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generator", part);
    if (rc == DUET_OK) rc = duet_gl_discs_create(&o->disc.global, &o->disc.local, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "disc", part);
    if (rc == DUET_OK) rc = duet_gan_loss_create(&o->loss_gan, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_gan", part);
    if (rc == DUET_OK && o->disc_shift_weight > 0.0f) {
        rc = duet_disc_shift_loss_module_create(o->disc_shift_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_disc_shift", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "GLInpaintor");
        duet_module_destroy(root);
        free(p);
        return rc;
    }
    return duet_model_create(&gl_ops, p, root, out);
}

static gl_inpaintor *impl_of(duet_model *m) {
    DUET_ASSERT(strcmp(duet_model_type_name(m), "GLInpaintor") == 0);
    return duet_model_impl(m);
}

int64_t duet_gl_inpaintor_cur_iter(duet_model *m) { return impl_of(m)->cur_iter; }
int duet_gl_inpaintor_disc_step_count(duet_model *m) { return impl_of(m)->disc_step_count; }
