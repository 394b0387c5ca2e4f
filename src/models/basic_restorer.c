/* MMEditing's BasicRestorer (mmedit/models/restorers/basic_restorer.py): a
 * generator and a pixel loss, for PSNR-oriented training (MSRResNet before
 * SRGAN). */
#include "models/models_internal.h"

#include <string.h>

typedef struct basic_restorer {
    duet_test_cfg test_cfg;
} basic_restorer;

duet_basic_restorer_opts duet_basic_restorer_opts_default(void) {
    duet_basic_restorer_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_msrresnet_opts_default();
    o.pixel_loss = "L1Loss";
    o.pixel_loss_weight = 1.0f;
    o.test_cfg = duet_test_cfg_default();
    o.test_cfg.crop_border = o.generator.upscale_factor;
    return o;
}

static const duet_module_type restorer_module_type = {"BasicRestorer", duet__generator_forward,
                                                     NULL};

static int restorer_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    return duet_module_forward(duet_model_module(m), lq, out);
}

static int restorer_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                               duet_log_vars *log) {
    duet_tensor *lq = NULL, *gt = NULL, *output = NULL, *loss = NULL;
    duet_optimizer *opt = NULL;
    DUET_TRY(duet_batch_require(batch, "lq", &lq));
    DUET_TRY(duet_batch_require(batch, "gt", &gt));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt));
    duet_module *gen = duet_model_part(m, "generator"), *pix = duet_model_part(m, "pixel_loss");
    if (gen == NULL || pix == NULL)
        return duet__error(DUET_ESTATE, "BasicRestorer needs parts generator and pixel_loss");
    int rc = duet_module_forward(gen, lq, &output);
    if (rc == DUET_OK) rc = duet_module_forward2(pix, output, gt, &loss);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_pix", loss);
    /* parse_losses also logs the total. */
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss", loss);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt);
        rc = duet_backward(loss);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(opt);
    duet_tensor_release(output);
    duet_tensor_release(loss);
    if (rc != DUET_OK) duet_tape_clear();
    DUET_TRY(rc);
    return DUET_OK; /* duet_model_train_step averages the log values over the ranks */
}

static int restorer_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    basic_restorer *r = duet_model_impl(m);
    return duet__restorer_val_step(m, &r->test_cfg, batch, out);
}

/* forward and val_step use the generator only (or its moving average). */
static const char *const eval_parts[] = {"generator", NULL};

static const duet_model_ops restorer_ops = {
    .name = "BasicRestorer",
    .forward = restorer_forward,
    .train_step = restorer_train_step,
    .val_step = restorer_val_step,
    .destroy = free,
    .eval_parts = eval_parts,
};

/* Takes over `generator` (destroyed on failure). */
static int restorer_create(duet_model **out, duet_module *generator,
                           const duet_basic_restorer_opts *opts) {
    *out = NULL;
    const char *pl = opts->pixel_loss != NULL ? opts->pixel_loss : "L1Loss";
    bool mse = strcmp(pl, "MSELoss") == 0;
    if (!mse && strcmp(pl, "L1Loss") != 0) {
        duet_module_destroy(generator);
        return duet__error(DUET_EINVAL, "BasicRestorer: pixel_loss '%s' (use L1Loss or MSELoss)",
                           pl);
    }
    basic_restorer *r = calloc(1, sizeof *r);
    duet_module *root = NULL, *part = NULL;
    int rc = r == NULL ? duet__error(DUET_ENOMEM, "BasicRestorer: out of memory")
                       : duet_module_create(&restorer_module_type, NULL, &root);
    if (rc != DUET_OK) {
        duet_module_destroy(generator);
        free(r);
        return rc;
    }
    r->test_cfg = opts->test_cfg;
    rc = duet_module_add_child(root, "generator", generator);
    if (rc == DUET_OK)
        rc = mse ? duet_mse_loss_module_create(opts->pixel_loss_weight, &part)
                 : duet_l1_loss_module_create(opts->pixel_loss_weight, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "pixel_loss", part);
    if (rc != DUET_OK) {
        duet__error_context(rc, "BasicRestorer");
        duet_module_destroy(root);
        free(r);
        return rc;
    }
    return duet_model_create(&restorer_ops, r, root, out);
}

int duet_basic_restorer_create(const duet_basic_restorer_opts *opts, duet_rng *rng,
                               duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_msrresnet_create(&opts->generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "BasicRestorer");
    return restorer_create(out, gen, opts);
}

int duet_basic_restorer_rrdbnet_create(const duet_rrdbnet_opts *generator,
                                       const duet_basic_restorer_opts *opts, duet_rng *rng,
                                       duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_rrdbnet_create(generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "BasicRestorer");
    return restorer_create(out, gen, opts);
}

int duet_basic_restorer_edsr_create(const duet_edsr_opts *generator,
                                    const duet_basic_restorer_opts *opts, duet_rng *rng,
                                    duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_edsr_create(generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "BasicRestorer");
    return restorer_create(out, gen, opts);
}

int duet_basic_restorer_rdn_create(const duet_rdn_opts *generator,
                                   const duet_basic_restorer_opts *opts, duet_rng *rng,
                                   duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_rdn_create(generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "BasicRestorer");
    return restorer_create(out, gen, opts);
}
