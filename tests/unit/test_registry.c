/* The open registry (duet/train.h): user types registered by name are built
 * from config groups like the built-ins, which register through the same
 * calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "duet/duet.h"
#include "testutil.h"

/* ---- a user module: forward(x) = factor * x ---------------------------------------- */

static int scale_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    (void)nin;
    return duet_scale(in[0], *(float *)duet_module_impl(self), out);
}
static const duet_module_type scale_type = {"TestScale", scale_forward, free};

static int build_scale(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out) {
    (void)rng;
    double f = 1.0;
    DUET_TRY(duet_config_get_double_or(cfg, "factor", 1.0, &f));
    if (f == 0.0) return duet__error(DUET_ECONFIG, "%s.factor: must not be 0", path);
    float *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    *impl = (float)f;
    return duet_module_create(&scale_type, impl, out);
}

/* ---- a user model whose one part is built through the registry ---------------------- */

static int one_forward(duet_model *m, duet_tensor *x, duet_tensor **out) {
    return duet_module_forward(duet_model_part(m, "generator"), x, out);
}
static const duet_model_ops one_ops = {.name = "TestOne", .forward = one_forward};
static const duet_module_type one_root = {"TestOne", NULL, NULL};

static int build_one(duet_config *cfg, const char *path, duet_rng *rng, duet_model **out) {
    (void)path;
    duet_module *root = NULL, *g = NULL;
    DUET_TRY(duet_build_module(cfg, "generator", rng, &g));
    int rc = duet_module_create(&one_root, NULL, &root);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generator", g);
    else duet_module_destroy(g);
    if (rc != DUET_OK) {
        duet_module_destroy(root);
        return rc;
    }
    return duet_model_create(&one_ops, NULL, root, out);
}

static int build_no_dataset(duet_config *cfg, const char *path, bool train, duet_dataset **out) {
    (void)cfg, (void)train, (void)out;
    return duet__error(DUET_ENOTFOUND, "%s: nothing here", path);
}

static int count_types(const char *const *t) {
    int n = 0;
    while (t[n] != NULL) n++;
    return n;
}

static void test_register_and_build(void **state) {
    (void)state;
    int nmodules = count_types(duet_registry_module_types());
    int nmodels = count_types(duet_registry_model_types());
    TU_OK(duet_registry_register_module("TestScale", build_scale));
    TU_OK(duet_registry_register_model("TestOne", build_one));
    /* Built-ins first, then ours, in order. */
    const char *const *mt = duet_registry_module_types();
    assert_int_equal(count_types(mt), nmodules + 1);
    assert_string_equal(mt[0], "MSRResNet");
    assert_string_equal(mt[nmodules], "TestScale");
    assert_string_equal(duet_registry_model_types()[nmodels], "TestOne");

    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string("model = { type = \"TestOne\";\n"
                                  "  generator = { type = \"TestScale\"; factor = 3.0; }; };\n"
                                  "bad = { type = \"TestOne\";\n"
                                  "  generator = { type = \"TestScale\"; factor = 0.0; }; };\n",
                                  "<test>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    assert_string_equal(duet_model_type_name(m), "TestOne");
    duet_tensor *x = tu_rand(&rng, 2, (int64_t[]){2, 3}, -1, 1), *y = NULL;
    TU_OK(duet_model_forward(m, x, &y));
    for (int64_t i = 0; i < x->numel; i++) assert_true(y->data[i] == 3.0f * x->data[i]);
    duet_tensor_release(x), duet_tensor_release(y);
    duet_model_destroy(m);
    /* The builder's error comes back with its message; nothing is left. */
    assert_int_equal(duet_build_model(cfg, "bad", &rng, &m), DUET_ECONFIG);
    assert_null(m);
    assert_non_null(strstr(duet_last_error(), "factor: must not be 0"));
    /* Every key was read by the builders. */
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
}

static void test_register_errors(void **state) {
    (void)state;
    /* Names are unique across built-ins and users. */
    tu_expect_error(duet_registry_register_model("SRGAN", build_one), DUET_EINVAL,
                    "already registered", NULL);
    tu_expect_error(duet_registry_register_loss("L1Loss", build_scale), DUET_EINVAL,
                    "'L1Loss' is already registered", NULL);
    TU_OK(duet_registry_register_module("TestTwice", build_scale));
    tu_expect_error(duet_registry_register_module("TestTwice", build_scale), DUET_EINVAL,
                    "TestTwice", NULL);
    tu_expect_error(duet_registry_register_module("", build_scale), DUET_EINVAL, "name", NULL);
    tu_expect_error(duet_registry_register_model("TestNull", NULL), DUET_EINVAL, "builder",
                    NULL);
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    tu_expect_error(duet_registry_register_dataset(longname, build_no_dataset), DUET_EINVAL,
                    "63 characters", NULL);

    /* Unknown types list what there is, registered ones included. */
    TU_OK(duet_registry_register_dataset("TestNoData", build_no_dataset));
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string("d = { type = \"Nope\"; };\n"
                                  "e = { type = \"TestNoData\"; };\n",
                                  "<test>", &cfg));
    duet_dataset *ds = NULL;
    tu_expect_error(duet_build_dataset(cfg, "d", true, &ds), DUET_ECONFIG, "'Nope'",
                    "SRFolderGTDataset, SRFolderDataset", "TestNoData", NULL);
    tu_expect_error(duet_build_dataset(cfg, "e", true, &ds), DUET_ENOTFOUND, "nothing here",
                    NULL);
    assert_null(ds);
    duet_config_destroy(cfg);
}

/* ---- the built-in rows ------------------------------------------------------------- */

/* Every network a model can have is a type a config can name on its own. */
static void test_builtin_networks(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "unet = { type = \"UnetGenerator\"; in_channels = 3; out_channels = 3; num_down = 5;\n"
        "         base_channels = 2; };\n"
        "patch = { type = \"PatchDiscriminator\"; in_channels = 6; base_channels = 2; };\n"
        "resnet = { type = \"ResnetGenerator\"; base_channels = 2; num_blocks = 1;\n"
        "           norm_cfg = { type = \"IN\"; }; };\n"
        "drop = { type = \"UnetGenerator\"; num_down = 7; base_channels = 2;\n"
        "         use_dropout = true; };\n",
        "<test>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    const char *const names[][2] = {{"unet", "UnetGenerator"},
                                    {"patch", "PatchDiscriminator"},
                                    {"resnet", "ResnetGenerator"}};
    for (size_t i = 0; i < 3; i++) {
        duet_module *net = NULL;
        TU_OK(duet_build_module(cfg, names[i][0], &rng, &net));
        assert_true(duet_module_is(net, names[i][1]));
        assert_true(duet_module_num_parameters(net, true) > 0);
        duet_module_destroy(net);
    }
    /* Alone, a generator has no model to lend its Dropout layers an rng. */
    duet_module *net = NULL;
    tu_expect_error(duet_build_module(cfg, "drop", &rng, &net), DUET_EINVAL, "dropout rng", NULL);
    assert_null(net);
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
}

/* Rows of one type told apart by their parts: BasicRestorer around
 * MSRResNet, RRDBNet, EDSR or RDN, with an L1 or MSE pixel loss; a part of
 * a type no row allows is refused naming all that would do. */
static void test_model_alternatives(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "a = { type = \"BasicRestorer\";\n"
        "      generator = { type = \"RRDBNet\"; mid_channels = 4; num_blocks = 1;\n"
        "                    growth_channels = 2; };\n"
        "      pixel_loss = { type = \"MSELoss\"; loss_weight = 2.0; }; };\n"
        "b = { type = \"BasicRestorer\";\n"
        "      generator = { type = \"MSRResNet\"; mid_channels = 4; num_blocks = 1; };\n"
        "      pixel_loss = { type = \"L1Loss\"; }; };\n"
        "c = { type = \"BasicRestorer\"; generator = { type = \"UnetGenerator\"; };\n"
        "      pixel_loss = { type = \"L1Loss\"; }; };\n"
        "d = { type = \"BasicRestorer\"; generator = { type = \"MSRResNet\"; };\n"
        "      pixel_loss = { type = \"GANLoss\"; }; };\n"
        "e = { type = \"BasicRestorer\";\n"
        "      generator = { type = \"EDSR\"; mid_channels = 4; num_blocks = 1;\n"
        "                    upscale_factor = 2; rgb_std = [0.5]; };\n"
        "      pixel_loss = { type = \"L1Loss\"; }; };\n"
        "f = { type = \"BasicRestorer\";\n"
        "      generator = { type = \"RDN\"; mid_channels = 4; num_blocks = 1; num_layers = 2;\n"
        "                    channel_growth = 2; upscale_factor = 2; };\n"
        "      pixel_loss = { type = \"L1Loss\"; }; };\n"
        "g = { type = \"BasicRestorer\";\n"
        "      generator = { type = \"EDSR\"; rgb_mean = [0.1, 0.2]; };\n"
        "      pixel_loss = { type = \"L1Loss\"; }; };\n",
        "<test>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "a", &rng, &m));
    assert_true(duet_module_is(duet_model_part(m, "generator"), "RRDBNet"));
    assert_true(duet_module_is(duet_model_part(m, "pixel_loss"), "MSELoss"));
    duet_model_destroy(m);
    TU_OK(duet_build_model(cfg, "b", &rng, &m));
    assert_true(duet_module_is(duet_model_part(m, "generator"), "MSRResNet"));
    assert_true(duet_module_is(duet_model_part(m, "pixel_loss"), "L1Loss"));
    duet_model_destroy(m);
    /* EDSR x2: one PixelShufflePack; rgb_std's one value for all three. */
    TU_OK(duet_build_model(cfg, "e", &rng, &m));
    duet_module *g = duet_model_part(m, "generator");
    assert_true(duet_module_is(g, "EDSR"));
    assert_non_null(duet_module_param(duet_module_child(duet_module_child(duet_module_child(
                        g, "upsample"), "0"), "upsample_conv"), "weight"));
    assert_null(duet_module_child(duet_module_child(g, "upsample"), "1"));
    duet_tensor *lq = tu_zeros(4, (int64_t[]){1, 3, 5, 5}), *sr = NULL;
    TU_OK(duet_module_forward(g, lq, &sr));
    assert_int_equal(sr->shape[2], 10);
    duet_tensor_release(sr);
    duet_model_destroy(m);
    TU_OK(duet_build_model(cfg, "f", &rng, &m));
    g = duet_model_part(m, "generator");
    assert_true(duet_module_is(g, "RDN"));
    TU_OK(duet_module_forward(g, lq, &sr));
    assert_int_equal(sr->shape[3], 10);
    duet_tensor_release(sr);
    duet_tensor_release(lq);
    duet_model_destroy(m);
    tu_expect_error(duet_build_model(cfg, "g", &rng, &m), DUET_ECONFIG, "rgb_mean has 2 values",
                    "rgb_std 3", NULL);
    tu_expect_error(duet_build_model(cfg, "c", &rng, &m), DUET_EUNSUPPORTED, "c.generator.type",
                    "'UnetGenerator'", "MSRResNet, RRDBNet, EDSR, RDN", NULL);
    tu_expect_error(duet_build_model(cfg, "d", &rng, &m), DUET_EUNSUPPORTED,
                    "d.pixel_loss.type", "L1Loss, MSELoss", NULL);
    assert_null(m);
    duet_config_destroy(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_and_build),
        cmocka_unit_test(test_register_errors),
        cmocka_unit_test(test_builtin_networks),
        cmocka_unit_test(test_model_alternatives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
