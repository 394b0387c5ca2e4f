/* The model contract (batches, log values, optimizer sets, dispatch), the
 * losses, the perceptual loss, SRGAN and BasicRestorer in one process, and
 * the registry. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "duet/train.h"

/* ---- helpers ----------------------------------------------------------------- */

/* testutil's small SRGAN, metrics on the whole image. */
static duet_srgan_opts tiny_srgan(void) {
    duet_srgan_opts o = tu_tiny_srgan_opts();
    o.test_cfg.crop_border = 0;
    return o;
}

/* ---- batches and log values ---------------------------------------------------- */

static void test_batch(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_tensor *a = tu_randn(&rng, 4, (int64_t[]){3, 1, 2, 2}, 1);
    duet_tensor *b = tu_randn(&rng, 2, (int64_t[]){2, 5}, 1);
    duet_batch batch = {0};
    TU_OK(duet_batch_add_tensor(&batch, "lq", a));
    assert_int_equal(batch.nsamples, 3);
    assert_int_equal(duet_batch_add_tensor(&batch, "gt", b), DUET_ESHAPE);
    assert_int_equal(duet_batch_add_tensor(&batch, "lq", a), DUET_EINVAL);
    const char *paths[3] = {"a.png", "b.png", "c.png"};
    TU_OK(duet_batch_add_meta(&batch, "gt_path", 3, paths));
    assert_int_equal(duet_batch_add_meta(&batch, "lq_path", 2, paths), DUET_ESHAPE);
    assert_ptr_equal(duet_batch_tensor_get(&batch, "lq"), a);
    assert_null(duet_batch_tensor_get(&batch, "gt"));
    duet_tensor *got = NULL;
    assert_int_equal(duet_batch_require(&batch, "gt", &got), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "'gt'"));
    assert_non_null(strstr(duet_last_error(), "lq"));
    assert_string_equal(duet_batch_meta_get(&batch, "gt_path", 1), "b.png");
    assert_null(duet_batch_meta_get(&batch, "gt_path", 3));

    duet_batch part = {0};
    TU_OK(duet_batch_slice(&part, &batch, 1, 2));
    assert_int_equal(part.nsamples, 2);
    duet_tensor *pa = duet_batch_tensor_get(&part, "lq");
    assert_ptr_equal(pa->data, a->data + 4); /* a view of samples 1..2 */
    assert_string_equal(duet_batch_meta_get(&part, "gt_path", 0), "b.png");
    duet_batch empty = {0};
    assert_int_equal(duet_batch_slice(&empty, &batch, 2, 2), DUET_EINVAL);
    assert_int_equal(empty.ntensors, 0);
    duet_batch_clear(&batch);
    assert_int_equal(batch.ntensors, 0);
    /* The slice keeps its views alive after the original is gone. */
    assert_float_equal(duet_batch_tensor_get(&part, "lq")->data[0], a->data[4], 0);
    duet_batch_clear(&part);
    duet_tensor_release(a);
    duet_tensor_release(b);
}

static void test_log_vars(void **state) {
    (void)state;
    duet_log_vars lv;
    duet_log_vars_clear(&lv);
    TU_OK(duet_log_vars_set(&lv, "loss_pix", 1.5));
    TU_OK(duet_log_vars_set(&lv, "loss_gan", 2.0));
    TU_OK(duet_log_vars_set(&lv, "loss_pix", 3.0));
    assert_int_equal(lv.count, 2);
    double v = 0;
    assert_true(duet_log_vars_get(&lv, "loss_pix", &v));
    assert_true(v == 3.0);
    assert_false(duet_log_vars_get(&lv, "loss_d", &v));
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[79] = '\0';
    assert_int_equal(duet_log_vars_set(&lv, longname, 1), DUET_EINVAL);
    for (int i = lv.count; i < DUET_LOG_VARS_MAX; i++) {
        char n[16];
        snprintf(n, sizeof n, "v%d", i);
        TU_OK(duet_log_vars_set(&lv, n, i));
    }
    assert_int_equal(duet_log_vars_set(&lv, "one_more", 1), DUET_EINVAL);
    TU_OK(duet_log_vars_average(&lv, NULL)); /* no comm: unchanged */
    assert_true(duet_log_vars_get(&lv, "loss_gan", &v) && v == 2.0);
}

/* ---- a toy model: dispatch and the optimizer set --------------------------------- */

typedef struct toy {
    int forwards, train_steps, val_steps;
    bool val_saw_training, val_saw_grad;
    const duet_batch *last_batch;
} toy;

static int toy_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    ((toy *)duet_model_impl(m))->forwards++;
    return duet_module_forward(duet_model_part(m, "generator"), lq, out);
}

static int toy_train_step(duet_model *m, const duet_batch *b, duet_optimizer_set *o,
                          duet_log_vars *log) {
    (void)o;
    toy *t = duet_model_impl(m);
    t->train_steps++;
    t->last_batch = b;
    return duet_log_vars_set(log, "calls", t->train_steps);
}

static int toy_val_step(duet_model *m, const duet_batch *b, duet_val_output *out) {
    toy *t = duet_model_impl(m);
    t->val_steps++;
    t->val_saw_training = duet_module_is_training(duet_model_part(m, "generator"));
    t->val_saw_grad = duet_grad_enabled();
    duet_tensor *lq = NULL;
    DUET_TRY(duet_batch_require(b, "lq", &lq));
    out->nsamples = lq->shape[0];
    return toy_forward(m, lq, &out->output);
}

static const duet_model_ops toy_ops = {
    .name = "Toy",
    .forward = toy_forward,
    .train_step = toy_train_step,
    .val_step = toy_val_step,
    .destroy = free,
};

static const duet_module_type toy_root_type = {"Toy", NULL, NULL};

static duet_model *toy_model(void) {
    duet_rng rng = duet_rng_make(3, 0);
    duet_module *root = NULL, *g = NULL, *d = NULL, *l = NULL;
    TU_OK(duet_module_create(&toy_root_type, NULL, &root));
    TU_OK(duet_linear_module_create(4, 4, true, &rng, &g));
    TU_OK(duet_module_add_child(root, "generator", g));
    TU_OK(duet_linear_module_create(4, 1, true, &rng, &d));
    TU_OK(duet_module_add_child(root, "discriminator", d));
    TU_OK(duet_l1_loss_module_create(1.0f, &l));
    TU_OK(duet_module_add_child(root, "pixel_loss", l));
    duet_model *m = NULL;
    TU_OK(duet_model_create(&toy_ops, calloc(1, sizeof(toy)), root, &m));
    return m;
}

static void test_model_dispatch(void **state) {
    (void)state;
    duet_model *m = toy_model();
    assert_string_equal(duet_model_type_name(m), "Toy");
    assert_non_null(duet_model_part(m, "discriminator"));
    assert_null(duet_model_part(m, "perceptual_loss"));
    toy *t = duet_model_impl(m);
    duet_rng rng = duet_rng_make(4, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){2, 4}, 1);
    duet_batch b = {0};
    TU_OK(duet_batch_add_tensor(&b, "lq", x));
    duet_log_vars log;
    TU_OK(duet_model_train_step(m, &b, NULL, &log));
    TU_OK(duet_model_train_step(m, &b, NULL, &log));
    double v;
    assert_true(duet_log_vars_get(&log, "calls", &v) && v == 2.0);
    assert_ptr_equal(t->last_batch, &b);

    duet_val_output out = {0};
    TU_OK(duet_model_val_step(m, &b, &out));
    assert_false(t->val_saw_training);
    assert_false(t->val_saw_grad);
    assert_true(duet_module_is_training(duet_model_part(m, "generator"))); /* restored */
    assert_true(duet_grad_enabled());
    assert_int_equal(out.nsamples, 2);
    assert_int_equal(out.output->shape[1], 4);
    assert_false(out.output->requires_grad);
    duet_val_output_clear(&out);
    assert_null(out.output);
    duet_batch_clear(&b);
    duet_tensor_release(x);
    duet_model_destroy(m);
}

static void test_optimizer_set(void **state) {
    (void)state;
    duet_model *m = toy_model();
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts ao = duet_adam_opts_default();
    ao.lr = 0.5f;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &ao));
    duet_sgd_opts so = duet_sgd_opts_default();
    so.lr = 0.25f;
    TU_OK(duet_optimizer_set_add_sgd(s, m, "discriminator", &so));
    assert_int_equal(duet_optimizer_set_add_adam(s, m, "generator", &ao), DUET_EINVAL);
    assert_int_equal(duet_optimizer_set_add_adam(s, m, "perceptual_loss", &ao), DUET_ENOTFOUND);
    /* A part with no parameters cannot have an optimizer. */
    assert_int_equal(duet_optimizer_set_add_adam(s, m, "pixel_loss", &ao), DUET_EINVAL);
    assert_int_equal(duet_optimizer_set_count(s), 2);
    assert_string_equal(duet_optimizer_set_name(s, 1), "discriminator");
    assert_true(duet_optimizer_lr(duet_optimizer_set_get(s, "generator")) == 0.5f);
    assert_true(duet_optimizer_lr(duet_optimizer_set_at(s, 1)) == 0.25f);
    duet_optimizer *o = NULL;
    assert_int_equal(duet_optimizer_set_require(s, "critic", &o), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "generator, discriminator"));

    /* The discriminator's optimizer moves only the discriminator. */
    duet_tensor *g0 = tu_flat_params(duet_model_part(m, "generator"));
    duet_tensor *d0 = tu_flat_params(duet_model_part(m, "discriminator"));
    duet_module *d = duet_model_part(m, "discriminator");
    for (size_t i = 0; i < duet_module_param_count(d); i++) {
        TU_OK(duet_tensor_ensure_grad(duet_module_param_at(d, i)));
        for (int64_t k = 0; k < duet_module_param_at(d, i)->numel; k++)
            duet_module_param_at(d, i)->grad[k] = 1;
    }
    TU_OK(duet_optimizer_step(duet_optimizer_set_get(s, "discriminator")));
    duet_tensor *g1 = tu_flat_params(duet_model_part(m, "generator"));
    duet_tensor *d1 = tu_flat_params(d);
    assert_true(tu_same_data(g0, g1));
    for (int64_t k = 0; k < d0->numel; k++)
        assert_float_equal(d1->data[k], d0->data[k] - 0.25f, 1e-6);
    duet_tensor_release(g0);
    duet_tensor_release(g1);
    duet_tensor_release(d0);
    duet_tensor_release(d1);
    duet_optimizer_set_destroy(s);
    duet_model_destroy(m);
}

/* ---- losses ----------------------------------------------------------------------- */

static void test_gan_loss(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){6, 1}, 2);
    duet_gan_loss_opts o = duet_gan_loss_opts_default();
    o.loss_weight = 0.25f;
    duet_module *g = NULL;
    TU_OK(duet_gan_loss_create(&o, &g));
    double real = 0, fake = 0;
    for (int i = 0; i < 6; i++) {
        double v = x->data[i];
        real += log1p(exp(-v)) / 6; /* BCE(x, 1) = softplus(-x) */
        fake += log1p(exp(v)) / 6;  /* BCE(x, 0) = softplus(x) */
    }
    duet_tensor *l = NULL;
    TU_OK(duet_gan_loss(g, x, true, false, &l)); /* generator: weighted */
    assert_float_equal(l->data[0], 0.25 * real, 1e-6);
    duet_tensor_release(l);
    TU_OK(duet_gan_loss(g, x, true, true, &l)); /* discriminator: weight 1 */
    assert_float_equal(l->data[0], real, 1e-6);
    duet_tensor_release(l);
    TU_OK(duet_gan_loss(g, x, false, true, &l));
    assert_float_equal(l->data[0], fake, 1e-6);
    duet_tensor_release(l);
    TU_OK(duet_module_forward(g, x, &l)); /* forward = the generator's loss */
    assert_float_equal(l->data[0], 0.25 * real, 1e-6);
    duet_tensor_release(l);
    assert_int_equal(duet_module_param_count(g), 0);
    duet_module_destroy(g);

    o.gan_type = "lsgan";
    o.real_label_val = 0.9f;
    TU_OK(duet_gan_loss_create(&o, &g));
    double ls = 0;
    for (int i = 0; i < 6; i++) ls += (x->data[i] - 0.9) * (x->data[i] - 0.9) / 6;
    TU_OK(duet_gan_loss(g, x, true, true, &l));
    assert_float_equal(l->data[0], ls, 1e-5);
    duet_tensor_release(l);
    duet_module_destroy(g);
    o.gan_type = "softplus";
    assert_int_equal(duet_gan_loss_create(&o, &g), DUET_EUNSUPPORTED);
    assert_non_null(strstr(duet_last_error(), "softplus"));
    assert_non_null(strstr(duet_last_error(), "hinge"));
    duet_tensor_release(x);
}

static void test_pixel_losses(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_tensor *a = tu_randn(&rng, 2, (int64_t[]){3, 4}, 1);
    duet_tensor *b = tu_randn(&rng, 2, (int64_t[]){3, 4}, 1);
    double l1 = 0, l2 = 0;
    for (int i = 0; i < 12; i++) {
        double d = (double)a->data[i] - b->data[i];
        l1 += fabs(d) / 12;
        l2 += d * d / 12;
    }
    duet_module *m = NULL;
    duet_tensor *l = NULL;
    TU_OK(duet_l1_loss_module_create(0.01f, &m));
    assert_true(duet_module_is(m, "L1Loss"));
    TU_OK(duet_module_forward2(m, a, b, &l));
    assert_float_equal(l->data[0], 0.01 * l1, 1e-7);
    duet_tensor_release(l);
    assert_int_equal(duet_module_forward(m, a, &l), DUET_EINVAL);
    duet_module_destroy(m);
    TU_OK(duet_mse_loss_module_create(2.0f, &m));
    TU_OK(duet_module_forward2(m, a, b, &l));
    assert_float_equal(l->data[0], 2.0 * l2, 1e-5);
    duet_tensor_release(l);
    duet_module_destroy(m);
    duet_tensor_release(a);
    duet_tensor_release(b);
}

/* ---- perceptual loss ------------------------------------------------------------------ */

static duet_perceptual_loss_opts tiny_perceptual(void) {
    duet_perceptual_loss_opts o = duet_perceptual_loss_opts_default();
    int cfg[4] = {4, 4, 0, 8}; /* modules: 0 conv 1 relu 2 conv 3 relu 4 pool 5 conv 6 relu */
    o.ncfg = 4;
    memcpy(o.cfg, cfg, sizeof cfg);
    o.layer_ids[0] = 5;
    o.norm_img = false;
    o.style_weight = 0.0f; /* the perceptual term alone (style: test_esrgan.c) */
    return o;
}

static void test_perceptual_structure(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_perceptual_loss_opts o = duet_perceptual_loss_opts_default(); /* vgg19, '34' */
    duet_module *p = NULL;
    TU_OK(duet_perceptual_loss_create(&o, &rng, &p));
    duet_module *layers = duet_module_child(duet_module_child(p, "vgg"), "vgg_layers");
    assert_int_equal(duet_module_child_count(layers), 35); /* features[:35]: up to conv5_4 */
    assert_true(duet_module_is(duet_module_child_at(layers, 34), "Conv2d"));
    assert_true(duet_module_is(duet_module_child_at(layers, 4), "MaxPool2d"));
    duet_named_tensors st = {0};
    TU_OK(duet_module_state(p, &st));
    /* PyTorch's order: a module's own entries, then its children's. */
    assert_string_equal(st.items[0].name, "vgg.mean");
    assert_string_equal(st.items[2].name, "vgg.vgg_layers.0.weight");
    bool has_mean = false, has_34 = false;
    for (size_t i = 0; i < st.count; i++) {
        has_mean |= strcmp(st.items[i].name, "vgg.mean") == 0;
        has_34 |= strcmp(st.items[i].name, "vgg.vgg_layers.34.weight") == 0;
    }
    assert_true(has_mean && has_34);
    assert_int_equal(duet_module_param_at(duet_module_child_at(layers, 34), 0)->shape[0], 512);
    duet_named_tensors_clear(&st);
    assert_int_equal(duet_module_num_parameters(p, true), 0);
    duet_module_destroy(p);

    o.layer_ids[0] = 37;
    assert_int_equal(duet_perceptual_loss_create(&o, &rng, &p), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "37"));
    o.layer_ids[0] = 34;
    o.criterion = "l2";
    assert_int_equal(duet_perceptual_loss_create(&o, &rng, &p), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "'l2'"));
    /* MMEditing's default style_weight is 1.0. */
    assert_true(duet_perceptual_loss_opts_default().style_weight == 1.0f);
}

static double perceptual_value(duet_perceptual_loss_opts o, duet_tensor *x, duet_tensor *gt) {
    duet_rng rng = duet_rng_make(8, 0); /* same weights every time */
    duet_module *p = NULL;
    TU_OK(duet_perceptual_loss_create(&o, &rng, &p));
    duet_tensor *l = NULL, *s = NULL;
    TU_OK(duet_perceptual_loss(p, x, gt, &l, &s));
    assert_null(s);
    double v = l->data[0];
    duet_tensor_release(l);
    duet_module_destroy(p);
    return v;
}

static void test_perceptual_value(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(9, 0);
    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){2, 3, 12, 12}, 0, 1);
    duet_tensor *gt = tu_rand(&rng, 4, (int64_t[]){2, 3, 12, 12}, 0, 1);
    duet_perceptual_loss_opts o = tiny_perceptual();
    assert_true(perceptual_value(o, x, x) == 0.0);
    double l5 = perceptual_value(o, x, gt);
    assert_true(l5 > 0);
    o.perceptual_weight = 3.0f;
    assert_float_equal(perceptual_value(o, x, gt), 3 * l5, 1e-6 * l5);
    o.perceptual_weight = 1.0f;
    o.layer_ids[0] = 2;
    o.layer_weights[0] = 0.5f;
    double l2 = perceptual_value(o, x, gt);
    o.nlayer_weights = 2;
    o.layer_ids[1] = 5;
    o.layer_weights[1] = 1.0f;
    assert_float_equal(perceptual_value(o, x, gt), l2 + l5, 1e-6 * (l2 + l5));
    /* norm_img maps [-1, 1] to [0, 1] first. */
    o = tiny_perceptual();
    o.norm_img = true;
    duet_tensor *x2 = NULL, *gt2 = NULL;
    TU_OK(duet_tensor_clone(x, &x2));
    TU_OK(duet_tensor_clone(gt, &gt2));
    for (int64_t i = 0; i < x->numel; i++) {
        x2->data[i] = 2 * x->data[i] - 1;
        gt2->data[i] = 2 * gt->data[i] - 1;
    }
    assert_float_equal(perceptual_value(o, x2, gt2), l5, 1e-5 * l5);

    /* Gradients reach the image, never the frozen VGG or gt. */
    o = tiny_perceptual();
    duet_module *p = NULL;
    TU_OK(duet_perceptual_loss_create(&o, &rng, &p));
    x->requires_grad = true;
    gt->requires_grad = true;
    duet_tensor *l = NULL, *s = NULL;
    TU_OK(duet_perceptual_loss(p, x, gt, &l, &s));
    TU_OK(duet_backward(l));
    double gsum = 0;
    for (int64_t i = 0; i < x->numel; i++) gsum += fabs(x->grad[i]);
    assert_true(gsum > 0);
    assert_null(gt->grad);
    duet_module *layers = duet_module_child(duet_module_child(p, "vgg"), "vgg_layers");
    duet_module *conv0 = duet_module_child_at(layers, 0);
    assert_null(duet_module_param_at(conv0, 0)->grad);
    duet_tensor_release(l);
    duet_module_destroy(p);
    duet_tensor_release(x);
    duet_tensor_release(gt);
    duet_tensor_release(x2);
    duet_tensor_release(gt2);
}

static void test_perceptual_weights_file(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(10, 0);
    duet_perceptual_loss_opts o = tiny_perceptual();
    duet_module *a = NULL, *b = NULL;
    TU_OK(duet_perceptual_loss_create(&o, &rng, &a));
    duet_module *la = duet_module_child(duet_module_child(a, "vgg"), "vgg_layers");
    /* torchvision's names: features.<i>.weight / bias */
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(la, w, "features."));
    char path[] = "/tmp/duet_test_vggXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    o.weights_path = path;
    TU_OK(duet_perceptual_loss_create(&o, &rng, &b)); /* rng moved on: other init */
    duet_module *lb = duet_module_child(duet_module_child(b, "vgg"), "vgg_layers");
    duet_tensor *pa = tu_flat_params(la), *pb = tu_flat_params(lb);
    assert_true(tu_same_data(pa, pb));
    assert_int_equal(duet_module_num_parameters(b, true), 0);
    duet_tensor_release(pa);
    duet_tensor_release(pb);
    duet_module_destroy(b);
    /* A file for another network fails and names the entry. */
    int cfg[4] = {4, 6, 0, 8};
    memcpy(o.cfg, cfg, sizeof cfg);
    assert_int_equal(duet_perceptual_loss_create(&o, &rng, &b), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "features.2.weight"));
    unlink(path);
    assert_int_not_equal(duet_perceptual_loss_create(&o, &rng, &b), DUET_OK);
    assert_non_null(strstr(duet_last_error(), path));
    duet_module_destroy(a);
}

/* ---- SRGAN and BasicRestorer in one process ------------------------------------------- */

static void test_srgan_structure(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(11, 0);
    duet_srgan_opts o = tiny_srgan();
    duet_model *m = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    duet_module *root = duet_model_module(m);
    const char *parts[5] = {"generator", "discriminator", "gan_loss", "pixel_loss",
                            "perceptual_loss"};
    assert_int_equal(duet_module_child_count(root), 5);
    for (int i = 0; i < 5; i++) assert_string_equal(duet_module_child_name_at(root, i), parts[i]);
    assert_true(duet_module_is(duet_model_part(m, "generator"), "MSRResNet"));
    assert_true(duet_module_is(duet_model_part(m, "discriminator"), "ModifiedVGG"));
    assert_int_equal(duet_module_num_parameters(duet_model_part(m, "perceptual_loss"), true), 0);
    duet_named_tensors st = {0};
    TU_OK(duet_module_state(root, &st));
    assert_string_equal(st.items[0].name, "generator.conv_first.weight");
    bool disc = false, percep = false;
    for (size_t i = 0; i < st.count; i++) {
        disc |= strcmp(st.items[i].name, "discriminator.bn0_1.running_mean") == 0;
        percep |= strcmp(st.items[i].name, "perceptual_loss.vgg.vgg_layers.5.weight") == 0;
    }
    assert_true(disc && percep);
    duet_named_tensors_clear(&st);
    /* forward = the generator's output */
    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){1, 3, 8, 8}, 0, 1), *y = NULL, *z = NULL;
    TU_OK(duet_model_forward(m, x, &y));
    TU_OK(duet_module_forward(duet_model_part(m, "generator"), x, &z));
    assert_int_equal(y->shape[2], 32);
    assert_true(tu_same_data(y, z));
    duet_tensor_release(y);
    duet_tensor_release(z);
    TU_OK(duet_module_forward(root, x, &y)); /* the model as a module, too */
    duet_tensor_release(y);
    duet_tape_clear();
    duet_tensor_release(x);
    duet_model_destroy(m);

    o.pixel_loss_weight = 0;
    o.perceptual = false;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    assert_int_equal(duet_module_child_count(duet_model_module(m)), 3);
    duet_model_destroy(m);
    o.disc_steps = 0;
    assert_int_equal(duet_srgan_create(&o, &rng, &m), DUET_EINVAL);
}

static void test_srgan_train_step(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    duet_srgan_opts o = tiny_srgan();
    o.disc_init_steps = 1; /* step 0: discriminator only */
    duet_model *m = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    duet_optimizer_set *opts = tu_adam_pair(m, 1e-3f);
    duet_batch b;
    tu_sr_batch(&b, 13, 2);
    duet_module *g = duet_model_part(m, "generator"), *d = duet_model_part(m, "discriminator"),
                *p = duet_model_part(m, "perceptual_loss");
    duet_tensor *g0 = tu_flat_params(g), *d0 = tu_flat_params(d), *p0 = tu_flat_params(p);
    duet_log_vars log;
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(duet_srgan_step_counter(m), 1);
    double v;
    assert_false(duet_log_vars_get(&log, "loss_pix", &v));
    assert_false(duet_log_vars_get(&log, "loss_gan", &v));
    assert_true(duet_log_vars_get(&log, "loss_d_real", &v) && v > 0);
    assert_true(duet_log_vars_get(&log, "loss_d_fake", &v) && v > 0);
    duet_tensor *g1 = tu_flat_params(g), *d1 = tu_flat_params(d);
    assert_true(tu_same_data(g0, g1));  /* no generator step before disc_init_steps */
    assert_false(tu_same_data(d0, d1)); /* the discriminator stepped */
    assert_int_equal(duet_tape_size(), 0);

    TU_OK(duet_model_train_step(m, &b, opts, &log));
    const char *names[8] = {"loss_pix", "loss_perceptual", "loss_gan", "loss", "loss_d_real",
                            "loss_d_fake", "real_logit_mean", "fake_logit_mean"};
    for (int i = 0; i < 8; i++) {
        assert_true(duet_log_vars_get(&log, names[i], &v));
        assert_true(isfinite(v));
        assert_string_equal(log.names[i], names[i]); /* MMEditing's log_vars order */
    }
    assert_int_equal(log.count, 8);
    /* "loss": the generator's parse_losses total (pixel + perceptual + GAN). */
    double sum = log.values[0] + log.values[1] + log.values[2];
    assert_true(duet_log_vars_get(&log, "loss", &v));
    assert_true(fabs(v - sum) <= 1e-12 * fabs(sum));
    duet_tensor *g2 = tu_flat_params(g), *p2 = tu_flat_params(p);
    assert_false(tu_same_data(g1, g2)); /* now the generator stepped */
    assert_true(tu_same_data(p0, p2));  /* the perceptual network never moves */
    /* unfrozen after the step */
    assert_true(duet_module_param(duet_module_child(d, "conv0_0"), "weight")->requires_grad);
    assert_int_equal(duet_tape_size(), 0);
    /* A missing optimizer is a clear error. */
    duet_optimizer_set *only_g = NULL;
    TU_OK(duet_optimizer_set_create(&only_g));
    TU_OK(duet_optimizer_set_add_adam(only_g, m, "generator", NULL));
    assert_int_equal(duet_model_train_step(m, &b, only_g, &log), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "discriminator"));
    duet_optimizer_set_destroy(only_g);

    duet_val_output out = {0};
    TU_OK(duet_model_val_step(m, &b, &out));
    assert_true(duet_log_vars_get(&out.metrics, "PSNR", &v) && v > 0 && isfinite(v));
    assert_true(duet_log_vars_get(&out.metrics, "SSIM", &v) && v < 1);
    assert_int_equal(out.output->shape[3], 32);
    duet_val_output_clear(&out);
    assert_int_equal(duet_tape_size(), 0);
    for (duet_tensor **t = (duet_tensor *[]){g0, d0, p0, g1, d1, g2, p2, NULL}; *t; t++)
        duet_tensor_release(*t);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

static void test_basic_restorer(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(14, 0);
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 1;
    o.test_cfg.crop_border = 2;
    duet_model *m = NULL;
    TU_OK(duet_basic_restorer_create(&o, &rng, &m));
    assert_int_equal(duet_module_child_count(duet_model_module(m)), 2);
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 2e-3f;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    duet_batch b;
    tu_sr_batch(&b, 15, 2);
    duet_log_vars log;
    double first = 0, last = 0, total = 0;
    for (int it = 0; it < 8; it++) {
        TU_OK(duet_model_train_step(m, &b, s, &log));
        assert_true(duet_log_vars_get(&log, "loss_pix", &last));
        assert_true(duet_log_vars_get(&log, "loss", &total) && total == last);
        if (it == 0) first = last;
    }
    assert_true(last < first);
    duet_val_output out = {0};
    duet_batch lq_only = {0};
    TU_OK(duet_batch_add_tensor(&lq_only, "lq", duet_batch_tensor_get(&b, "lq")));
    TU_OK(duet_model_val_step(m, &lq_only, &out));
    assert_int_equal(out.metrics.count, 0); /* no gt, no metrics */
    TU_OK(duet_model_val_step(m, &b, &out));
    assert_int_equal(out.metrics.count, 2);
    duet_val_output_clear(&out);
    duet_batch_clear(&lq_only);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(s);
    duet_model_destroy(m);
    o.pixel_loss = "CharbonnierLoss";
    assert_int_equal(duet_basic_restorer_create(&o, &rng, &m), DUET_EINVAL);
}

/* ---- registry --------------------------------------------------------------------------- */

static const char *srgan_cfg =
    "model = {\n"
    "  type = \"SRGAN\";\n"
    "  generator = { type = \"MSRResNet\"; in_channels = 3; out_channels = 3;\n"
    "                mid_channels = 8; num_blocks = 1; upscale_factor = 4; };\n"
    "  discriminator = { type = \"ModifiedVGG\"; in_channels = 3; mid_channels = 4;\n"
    "                    input_size = 32; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1e-2; reduction = \"mean\"; };\n"
    "  perceptual_loss = { type = \"PerceptualLoss\"; layer_ids = [5]; layer_weights = [1.0];\n"
    "                      cfg = [4, 4, 0, 8]; perceptual_weight = 1.0; style_weight = 0.0;\n"
    "                      norm_img = false; pretrained = \"random\"; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"vanilla\"; loss_weight = 5e-3;\n"
    "               real_label_val = 1.0; fake_label_val = 0.0; };\n"
    "  train_cfg = { disc_steps = 1; disc_init_steps = 3; };\n"
    "  test_cfg = { metrics = [\"PSNR\"]; crop_border = 4; convert_to = \"y\"; };\n"
    "};\n"
    "optimizers = {\n"
    "  generator = { type = \"Adam\"; lr = 1e-4; betas = [0.5, 0.999]; };\n"
    "  discriminator = { type = \"SGD\"; lr = 2e-4; momentum = 0.9; };\n"
    "};\n";

static void test_registry_srgan(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(srgan_cfg, "<test>", &cfg));
    duet_rng rng = duet_rng_make(16, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    assert_string_equal(duet_model_type_name(m), "SRGAN");
    duet_tensor *w = duet_module_param(duet_module_child(duet_model_part(m, "generator"),
                                                         "conv_first"), "weight");
    assert_int_equal(w->shape[0], 8);
    duet_module *vgg_layers =
        duet_module_child(duet_module_child(duet_model_part(m, "perceptual_loss"), "vgg"),
                          "vgg_layers");
    assert_int_equal(duet_module_child_count(vgg_layers), 6);
    duet_optimizer_set *s = NULL;
    TU_OK(duet_build_optimizers(cfg, "optimizers", m, &s));
    assert_int_equal(duet_optimizer_set_count(s), 2);
    assert_float_equal(duet_optimizer_lr(duet_optimizer_set_get(s, "generator")), 1e-4, 1e-10);
    assert_float_equal(duet_optimizer_lr(duet_optimizer_set_get(s, "discriminator")), 2e-4, 1e-10);
    TU_OK(duet_config_check_unused(cfg));
    /* test_cfg reached val_step: one metric, PSNR on Y. */
    duet_batch b;
    tu_sr_batch(&b, 17, 2);
    duet_val_output out = {0};
    TU_OK(duet_model_val_step(m, &b, &out));
    assert_int_equal(out.metrics.count, 1);
    assert_string_equal(out.metrics.names[0], "PSNR");
    duet_log_vars want;
    duet_test_cfg tc = {.nmetrics = 1, .metrics = {"PSNR"}, .crop_border = 4, .convert_to = "y"};
    TU_OK(duet_evaluate(&tc, out.output, duet_batch_tensor_get(&b, "gt"), &want));
    assert_true(want.values[0] == out.metrics.values[0]);
    /* train_cfg reached train_step: disc_init_steps 3 */
    duet_log_vars log;
    double v;
    TU_OK(duet_model_train_step(m, &b, s, &log));
    assert_false(duet_log_vars_get(&log, "loss_gan", &v));
    duet_val_output_clear(&out);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(s);
    duet_model_destroy(m);
    duet_config_destroy(cfg);
}

static void test_registry_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(18, 0);
    duet_config *cfg = NULL;
    duet_model *m = NULL;
    duet_module *mod = NULL;
    TU_OK(duet_config_load_string("model = { type = \"EDVR\"; };\n"
                                  "net = { type = \"EDVRNet\"; };\n"
                                  "loss = { type = \"L1Loss\"; loss_wieght = 2.0; };\n"
                                  "br = { type = \"BasicRestorer\";\n"
                                  "       generator = { type = \"MSRResNet\"; mid_channels = 4;\n"
                                  "                     num_blocks = 1; };\n"
                                  "       pixel_loss = { type = \"MSELoss\"; };\n"
                                  "       train_cfg = { fancy = 1; }; };\n"
                                  "p = { type = \"PerceptualLoss\"; cfg = [4, 4, 0, 8];\n"
                                  "      layer_weights = { conv2 = 0.5; relu6 = 1.0; }; };\n"
                                  "p2 = { type = \"PerceptualLoss\";\n"
                                  "       layer_weights = { a = 1.0; }; };\n"
                                  "opt = { critic = { type = \"Adam\"; lr = 1e-3; }; };\n"
                                  "opt2 = { generator = { type = \"RMSprop\"; lr = 1e-3; }; };\n",
                                  "<test>", &cfg));
    assert_int_equal(duet_build_model(cfg, "model", &rng, &m), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "'EDVR'"));
    assert_non_null(strstr(duet_last_error(), "SRGAN, ESRGAN, BasicRestorer"));
    assert_int_equal(duet_build_module(cfg, "net", &rng, &mod), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "PerceptualLoss"));
    TU_OK(duet_build_module(cfg, "loss", &rng, &mod));
    assert_true(duet_module_is(mod, "L1Loss"));
    duet_module_destroy(mod);
    TU_OK(duet_build_module(cfg, "p", &rng, &mod));
    assert_int_equal(
        duet_module_child_count(duet_module_child(duet_module_child(mod, "vgg"), "vgg_layers")), 7);
    duet_module_destroy(mod);
    assert_int_equal(duet_build_module(cfg, "p2", &rng, &mod), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "layer_ids = [34]"));
    TU_OK(duet_build_model(cfg, "br", &rng, &m));
    assert_true(duet_module_is(duet_model_part(m, "pixel_loss"), "MSELoss"));
    duet_optimizer_set *s = NULL;
    assert_int_equal(duet_build_optimizers(cfg, "opt", m, &s), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "critic"));
    assert_non_null(strstr(duet_last_error(), "generator, pixel_loss"));
    assert_int_equal(duet_build_optimizers(cfg, "opt2", m, &s), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "RMSprop"));
    duet_model_destroy(m);
    /* The typo and the unknown train_cfg key are left for check_unused. */
    assert_int_equal(duet_config_check_unused(cfg), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "loss_wieght"));
    duet_config_destroy(cfg);
    const char *const *t = duet_registry_model_types();
    assert_string_equal(t[0], "SRGAN");
    assert_string_equal(t[1], "ESRGAN");
    assert_string_equal(t[2], "BasicRestorer");
    assert_string_equal(t[3], "Pix2Pix");
    assert_string_equal(t[4], "CycleGAN");
    assert_string_equal(t[5], "GLInpaintor");
    assert_string_equal(t[6], "TwoStageInpaintor");
    assert_string_equal(t[7], "DeepFillv1Inpaintor");
    assert_string_equal(t[8], "PConvInpaintor");
    assert_string_equal(t[9], "RealESRGAN");
    assert_null(t[10]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_log_vars),
        cmocka_unit_test(test_model_dispatch),
        cmocka_unit_test(test_optimizer_set),
        cmocka_unit_test(test_gan_loss),
        cmocka_unit_test(test_pixel_losses),
        cmocka_unit_test(test_perceptual_structure),
        cmocka_unit_test(test_perceptual_value),
        cmocka_unit_test(test_perceptual_weights_file),
        cmocka_unit_test(test_srgan_structure),
        cmocka_unit_test(test_srgan_train_step),
        cmocka_unit_test(test_basic_restorer),
        cmocka_unit_test(test_registry_srgan),
        cmocka_unit_test(test_registry_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
