/* MMEditing's pixel and GAN losses as parameterless modules, so that they
 * are parts of a model (pixel_loss, gan_loss) as in MMEditing's state. */
#include "duet/models.h"

#include <string.h>

/* ---- L1Loss / MSELoss ----------------------------------------------------- */

typedef struct pixel_loss {
    float loss_weight;
    bool mse;
} pixel_loss;

static int pixel_loss_forward(duet_module *self, int nin, duet_tensor *const *in,
                              duet_tensor **out) {
    pixel_loss *p = self->impl;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "%s takes (pred, target), got %d inputs",
                           self->type->name, nin);
    if (p->mse) return duet_mse_loss(in[0], in[1], p->loss_weight, out);
    return duet_l1_loss(in[0], in[1], p->loss_weight, out);
}

static const duet_module_type l1_loss_type = {"L1Loss", pixel_loss_forward, free};
static const duet_module_type mse_loss_type = {"MSELoss", pixel_loss_forward, free};

static int pixel_loss_create(duet_module **out, float loss_weight, bool mse) {
    *out = NULL;
    pixel_loss *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "pixel loss: out of memory");
    p->loss_weight = loss_weight;
    p->mse = mse;
    return duet_module_create(out, mse ? &mse_loss_type : &l1_loss_type, p);
}

int duet_l1_loss_module_create(duet_module **out, float loss_weight) {
    return pixel_loss_create(out, loss_weight, false);
}

int duet_mse_loss_module_create(duet_module **out, float loss_weight) {
    return pixel_loss_create(out, loss_weight, true);
}

/* ---- GANLoss -------------------------------------------------------------- */

typedef struct gan_loss {
    bool lsgan; /* else vanilla */
    float real_label_val, fake_label_val, loss_weight;
} gan_loss;

duet_gan_loss_opts duet_gan_loss_opts_default(void) {
    return (duet_gan_loss_opts){.gan_type = "vanilla",
                                .real_label_val = 1.0f,
                                .fake_label_val = 0.0f,
                                .loss_weight = 1.0f};
}

static int gan_loss_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    if (nin != 1)
        return duet__error(DUET_EINVAL, "GANLoss forward takes (pred), got %d inputs", nin);
    return duet_gan_loss(self, in[0], true, false, out);
}

static const duet_module_type gan_loss_type = {"GANLoss", gan_loss_forward, free};

int duet_gan_loss_create(duet_module **out, const duet_gan_loss_opts *opts) {
    *out = NULL;
    const char *type = opts->gan_type != NULL ? opts->gan_type : "vanilla";
    bool lsgan = strcmp(type, "lsgan") == 0;
    if (!lsgan && strcmp(type, "vanilla") != 0)
        return duet__error(DUET_EUNSUPPORTED,
                           "GANLoss: gan_type '%s' is not supported (use 'vanilla' or 'lsgan')",
                           type);
    gan_loss *g = malloc(sizeof *g);
    if (g == NULL) return duet__error(DUET_ENOMEM, "GANLoss: out of memory");
    g->lsgan = lsgan;
    g->real_label_val = opts->real_label_val;
    g->fake_label_val = opts->fake_label_val;
    g->loss_weight = opts->loss_weight;
    return duet_module_create(out, &gan_loss_type, g);
}

int duet_gan_loss(duet_module *m, duet_tensor *pred, bool target_is_real, bool is_disc,
                  duet_tensor **out) {
    *out = NULL;
    if (!duet_module_is(m, "GANLoss"))
        return duet__error(DUET_EINVAL, "duet_gan_loss: the module is a %s, not a GANLoss",
                           m->type->name);
    gan_loss *g = m->impl;
    float target = target_is_real ? g->real_label_val : g->fake_label_val;
    /* MMEditing: the loss weight is for the generator only. */
    float weight = is_disc ? 1.0f : g->loss_weight;
    if (!g->lsgan) return duet_bce_with_logits_const(pred, target, weight, out);
    duet_tensor *t = NULL;
    DUET_TRY(duet_tensor_create_like(&t, pred));
    duet_tensor_fill(t, target);
    int rc = duet_mse_loss(pred, t, weight, out);
    duet_tensor_release(t);
    return rc;
}
