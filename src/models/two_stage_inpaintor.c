/* TwoStageInpaintor and DeepFillv1Inpaintor as MMEditing 0.16.1 trains them
 * (mmedit/models/inpaintors/two_stage.py, deepfillv1.py): DeepFill's
 * two-stage generator, the discriminator on stage 2's composite (fake,
 * real, then WGAN-GP's penalty), disc_step discriminator updates per
 * generator update (duet/models.h has the step in full). DeepFillv1's two
 * discriminators are reached one by one through their DDP
 * (duet_ddp_forward_child), the penalties too, so their gradients are
 * averaged where MMEditing's get_module leaves them local
 * (docs/architecture.md). */
#include "models/models_internal.h"

#include "duet/comm.h"
#include "duet/ddp.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct two_stage {
    bool v1;
    const char *name;
    float l1_hole_weight, l1_valid_weight;
    int nstage[2];
    duet_inpaint_loss_kind stage[2][3];
    bool input_with_ones, disc_input_with_mask;
    int disc_step;
    int local_h, local_w;
    int nmetrics;
    const char *metrics[4];
    int disc_step_count;
    duet_rng gp_rng;
} two_stage;

duet_two_stage_inpaintor_opts duet_two_stage_inpaintor_opts_default(void) {
    duet_two_stage_inpaintor_opts o;
    memset(&o, 0, sizeof o);
    o.encdec = duet_deepfill_encdec_opts_default();
    o.disc = duet_multi_layer_disc_opts_default();
    o.discs.global = duet_multi_layer_disc_opts_default();
    o.discs.local = duet_multi_layer_disc_opts_default();
    o.loss_gan = duet_gan_loss_opts_default();
    o.l1_hole_weight = 1.0f;
    o.nstage1 = 1;
    o.stage1[0] = DUET_INPAINT_LOSS_L1_HOLE;
    o.nstage2 = 2;
    o.stage2[0] = DUET_INPAINT_LOSS_L1_HOLE;
    o.stage2[1] = DUET_INPAINT_LOSS_GAN;
    o.input_with_ones = true;
    o.disc_step = 1;
    o.local_h = o.local_w = 128;
    o.nmetrics = 1;
    o.metrics[0] = "l1";
    return o;
}

/* The generator's input: cat(masked_img, [ones,] mask). */
static int gen_input(const two_stage *p, duet_tensor *masked, duet_tensor *mask,
                     duet_tensor **x) {
    duet_tensor *ones = NULL;
    if (p->input_with_ones) {
        DUET_TRY(duet_tensor_create_like(mask, &ones));
        const int rc = duet_tensor_fill(ones, 1.0f);
        if (rc != DUET_OK) {
            duet_tensor_release(ones);
            return rc;
        }
    }
    duet_tensor *parts[3] = {masked, ones != NULL ? ones : mask, mask};
    int rc = duet_concat_channels(p->input_with_ones ? 3 : 2, parts, x);
    duet_tensor_release(ones);
    return rc;
}

/* stage1 and stage2 of the generator (through its DDP when it has one: the
 * module's own forward gives both along the channels). */
static int gen_forward(duet_module *gen, duet_tensor *x, duet_tensor **s1, duet_tensor **s2) {
    *s1 = *s2 = NULL;
    duet_tensor *both = NULL;
    DUET_TRY(duet_module_forward(gen, x, &both));
    int rc = duet_slice_channels(both, 0, 3, s1);
    if (rc == DUET_OK) rc = duet_slice_channels(both, 3, 3, s2);
    duet_tensor_release(both);
    return rc;
}

/* DeepFillv1Discriminators' network `child` on x, through the DDP when the
 * part is one. */
typedef struct child_fwd {
    duet_module *disc;
    const char *child;
} child_fwd;

static int disc_child_forward(void *ctx, duet_tensor *x, duet_tensor **out) {
    const child_fwd *c = ctx;
    if (duet_is_ddp(c->disc)) return duet_ddp_forward_child(c->disc, c->child, 1, &x, out);
    duet_module *net = duet_module_child(c->disc, c->child);
    if (net == NULL)
        return duet__error(DUET_ESTATE, "DeepFillv1Inpaintor: the disc (a %s) has no %s",
                           duet_module_type_name(c->disc), c->child);
    return duet_module_forward(net, x, out);
}

/* The discriminator's predictions on an image (and, DeepFillv1, its local
 * patch): preds[0] and with DeepFillv1 preds[1]; TwoStageInpaintor with
 * disc_input_with_mask gets cat(img, mask). */
static int disc_preds(duet_model *m, duet_tensor *img, duet_tensor *local, duet_tensor *mask,
                      duet_tensor *preds[2]) {
    two_stage *p = duet_model_impl(m);
    duet_module *disc = duet_model_part(m, "disc");
    if (p->v1) {
        child_fwd g = {disc, "global_disc"}, l = {disc, "local_disc"};
        DUET_TRY(disc_child_forward(&g, img, &preds[0]));
        return disc_child_forward(&l, local, &preds[1]);
    }
    if (!p->disc_input_with_mask) return duet_module_forward(disc, img, &preds[0]);
    duet_tensor *x = NULL;
    DUET_TRY(duet_concat_channels(2, (duet_tensor *[]){img, mask}, &x));
    int rc = duet_module_forward(disc, x, &preds[0]);
    duet_tensor_release(x);
    return rc;
}

/* Sums terms[0..n) in order into *out (a new reference). */
static int sum_terms(duet_tensor *const *terms, int n, duet_tensor **out) {
    *out = duet_tensor_retain(terms[0]);
    for (int i = 1; i < n; i++) {
        duet_tensor *s = NULL;
        const int rc = duet_add(*out, terms[i], &s);
        duet_tensor_release(*out);
        *out = s;
        DUET_TRY(rc);
    }
    return DUET_OK;
}

/* forward_train_d and its own backward: the GAN loss of each prediction
 * against `real` (fake_loss / real_loss, DeepFillv1 _global and _local),
 * then half the disc shift loss of each (loss_disc_shift[_global, _local]),
 * summed in MMEditing's dict order. */
static int disc_half(duet_model *m, duet_tensor *img, duet_tensor *local, duet_tensor *mask,
                     bool real, duet_log_vars *log) {
    two_stage *p = duet_model_impl(m);
    duet_module *gan = duet_model_part(m, "loss_gan");
    duet_module *shift = duet_model_part(m, "loss_disc_shift");
    static const char *const v1_suffix[2] = {"_global", "_local"};
    const int npred = p->v1 ? 2 : 1;
    duet_tensor *preds[2] = {NULL, NULL}, *terms[4] = {NULL}, *shifts[2] = {NULL, NULL},
                *total = NULL;
    int nterms = 0;
    char name[DUET_LOG_VAR_NAME_MAX];
    int rc = disc_preds(m, img, local, mask, preds);
    for (int i = 0; i < npred && rc == DUET_OK; i++) {
        rc = duet_gan_loss(gan, preds[i], real, true, &terms[nterms]);
        snprintf(name, sizeof name, "%s%s", real ? "real_loss" : "fake_loss",
                 p->v1 ? v1_suffix[i] : "");
        if (rc == DUET_OK) rc = duet__log_scalar(log, name, terms[nterms]);
        nterms++;
    }
    for (int i = 0; i < npred && rc == DUET_OK && shift != NULL; i++) {
        rc = duet_module_forward(shift, terms[i], &shifts[i]);
        if (rc == DUET_OK) rc = duet_scale(shifts[i], 0.5f, &terms[nterms]);
        snprintf(name, sizeof name, "loss_disc_shift%s", p->v1 ? v1_suffix[i] : "");
        if (rc == DUET_OK) rc = duet__log_scalar(log, name, terms[nterms]);
        nterms++;
    }
    if (rc == DUET_OK) rc = sum_terms(terms, nterms, &total);
    /* parse_losses' total, MMEditing's log "loss" (the last group's). */
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", total);
    /* The generator's graph stays for the generator's update. */
    if (rc == DUET_OK) rc = duet_backward_keep_unreached(total);
    duet_tensor *ts[] = {preds[0], preds[1], terms[0], terms[1], terms[2], terms[3], shifts[0],
                         shifts[1], total};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) duet_tensor_release(ts[i]);
    return rc;
}

/* n alphas of this rank: the global batch's n * world draws from the
 * model's rng, this rank's slice of them (world and rank of the disc's
 * DDP; 1 and 0 without one). */
static int draw_alpha(duet_model *m, int64_t n, float **alpha) {
    two_stage *p = duet_model_impl(m);
    duet_module *disc = duet_model_part(m, "disc");
    duet_comm *comm = duet_is_ddp(disc) ? duet_ddp_comm(disc) : NULL;
    const int world = comm != NULL ? duet_comm_size(comm) : 1;
    const int rank = comm != NULL ? duet_comm_rank(comm) : 0;
    *alpha = malloc((size_t)n * sizeof **alpha);
    if (*alpha == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", p->name);
    for (int64_t i = 0; i < n * world; i++) {
        const float a = duet_rng_uniform(&p->gp_rng);
        if (i / n == rank) (*alpha)[i % n] = a;
    }
    return DUET_OK;
}

/* One penalty (loss_gp's weight) through fwd(ctx, .). */
static int penalty(duet_model *m, duet__disc_fwd_fn fwd, void *ctx, duet_tensor *real,
                   duet_tensor *fake, duet_tensor *mask, duet_tensor **out) {
    const two_stage *p = duet_model_impl(m);
    const float w = duet__gradient_penalty_weight(duet_model_part(m, "loss_gp"));
    float *alpha = NULL;
    int rc = draw_alpha(m, real->shape[0], &alpha);
    if (rc == DUET_OK) rc = duet__gradient_penalty_fwd(fwd, ctx, real, fake, mask, w, alpha, NULL, out);
    free(alpha);
    if (rc != DUET_OK) duet__error_context(rc, "%s", p->name);
    return rc;
}

static int module_fwd(void *disc, duet_tensor *x, duet_tensor **out) {
    return duet_module_forward(disc, x, out);
}

/* The penalty's backward: loss_gp on the image with the mask, or
 * DeepFillv1's loss_gp_global (with the mask) + loss_gp_local. */
static int penalty_backward(duet_model *m, duet_tensor *gt, duet_tensor *fake_img,
                            duet_tensor *gt_local, duet_tensor *fake_local, duet_tensor *mask,
                            duet_log_vars *log) {
    two_stage *p = duet_model_impl(m);
    duet_module *disc = duet_model_part(m, "disc");
    duet_tensor *g = NULL, *l = NULL, *total = NULL;
    int rc;
    if (p->v1) {
        child_fwd cg = {disc, "global_disc"}, cl = {disc, "local_disc"};
        rc = penalty(m, disc_child_forward, &cg, gt, fake_img, mask, &g);
        if (rc == DUET_OK) rc = penalty(m, disc_child_forward, &cl, gt_local, fake_local, NULL, &l);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gp_global", g);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gp_local", l);
        if (rc == DUET_OK) rc = duet_add(g, l, &total);
    } else {
        rc = penalty(m, module_fwd, disc, gt, fake_img, mask, &g);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gp", g);
        if (rc == DUET_OK) total = duet_tensor_retain(g);
    }
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", total);
    if (rc == DUET_OK) rc = duet_backward_keep_unreached(total);
    duet_tensor_release(g);
    duet_tensor_release(l);
    duet_tensor_release(total);
    return rc;
}

static int disc_update(duet_model *m, duet_tensor *fake_img, duet_tensor *fake_local,
                       duet_tensor *gt, duet_tensor *gt_local, duet_tensor *mask,
                       duet_optimizer *opt_d, duet_log_vars *log) {
    duet_tensor *fd = NULL, *fld = NULL;
    duet_module_set_requires_grad(duet_model_part(m, "disc"), true);
    duet_optimizer_zero_grad(opt_d);
    int rc = duet_detach(fake_img, &fd);
    if (rc == DUET_OK && fake_local != NULL) rc = duet_detach(fake_local, &fld);
    if (rc == DUET_OK) rc = disc_half(m, fd, fld, mask, false, log);
    if (rc == DUET_OK) rc = disc_half(m, gt, gt_local, mask, true, log);
    if (rc == DUET_OK && duet_model_part(m, "loss_gp") != NULL)
        rc = penalty_backward(m, gt, fd, gt_local, fld, mask, log);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor_release(fd);
    duet_tensor_release(fld);
    return rc;
}

/* calculate_loss_with_type for stage s (0, 1) and loss kind k, logged as
 * stage<s+1>_<name>. */
static int stage_loss(duet_model *m, int s, duet_inpaint_loss_kind k, duet_tensor *res,
                      duet_tensor *img, duet_tensor *fake_local, duet_tensor *gt,
                      duet_tensor *mask, duet_log_vars *log, duet_tensor **out) {
    two_stage *p = duet_model_impl(m);
    duet_tensor *w = NULL, *preds[2] = {NULL, NULL}, *lg[2] = {NULL, NULL};
    const char *what = "loss";
    int rc = DUET_OK;
    switch (k) {
    case DUET_INPAINT_LOSS_L1_HOLE:
        what = "loss_l1_hole";
        rc = duet_l1_loss_masked(res, gt, mask, p->l1_hole_weight, out);
        break;
    case DUET_INPAINT_LOSS_L1_VALID:
        what = "loss_l1_valid";
        rc = duet__inpaint_valid_mask(mask, &w);
        if (rc == DUET_OK) rc = duet_l1_loss_masked(res, gt, w, p->l1_valid_weight, out);
        break;
    case DUET_INPAINT_LOSS_GAN: {
        what = "loss_g_fake";
        duet_module *gan = duet_model_part(m, "loss_gan");
        rc = disc_preds(m, img, fake_local, mask, preds);
        for (int i = 0; i < (p->v1 ? 2 : 1) && rc == DUET_OK; i++)
            rc = duet_gan_loss(gan, preds[i], true, false, &lg[i]);
        if (rc == DUET_OK) rc = p->v1 ? duet_add(lg[0], lg[1], out)
                                      : (*out = duet_tensor_retain(lg[0]), DUET_OK);
        break;
    }
    }
    char name[DUET_LOG_VAR_NAME_MAX];
    snprintf(name, sizeof name, "stage%d_%s", s + 1, what);
    if (rc == DUET_OK) rc = duet__log_scalar(log, name, *out);
    duet_tensor *ts[] = {w, preds[0], preds[1], lg[0], lg[1]};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) duet_tensor_release(ts[i]);
    return rc;
}

/* two_stage_loss, summed in MMEditing's order, then the update. */
static int gen_update(duet_model *m, duet_tensor *const res[2], duet_tensor *const img[2],
                      duet_tensor *fake_local, duet_tensor *gt, duet_tensor *mask,
                      duet_optimizer *opt_g, duet_log_vars *log) {
    two_stage *p = duet_model_impl(m);
    duet_tensor *terms[6] = {NULL}, *loss = NULL;
    int n = 0, rc = DUET_OK;
    duet_module_set_requires_grad(duet_model_part(m, "disc"), false);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < p->nstage[s] && rc == DUET_OK; i++)
            rc = stage_loss(m, s, p->stage[s][i], res[s], img[s], fake_local, gt, mask, log,
                            &terms[n++]);
    if (rc == DUET_OK && n == 0)
        rc = duet__error(DUET_ESTATE, "%s: a generator update with no loss (stage1_loss_type "
                         "and stage2_loss_type are empty)", p->name);
    if (rc == DUET_OK) rc = sum_terms(terms, n, &loss);
    if (rc == DUET_OK) duet_optimizer_zero_grad(opt_g);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", loss);
    if (rc == DUET_OK) rc = duet_backward(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    for (int i = 0; i < 6; i++) duet_tensor_release(terms[i]);
    duet_tensor_release(loss);
    return rc;
}

static int ts_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                         duet_log_vars *log) {
    two_stage *p = duet_model_impl(m);
    duet_tensor *gt = NULL, *mask = NULL, *masked = NULL, *bbox = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *gen = NULL, *disc = NULL;
    DUET_TRY(duet_batch_require(batch, "gt_img", &gt));
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    if (p->v1) DUET_TRY(duet_batch_require(batch, "mask_bbox", &bbox));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    if (p->disc_step > 0) DUET_TRY(duet_optimizer_set_require(opts, "disc", &opt_d));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    DUET_TRY(duet__need_part(m, "disc", &disc));
    const int64_t n = gt->shape[0];
    int64_t *tops = NULL, *lefts = NULL;
    duet_tensor *x = NULL, *res[2] = {NULL, NULL}, *img[2] = {NULL, NULL}, *fake_local = NULL,
                *gt_local = NULL;
    int rc = gen_input(p, masked, mask, &x);
    if (rc == DUET_OK) rc = gen_forward(gen, x, &res[0], &res[1]);
    for (int s = 0; s < 2 && rc == DUET_OK; s++)
        rc = duet_mask_composite(masked, res[s], mask, &img[s]);
    if (rc == DUET_OK && p->v1) {
        rc = duet__inpaint_local_boxes(p->name, p->local_h, p->local_w, bbox, n, &tops, &lefts);
        if (rc == DUET_OK)
            rc = duet_crop_boxes(img[1], tops, lefts, p->local_h, p->local_w, &fake_local);
        if (rc == DUET_OK)
            rc = duet_crop_boxes(gt, tops, lefts, p->local_h, p->local_w, &gt_local);
    }
    bool done = false;
    if (rc == DUET_OK && p->disc_step > 0) {
        rc = disc_update(m, img[1], fake_local, gt, gt_local, mask, opt_d, log);
        if (rc == DUET_OK) {
            p->disc_step_count = (p->disc_step_count + 1) % p->disc_step;
            done = p->disc_step_count != 0;
        }
    }
    if (rc == DUET_OK && !done) rc = gen_update(m, res, img, fake_local, gt, mask, opt_g, log);
    duet_module_set_requires_grad(disc, true);
    duet_tensor *ts[] = {x, res[0], res[1], img[0], img[1], fake_local, gt_local};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) duet_tensor_release(ts[i]);
    free(tops);
    free(lefts);
    /* After a discriminator-only step (or a failure) the generator's graph
     * is still recorded; it belongs to this step only. */
    duet_tape_clear();
    return rc;
}

/* forward_test's composite of stage 2 from cat(masked_img, mask). */
static int ts_forward(duet_model *m, duet_tensor *in, duet_tensor **out) {
    *out = NULL;
    two_stage *p = duet_model_impl(m);
    duet_module *gen = NULL;
    DUET_TRY(duet__need_part(m, "generator", &gen));
    if (in->ndim != 4 || in->shape[1] != 4)
        return duet__error(DUET_ESHAPE, "%s: forward takes cat(masked_img, mask), (N, 4, H, W)",
                           p->name);
    duet_tensor *masked = NULL, *mask = NULL, *x = NULL, *s1 = NULL, *s2 = NULL;
    int rc = duet_slice_channels(in, 0, 3, &masked);
    if (rc == DUET_OK) rc = duet_slice_channels(in, 3, 1, &mask);
    if (rc == DUET_OK) rc = gen_input(p, masked, mask, &x);
    if (rc == DUET_OK) rc = gen_forward(gen, x, &s1, &s2);
    if (rc == DUET_OK) rc = duet_mask_composite(masked, s2, mask, out);
    duet_tensor *ts[] = {masked, mask, x, s1, s2};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) duet_tensor_release(ts[i]);
    return rc;
}

/* forward_test with metrics (duet_inpainting_evaluate on stage 2). */
static int ts_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    two_stage *p = duet_model_impl(m);
    duet_tensor *mask = NULL, *masked = NULL, *x = NULL, *s1 = NULL, *s2 = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet_batch_require(batch, "mask", &mask));
    DUET_TRY(duet_batch_require(batch, "masked_img", &masked));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    duet_tensor *gt = duet_batch_tensor_get(batch, "gt_img");
    int rc = gen_input(p, masked, mask, &x);
    if (rc == DUET_OK) rc = gen_forward(gen, x, &s1, &s2);
    if (rc == DUET_OK) rc = duet_mask_composite(masked, s2, mask, &out->output);
    out->nsamples = masked->shape[0];
    duet_log_vars_clear(&out->metrics);
    if (rc == DUET_OK && gt != NULL)
        rc = duet_inpainting_evaluate(p->metrics, p->nmetrics, s2, out->output, gt, mask,
                                      &out->metrics);
    duet_tensor_release(x);
    duet_tensor_release(s1);
    duet_tensor_release(s2);
    return rc;
}

static const char *const ts_keys[] = {"two_stage_inpaintor.disc_step_count",
                                      "two_stage_inpaintor.gp_rng_counter"};

static int ts_save_state(duet_model *m, duet_st_writer *w) {
    const two_stage *p = duet_model_impl(m);
    DUET_TRY(duet__inpaint_meta_set_int(w, ts_keys[0], p->disc_step_count));
    return duet__inpaint_meta_set_int(w, ts_keys[1], (long long)p->gp_rng.counter);
}

/* The rng's seed and stream come from the config (gp_seed), its counter
 * from the checkpoint. */
static int ts_load_state(duet_model *m, const duet_st *ckpt) {
    two_stage *p = duet_model_impl(m);
    long long count = 0, counter = 0;
    DUET_TRY(duet__inpaint_meta_int(ckpt, p->name, ts_keys[0], 0,
                                    p->disc_step > 0 ? p->disc_step - 1 : 0, &count));
    DUET_TRY(duet__inpaint_meta_int(ckpt, p->name, ts_keys[1], 0, INT64_MAX, &counter));
    p->disc_step_count = (int)count;
    p->gp_rng.counter = (uint64_t)counter;
    return DUET_OK;
}

static const char *ts_input_key(duet_model *m) {
    (void)m;
    return "masked_img";
}

static const char *const eval_parts[] = {"generator", NULL};

static const duet_module_type ts_module_type = {"TwoStageInpaintor", NULL, NULL};
static const duet_module_type v1_module_type = {"DeepFillv1Inpaintor", NULL, NULL};

#define TS_OPS(NAME)                                                                           \
    {                                                                                          \
        .name = NAME, .forward = ts_forward, .train_step = ts_train_step,                      \
        .val_step = ts_val_step, .destroy = free, .save_state = ts_save_state,                 \
        .load_state = ts_load_state, .input_key = ts_input_key, .eval_parts = eval_parts,      \
    }
static const duet_model_ops ts_ops = TS_OPS("TwoStageInpaintor");
static const duet_model_ops v1_ops = TS_OPS("DeepFillv1Inpaintor");

static int check_opts(const duet_two_stage_inpaintor_opts *o, const char *name) {
    if (o->disc_step < 0 || o->local_h < 1 || o->local_w < 1)
        return duet__error(DUET_EINVAL, "%s: disc_step %d must be >= 0 and local_size %dx%d "
                           "positive", name, o->disc_step, o->local_h, o->local_w);
    if (o->nstage1 < 0 || o->nstage1 > 3 || o->nstage2 < 0 || o->nstage2 > 3)
        return duet__error(DUET_EINVAL, "%s: stage1_loss_type and stage2_loss_type hold at most "
                           "3 losses each (%d, %d)", name, o->nstage1, o->nstage2);
    if (o->nstage1 + o->nstage2 == 0)
        return duet__error(DUET_EINVAL, "%s: stage1_loss_type and stage2_loss_type are both "
                           "empty: the generator would have no loss", name);
    static const char *const kind_names[] = {"loss_l1_hole", "loss_l1_valid", "loss_gan"};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < (s == 0 ? o->nstage1 : o->nstage2); i++) {
            const duet_inpaint_loss_kind k = s == 0 ? o->stage1[i] : o->stage2[i];
            if ((int)k < 0 || k > DUET_INPAINT_LOSS_GAN)
                return duet__error(DUET_EINVAL, "%s: stage%d loss kind %d", name, s + 1, (int)k);
            const float w = k == DUET_INPAINT_LOSS_L1_HOLE    ? o->l1_hole_weight
                            : k == DUET_INPAINT_LOSS_L1_VALID ? o->l1_valid_weight
                                                              : 1.0f;
            if (w <= 0.0f)
                return duet__error(DUET_EINVAL, "%s: stage%d_loss_type names '%s' but the "
                                   "model has no %s (MMEditing fails there): add it or drop it "
                                   "from the list", name, s + 1, kind_names[k], kind_names[k]);
            /* MMEditing's DeepFillv1 calls its discriminators with no local
             * patch for stage 1 and fails. */
            if (o->deepfill_v1 && s == 0 && k == DUET_INPAINT_LOSS_GAN)
                return duet__error(DUET_EINVAL, "%s: 'loss_gan' in stage1_loss_type: "
                                   "DeepFillv1's discriminators take stage 2's local patch, "
                                   "stage 1 has none", name);
        }
    if (o->gp_weight > 0.0f && o->disc_input_with_mask)
        return duet__error(DUET_EINVAL, "%s: loss_gp with disc_input_with_mask (MMEditing "
                           "asserts the penalty is not used with the mask as input)", name);
    /* The penalty differentiates the discriminator's input gradient: its
     * ops need a backward in recorded ops, which batch norm and spectral
     * norm have not (docs/architecture.md, "Second-order autograd"). */
    const duet_multi_layer_disc_opts *ds[2] = {o->deepfill_v1 ? &o->discs.global : &o->disc,
                                               o->deepfill_v1 ? &o->discs.local : NULL};
    static const char *const ds_names[2] = {"global_disc", "local_disc"};
    for (int i = 0; i < 2 && o->gp_weight > 0.0f; i++)
        if (ds[i] != NULL && (ds[i]->with_norm || ds[i]->with_spectral_norm))
            return duet__error(DUET_EINVAL, "%s: loss_gp through a discriminator%s%s with %s: "
                               "duet's %s has no second-order backward, which the penalty "
                               "needs (MMEditing's DeepFillv1 config has neither)", name,
                               o->deepfill_v1 ? " " : "", o->deepfill_v1 ? ds_names[i] : "",
                               ds[i]->with_norm ? "norm_cfg" : "with_spectral_norm",
                               ds[i]->with_norm ? "batch norm" : "spectral norm");
    if (o->deepfill_v1 && o->disc_input_with_mask)
        return duet__error(DUET_EINVAL, "%s: disc_input_with_mask: DeepFillv1Inpaintor's "
                           "discriminators take the image alone", name);
    const int gin = o->input_with_ones ? 5 : 4;
    const duet_deepfill_encoder_opts *encs[3] = {&o->encdec.encoder,
                                                 &o->encdec.stage2.encoder_attention,
                                                 &o->encdec.stage2.encoder_conv};
    static const char *const enc_names[3] = {"stage1.encoder", "stage2.encoder_attention",
                                             "stage2.encoder_conv"};
    for (int i = 0; i < 3; i++)
        if (encs[i]->in_channels != gin)
            return duet__error(DUET_EINVAL, "%s: encdec.%s.in_channels is %d, but the generator "
                               "takes %d channels (masked_img, %smask; input_with_ones %s)", name,
                               enc_names[i], encs[i]->in_channels, gin,
                               o->input_with_ones ? "ones, " : "",
                               o->input_with_ones ? "true" : "false");
    const int din = o->disc_input_with_mask ? 4 : 3;
    if (!o->deepfill_v1 && o->disc.in_channels != din)
        return duet__error(DUET_EINVAL, "%s: disc.in_channels is %d, but the discriminator "
                           "takes %d channels (disc_input_with_mask %s)", name,
                           o->disc.in_channels, din, o->disc_input_with_mask ? "true" : "false");
    return duet__inpaint_check_metrics(name, o->metrics, o->nmetrics);
}

int duet_two_stage_inpaintor_create(const duet_two_stage_inpaintor_opts *o, duet_rng *rng,
                                    duet_model **out) {
    *out = NULL;
    const char *name = o->deepfill_v1 ? "DeepFillv1Inpaintor" : "TwoStageInpaintor";
    DUET_TRY(check_opts(o, name));
    two_stage *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", name);
    p->v1 = o->deepfill_v1;
    p->name = name;
    p->l1_hole_weight = o->l1_hole_weight;
    p->l1_valid_weight = o->l1_valid_weight;
    p->nstage[0] = o->nstage1;
    p->nstage[1] = o->nstage2;
    memcpy(p->stage[0], o->stage1, sizeof o->stage1);
    memcpy(p->stage[1], o->stage2, sizeof o->stage2);
    p->input_with_ones = o->input_with_ones;
    p->disc_input_with_mask = o->disc_input_with_mask;
    p->disc_step = o->disc_step;
    p->local_h = o->local_h;
    p->local_w = o->local_w;
    p->nmetrics = o->nmetrics;
    for (int j = 0; j < o->nmetrics; j++) p->metrics[j] = o->metrics[j];
    p->gp_rng = duet_rng_make(o->gp_seed, 0);
    duet_module *root = NULL, *part = NULL;
    int rc = duet_module_create(p->v1 ? &v1_module_type : &ts_module_type, NULL, &root);
    if (rc != DUET_OK) {
        free(p);
        return rc;
    }
    rc = duet_deepfill_encdec_create(&o->encdec, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generator", part);
    if (rc == DUET_OK)
        rc = p->v1 ? duet_deepfill_v1_discs_create(&o->discs.global, &o->discs.local, rng, &part)
                   : duet_multi_layer_disc_create(&o->disc, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "disc", part);
    if (rc == DUET_OK) rc = duet_gan_loss_create(&o->loss_gan, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_gan", part);
    if (rc == DUET_OK && o->gp_weight > 0.0f) {
        rc = duet_gradient_penalty_loss_module_create(o->gp_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_gp", part);
    }
    if (rc == DUET_OK && o->disc_shift_weight > 0.0f) {
        rc = duet_disc_shift_loss_module_create(o->disc_shift_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "loss_disc_shift", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "%s", name);
        duet_module_destroy(root);
        free(p);
        return rc;
    }
    return duet_model_create(p->v1 ? &v1_ops : &ts_ops, p, root, out);
}

static two_stage *impl_of(duet_model *m) {
    DUET_ASSERT(strcmp(duet_model_type_name(m), "TwoStageInpaintor") == 0 ||
                strcmp(duet_model_type_name(m), "DeepFillv1Inpaintor") == 0);
    return duet_model_impl(m);
}

int duet_two_stage_inpaintor_disc_step_count(duet_model *m) {
    return impl_of(m)->disc_step_count;
}
duet_rng *duet_two_stage_inpaintor_gp_rng(duet_model *m) { return &impl_of(m)->gp_rng; }
