/* MMEditing's PerceptualLoss (mmedit/models/losses/perceptual_loss.py): a
 * frozen VGG-style feature network (PerceptualVGG: torchvision's `features`
 * truncated after the deepest layer used), features of the output and of
 * the (detached) ground truth compared layer by layer with L1 or MSE. */
#include "duet/models.h"
#include "duet/ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const int vgg19_cfg[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                512, 512, 512, 512, 0,   512, 512, 512, 512, 0};

duet_perceptual_loss_opts duet_perceptual_loss_opts_default(void) {
    duet_perceptual_loss_opts o;
    memset(&o, 0, sizeof o);
    o.nlayer_weights = 1;
    o.layer_ids[0] = 34;
    o.layer_weights[0] = 1.0f;
    o.ncfg = 0;
    o.in_channels = 3;
    o.use_input_norm = true;
    o.norm_img = true;
    o.perceptual_weight = 1.0f;
    o.style_weight = 1.0f; /* MMEditing's default: configs that want none say 0 */
    o.criterion = "l1";
    o.weights_path = NULL;
    return o;
}

/* ---- PerceptualVGG ---------------------------------------------------------- */

typedef struct perceptual_vgg {
    bool use_input_norm;
    float scale[3], shift[3]; /* (x - mean) / std as x * scale + shift */
} perceptual_vgg;

/* x (N, C, H, W) -> normalised input; a new reference either way. */
static int vgg_normalise(duet_module *vgg, duet_tensor *x, duet_tensor **out) {
    perceptual_vgg *p = duet_module_impl(vgg);
    if (!p->use_input_norm) {
        *out = duet_tensor_retain(x);
        return DUET_OK;
    }
    if (x->ndim != 4 || x->shape[1] != 3) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "PerceptualVGG: use_input_norm needs (N, 3, H, W) "
                           "images, got %s", duet_shape_str(x, s, sizeof s));
    }
    return duet_channel_affine(x, p->scale, p->shift, out);
}

static int vgg_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    if (nin != 1) return duet__error(DUET_EINVAL, "PerceptualVGG takes one input, got %d", nin);
    duet_tensor *h = NULL;
    DUET_TRY(vgg_normalise(self, in[0], &h));
    int rc = duet_module_forward(duet_module_child(self, "vgg_layers"), h, out);
    duet_tensor_release(h);
    return rc;
}

static const duet_module_type perceptual_vgg_type = {"PerceptualVGG", vgg_forward, free};

/* ---- PerceptualLoss ------------------------------------------------------------ */

typedef struct perceptual_loss {
    int nlayers;
    int layer_ids[DUET_PERCEPTUAL_MAX_LAYERS];
    float layer_weights[DUET_PERCEPTUAL_MAX_LAYERS];
    bool norm_img;
    bool mse;
    float perceptual_weight, style_weight;
} perceptual_loss;

static int perceptual_forward(duet_module *self, int nin, duet_tensor *const *in,
                              duet_tensor **out) {
    if (nin != 2)
        return duet__error(DUET_EINVAL, "PerceptualLoss takes (x, gt), got %d inputs", nin);
    duet_tensor *style = NULL;
    DUET_TRY(duet_perceptual_loss(self, in[0], in[1], out, &style));
    if (*out == NULL) {
        duet_tensor_release(style);
        return duet__error(DUET_EINVAL, "PerceptualLoss: perceptual_weight is 0; forward "
                           "returns the perceptual term only (use duet_perceptual_loss for "
                           "the style term)");
    }
    duet_tensor_release(style);
    return DUET_OK;
}

static const duet_module_type perceptual_loss_type = {"PerceptualLoss", perceptual_forward, free};

/* Torchvision's features from a cfg: conv 3x3 pad 1 + ReLU per channel
 * count, MaxPool2d(2, 2) per 0; only the first `nmodules` modules. */
static int build_features(duet_module **out, const int *cfg, int ncfg, int in_channels,
                          int nmodules, duet_rng *rng) {
    DUET_TRY(duet_sequential_create(out));
    int c = in_channels, made = 0, rc = DUET_OK;
    for (int i = 0; i < ncfg && made < nmodules && rc == DUET_OK; i++) {
        duet_module *m = NULL;
        if (cfg[i] == 0) {
            rc = duet_max_pool2d_module_create(2, 2, &m);
            if (rc == DUET_OK) rc = duet_sequential_append(*out, m);
            made++;
            continue;
        }
        rc = duet_conv2d_module_create(c, cfg[i], 3, 1, 1, true, rng, &m);
        if (rc == DUET_OK) rc = duet_sequential_append(*out, m);
        made++;
        c = cfg[i];
        if (rc != DUET_OK || made == nmodules) break;
        rc = duet_activation_module_create(DUET_ACT_RELU, 0.0f, &m);
        if (rc == DUET_OK) rc = duet_sequential_append(*out, m);
        made++;
    }
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* features.<i>.weight/bias from a torchvision VGG converted to safetensors. */
static int load_vgg_weights(duet_module *layers, const char *path) {
    duet_st *st = NULL;
    DUET_TRY(duet_st_load(path, &st));
    int rc = DUET_OK;
    for (size_t i = 0; i < duet_module_child_count(layers) && rc == DUET_OK; i++) {
        duet_module *m = duet_module_child_at(layers, i);
        for (size_t p = 0; p < duet_module_param_count(m) && rc == DUET_OK; p++) {
            /* Bounded by construction: the children are the Sequential's
             * indices ("34") and the parameters weight and bias. */
            char key[64];
            snprintf(key, sizeof key, "features.%s.%s", duet_module_child_name_at(layers, i),
                     duet_module_param_name_at(m, p));
            rc = duet_st_copy_into(st, key, duet_module_param_at(m, p));
        }
    }
    duet_st_destroy(st);
    if (rc != DUET_OK) duet__error_context(rc, "PerceptualLoss: VGG weights from %s", path);
    return rc;
}

static int check_opts(const duet_perceptual_loss_opts *o, const int *cfg, int ncfg,
                      int *nmodules) {
    int total = 0;
    for (int i = 0; i < ncfg; i++) total += cfg[i] == 0 ? 1 : 2;
    if (o->nlayer_weights < 1 || o->nlayer_weights > DUET_PERCEPTUAL_MAX_LAYERS)
        return duet__error(DUET_EINVAL, "PerceptualLoss: %d layer_weights; give 1 to %d",
                           o->nlayer_weights, DUET_PERCEPTUAL_MAX_LAYERS);
    int deepest = -1;
    for (int i = 0; i < o->nlayer_weights; i++) {
        if (o->layer_ids[i] < 0 || o->layer_ids[i] >= total)
            return duet__error(DUET_EINVAL, "PerceptualLoss: layer '%d' does not exist; the VGG "
                               "features have layers 0..%d", o->layer_ids[i], total - 1);
        if (o->layer_ids[i] > deepest) deepest = o->layer_ids[i];
    }
    const char *crit = o->criterion != NULL ? o->criterion : "l1";
    if (strcmp(crit, "l1") != 0 && strcmp(crit, "mse") != 0)
        return duet__error(DUET_EINVAL, "PerceptualLoss: criterion '%s' (use 'l1' or 'mse')",
                           crit);
    if (o->in_channels < 1 || (o->use_input_norm && o->in_channels != 3))
        return duet__error(DUET_EINVAL, "PerceptualLoss: in_channels %d (use_input_norm needs 3)",
                           o->in_channels);
    *nmodules = deepest + 1;
    return DUET_OK;
}

int duet_perceptual_loss_create(const duet_perceptual_loss_opts *opts, duet_rng *rng,
                                duet_module **out) {
    *out = NULL;
    const int *cfg = opts->ncfg > 0 ? opts->cfg : vgg19_cfg;
    int ncfg = opts->ncfg > 0 ? opts->ncfg : (int)(sizeof vgg19_cfg / sizeof vgg19_cfg[0]);
    if (ncfg > DUET_VGG_MAX_CFG)
        return duet__error(DUET_EINVAL, "PerceptualLoss: cfg of %d entries (at most %d)", ncfg,
                           DUET_VGG_MAX_CFG);
    int nmodules = 0;
    DUET_TRY(check_opts(opts, cfg, ncfg, &nmodules));

    perceptual_loss *pl = calloc(1, sizeof *pl);
    perceptual_vgg *pv = calloc(1, sizeof *pv);
    if (pl == NULL || pv == NULL) {
        free(pl);
        free(pv);
        return duet__error(DUET_ENOMEM, "PerceptualLoss: out of memory");
    }
    pl->nlayers = opts->nlayer_weights;
    memcpy(pl->layer_ids, opts->layer_ids, sizeof pl->layer_ids);
    memcpy(pl->layer_weights, opts->layer_weights, sizeof pl->layer_weights);
    pl->norm_img = opts->norm_img;
    pl->mse = opts->criterion != NULL && strcmp(opts->criterion, "mse") == 0;
    pl->perceptual_weight = opts->perceptual_weight;
    pl->style_weight = opts->style_weight;
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    pv->use_input_norm = opts->use_input_norm;
    for (int c = 0; c < 3; c++) {
        pv->scale[c] = 1.0f / stdv[c];
        pv->shift[c] = -mean[c] / stdv[c];
    }

    duet_module *loss = NULL, *vgg = NULL, *layers = NULL;
    int rc = duet_module_create(&perceptual_loss_type, pl, &loss);
    if (rc != DUET_OK) {
        free(pv);
        return rc;
    }
    rc = duet_module_create(&perceptual_vgg_type, pv, &vgg);
    if (rc == DUET_OK) rc = duet_module_add_child(loss, "vgg", vgg);
    if (rc == DUET_OK) rc = build_features(&layers, cfg, ncfg, opts->in_channels, nmodules, rng);
    if (rc == DUET_OK) rc = duet_module_add_child(vgg, "vgg_layers", layers);
    if (rc == DUET_OK && opts->use_input_norm) {
        duet_tensor *m = NULL, *s = NULL;
        rc = duet_tensor_from_data(4, (int64_t[]){1, 3, 1, 1}, mean, &m);
        if (rc == DUET_OK) rc = duet_module_add_buffer(vgg, "mean", m, false);
        if (rc == DUET_OK) rc = duet_tensor_from_data(4, (int64_t[]){1, 3, 1, 1}, stdv, &s);
        if (rc == DUET_OK) rc = duet_module_add_buffer(vgg, "std", s, false);
    }
    if (rc == DUET_OK) {
        if (opts->weights_path != NULL && opts->weights_path[0] != '\0')
            rc = load_vgg_weights(layers, opts->weights_path);
        else if (!opts->random_init)
            duet_log(DUET_LOG_WARN,
                     "PerceptualLoss: no VGG weights file given (perceptual_loss.pretrained); "
                     "the feature network uses a seeded random init, so the perceptual loss "
                     "is not the one of a pretrained VGG");
    }
    if (rc != DUET_OK) {
        duet_module_destroy(loss);
        return rc;
    }
    /* The feature network is a fixed measuring device. */
    duet_module_set_requires_grad(loss, false);
    *out = loss;
    return DUET_OK;
}

/* feats[k] = the output of layer layer_ids[k] for x; one reference each.
 * The ReLUs run in place over the conv output before them (torchvision's
 * VGG has inplace=True), and each intermediate goes through
 * duet_autograd_release: with the VGG frozen, its convolutions' backward
 * needs no input values and relu keeps a bit mask, so the features of the
 * fake image cost a few masks and pool indices until backward, not every
 * activation. */
static int vgg_features(duet_module *vgg, const perceptual_loss *pl, duet_tensor *x,
                        duet_tensor **feats) {
    duet_module *layers = duet_module_child(vgg, "vgg_layers");
    duet_tensor *h = NULL;
    DUET_TRY(vgg_normalise(vgg, x, &h));
    int rc = DUET_OK;
    for (size_t i = 0; i < duet_module_child_count(layers) && rc == DUET_OK; i++) {
        duet_module *layer = duet_module_child_at(layers, i);
        duet_tensor *next = NULL;
        if (strcmp(duet_module_type_name(layer), "ReLU") == 0)
            rc = duet_relu_inplace(h, &next);
        else
            rc = duet_module_forward(layer, h, &next);
        duet_autograd_release(h);
        h = next;
        for (int k = 0; k < pl->nlayers && rc == DUET_OK; k++)
            if (pl->layer_ids[k] == (int)i) feats[k] = duet_tensor_retain(h);
    }
    duet_autograd_release(h);
    return rc;
}

/* (x + 1) / 2, MMEditing's norm_img for [-1, 1] images. */
static int norm_img(duet_tensor *x, duet_tensor **out) {
    duet_tensor *one = NULL, *sum = NULL;
    DUET_TRY(duet_tensor_create_like(x, &one));
    duet_tensor_fill(one, 1.0f);
    int rc = duet_add(x, one, &sum);
    if (rc == DUET_OK) rc = duet_scale(sum, 0.5f, out);
    duet_tensor_release(one);
    duet_tensor_release(sum);
    return rc;
}

/* weight * sum_k w_k * criterion(a_k, b_k), a_k = f(x_k) and b_k = f(gt_k)
 * with f the identity or the Gram matrix; one new reference in *out. */
static int weighted_sum(const perceptual_loss *pl, duet_tensor **xf, duet_tensor **gf, bool gram,
                        float weight, duet_tensor **out) {
    duet_tensor *total = NULL;
    int rc = DUET_OK;
    for (int k = 0; k < pl->nlayers && rc == DUET_OK; k++) {
        duet_tensor *a = NULL, *b = NULL, *l = NULL;
        if (gram) {
            rc = duet_gram_matrix(xf[k], &a);
            if (rc == DUET_OK) rc = duet_gram_matrix(gf[k], &b);
        } else {
            a = duet_tensor_retain(xf[k]);
            b = duet_tensor_retain(gf[k]);
        }
        if (rc == DUET_OK)
            rc = pl->mse ? duet_mse_loss(a, b, pl->layer_weights[k], &l)
                         : duet_l1_loss(a, b, pl->layer_weights[k], &l);
        duet_tensor_release(a);
        duet_tensor_release(b);
        if (rc != DUET_OK) break;
        if (total == NULL) {
            total = l;
        } else {
            duet_tensor *s = NULL;
            rc = duet_add(total, l, &s);
            duet_tensor_release(total);
            duet_tensor_release(l);
            total = s;
        }
    }
    if (rc == DUET_OK) rc = duet_scale(total, weight, out);
    duet_tensor_release(total);
    return rc;
}

int duet_perceptual_loss(duet_module *m, duet_tensor *x, duet_tensor *gt, duet_tensor **percep,
                         duet_tensor **style) {
    *percep = NULL;
    *style = NULL;
    if (!duet_module_is(m, "PerceptualLoss"))
        return duet__error(DUET_EINVAL, "duet_perceptual_loss: the module is a %s",
                           duet_module_type_name(m));
    perceptual_loss *pl = duet_module_impl(m);
    if (pl->perceptual_weight <= 0.0f && pl->style_weight <= 0.0f) return DUET_OK;
    duet_module *vgg = duet_module_child(m, "vgg");
    duet_tensor *gtd = NULL, *xn = NULL, *gtn = NULL;
    duet_tensor *xf[DUET_PERCEPTUAL_MAX_LAYERS] = {0}, *gf[DUET_PERCEPTUAL_MAX_LAYERS] = {0};
    int rc = duet_detach(gt, &gtd);
    if (rc == DUET_OK && pl->norm_img) {
        rc = norm_img(x, &xn);
        if (rc == DUET_OK) rc = norm_img(gtd, &gtn);
    } else if (rc == DUET_OK) {
        xn = duet_tensor_retain(x);
        gtn = duet_tensor_retain(gtd);
    }
    if (rc == DUET_OK) rc = vgg_features(vgg, pl, xn, xf);
    if (rc == DUET_OK) rc = vgg_features(vgg, pl, gtn, gf);
    /* percep = sum_k criterion(x_k, gt_k) * w_k, then * perceptual_weight;
     * style the same over Gram matrices, then * style_weight. */
    if (rc == DUET_OK && pl->perceptual_weight > 0.0f)
        rc = weighted_sum(pl, xf, gf, false, pl->perceptual_weight, percep);
    if (rc == DUET_OK && pl->style_weight > 0.0f)
        rc = weighted_sum(pl, xf, gf, true, pl->style_weight, style);
    if (rc != DUET_OK) {
        duet_tensor_release(*percep);
        *percep = NULL;
    }
    for (int k = 0; k < pl->nlayers; k++) {
        duet_tensor_release(xf[k]);
        duet_tensor_release(gf[k]);
    }
    duet_tensor_release(gtd);
    duet_tensor_release(xn);
    duet_tensor_release(gtn);
    return rc;
}
