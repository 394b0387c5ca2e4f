/* Config files: loading (syntax errors with file and line, @include), typed
 * getters with defaults and type errors, views, --set overrides (types kept,
 * new keys, group merges), unknown-key detection with did-you-mean, and the
 * config text round trip. Config files are written by the test. */
#include "testutil.h"

#include <string.h>
#include <sys/stat.h>

#include "duet/train.h"

/* Writes text to dir/name; returns the path in buf. */
static const char *write_cfg(const tu_tmpdir *fx, const char *name, const char *text, char *buf,
                             size_t size) {
    tu_write_text(tu_path(buf, size, fx->dir, name), text);
    return buf;
}

static const char *k_srgan =
    "# line 1: a small SRGAN config\n"
    "scale = 4;\n"
    "model = {\n"
    "  type = \"SRGAN\";\n"
    "  generator = { type = \"MSRResNet\"; mid_channels = 32; num_blocks = 4; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1e-2; };\n"
    "  test_cfg = { metrics = [\"PSNR\", \"SSIM\"]; crop_border = 4; };\n"
    "};\n"
    "optimizers = {\n"
    "  generator = { type = \"Adam\"; lr = 1e-4; betas = [0.9, 0.999]; };\n"
    "  discriminator = { type = \"Adam\"; lr = 2; betas = [0.9, 0.999]; };\n"
    "};\n"
    "lr_config = { policy = \"Step\"; step = [600, 900]; gamma = 0.5; by_epoch = false; };\n"
    "total_iters = 1000;\n"
    "seed = 5000000000L;\n"
    "pipeline = ( { type = \"LoadImage\"; key = \"gt\"; }, { type = \"Flip\"; ratio = 0.5; } );\n"
    "work_dir = \"./work_dirs/x\";\n";

static void test_getters(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(write_cfg(fx, "srgan.cfg", k_srgan, path, sizeof path), &cfg));
    assert_string_equal(duet_config_name(cfg), path);

    int64_t i;
    TU_OK(duet_config_get_int(cfg, "total_iters", &i));
    assert_int_equal(i, 1000);
    TU_OK(duet_config_get_int(cfg, "seed", &i));
    assert_true(i == INT64_C(5000000000));
    TU_OK(duet_config_get_int(cfg, "model.generator.mid_channels", &i));
    assert_int_equal(i, 32);
    TU_OK(duet_config_get_int_or(cfg, "model.generator.upscale_factor", 4, &i));
    assert_int_equal(i, 4);
    double d;
    TU_OK(duet_config_get_double(cfg, "optimizers.generator.lr", &d));
    assert_true(d == 1e-4);
    TU_OK(duet_config_get_double(cfg, "optimizers.discriminator.lr", &d)); /* an integer */
    assert_true(d == 2.0);
    TU_OK(duet_config_get_double_or(cfg, "lr_config.min_lr", 0.25, &d));
    assert_true(d == 0.25);
    bool b = true;
    TU_OK(duet_config_get_bool(cfg, "lr_config.by_epoch", &b));
    assert_false(b);
    TU_OK(duet_config_get_bool_or(cfg, "lr_config.warmup", true, &b));
    assert_true(b);
    const char *s;
    TU_OK(duet_config_get_string(cfg, "model.type", &s));
    assert_string_equal(s, "SRGAN");
    TU_OK(duet_config_get_string_or(cfg, "load_from", "", &s));
    assert_string_equal(s, "");

    int64_t steps[4];
    size_t n;
    TU_OK(duet_config_get_int_array(cfg, "lr_config.step", steps, 4, &n));
    assert_int_equal(n, 2);
    assert_true(steps[0] == 600 && steps[1] == 900);
    tu_expect_error(duet_config_get_int_array(cfg, "lr_config.step", steps, 1, &n), DUET_ECONFIG,
                    "has 2 elements; at most 1", NULL);
    double betas[2];
    TU_OK(duet_config_get_double_array(cfg, "optimizers.generator.betas", betas, 2, &n));
    assert_true(n == 2 && betas[0] == 0.9 && betas[1] == 0.999);
    double steps_f[2];
    TU_OK(duet_config_get_double_array(cfg, "lr_config.step", steps_f, 2, &n));
    assert_true(steps_f[1] == 900.0);
    const char *metrics[4];
    TU_OK(duet_config_get_string_array(cfg, "model.test_cfg.metrics", metrics, 4, &n));
    assert_int_equal(n, 2);
    assert_string_equal(metrics[1], "SSIM");
    tu_expect_error(duet_config_get_int_array(cfg, "model.test_cfg.metrics", steps, 4, &n),
                    DUET_ECONFIG, "element 0 is a string", NULL);

    /* Groups keyed by name, lists by index. */
    TU_OK(duet_config_length(cfg, "optimizers", &n));
    assert_int_equal(n, 2);
    TU_OK(duet_config_member_name(cfg, "optimizers", 1, &s));
    assert_string_equal(s, "discriminator");
    TU_OK(duet_config_length(cfg, "", &n));
    assert_int_equal(n, 8);
    TU_OK(duet_config_length(cfg, "pipeline", &n));
    assert_int_equal(n, 2);
    TU_OK(duet_config_get_string(cfg, "pipeline.[1].type", &s));
    assert_string_equal(s, "Flip");
    TU_OK(duet_config_get_double(cfg, "pipeline.1.ratio", &d));
    assert_true(d == 0.5);
    tu_expect_error(duet_config_get_int(cfg, "model.test_cfg.metrics.[0]", &i), DUET_ECONFIG,
                    "'model.test_cfg.metrics.[0]' must be an integer, got a string", NULL);

    assert_int_equal(duet_config_kind(cfg, "model"), DUET_CONFIG_GROUP);
    assert_int_equal(duet_config_kind(cfg, "pipeline"), DUET_CONFIG_LIST);
    assert_int_equal(duet_config_kind(cfg, "lr_config.step"), DUET_CONFIG_ARRAY);
    assert_int_equal(duet_config_kind(cfg, "seed"), DUET_CONFIG_INT);
    assert_int_equal(duet_config_kind(cfg, "lr_config.gamma"), DUET_CONFIG_FLOAT);
    assert_int_equal(duet_config_kind(cfg, "work_dir"), DUET_CONFIG_STRING);
    assert_int_equal(duet_config_kind(cfg, "lr_config.by_epoch"), DUET_CONFIG_BOOL);
    assert_int_equal(duet_config_kind(cfg, "model.nothing"), DUET_CONFIG_NONE);
    assert_false(duet_config_has(cfg, "total_iters.x"));
    assert_true(duet_config_has(cfg, "pipeline.[0].key"));

    /* A view: relative paths, full paths in messages. */
    duet_config *gen = NULL;
    TU_OK(duet_config_sub(cfg, "model.generator", &gen));
    TU_OK(duet_config_get_int(gen, "num_blocks", &i));
    assert_int_equal(i, 4);
    tu_expect_error(duet_config_get_int(gen, "type", &i), DUET_ECONFIG,
                    "'model.generator.type' must be an integer, got a string", NULL);
    tu_expect_error(duet_config_get_int(gen, "in_channels", &i), DUET_ECONFIG,
                    "missing key 'model.generator.in_channels'", NULL);
    duet_config *p0 = NULL;
    TU_OK(duet_config_sub(cfg, "pipeline.[0]", &p0));
    TU_OK(duet_config_get_string(p0, "key", &s));
    assert_string_equal(s, "gt");
    duet_config_destroy(cfg); /* views keep the config alive */
    TU_OK(duet_config_get_string(gen, "type", &s));
    assert_string_equal(s, "MSRResNet");
    duet_config_destroy(p0);
    tu_expect_error(duet_config_sub(gen, "mid_channels", &p0), DUET_ECONFIG,
                    "must be a group", NULL);
    assert_null(p0);
    duet_config_destroy(gen);
}

static void test_errors_name_file_and_line(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(write_cfg(fx, "x.cfg", k_srgan, path, sizeof path), &cfg));
    char want[700];
    int64_t i;
    /* work_dir is on line 17. */
    snprintf(want, sizeof want, "%s:17: 'work_dir' must be an integer, got a string", path);
    tu_expect_error(duet_config_get_int(cfg, "work_dir", &i), DUET_ECONFIG, want, NULL);
    snprintf(want, sizeof want, "%s:14: 'total_iters' must be a string, got an integer", path);
    const char *s;
    tu_expect_error(duet_config_get_string_or(cfg, "total_iters", "x", &s), DUET_ECONFIG,
                    want, NULL);
    bool b;
    snprintf(want, sizeof want, "%s:13: 'lr_config.gamma' must be true or false, got a float",
             path);
    tu_expect_error(duet_config_get_bool(cfg, "lr_config.gamma", &b), DUET_ECONFIG, want, NULL);
    snprintf(want, sizeof want, "%s: missing key 'iters' (an integer)", path);
    tu_expect_error(duet_config_get_int(cfg, "iters", &i), DUET_ECONFIG, want, NULL);
    tu_expect_error(duet_config_get_int(cfg, "total_iters.x", &i), DUET_ECONFIG,
                    "'total_iters' is an integer, not a group", NULL);
    tu_expect_error(duet_config_get_int(cfg, "model..type", &i), DUET_ECONFIG, "malformed", NULL);
    duet_config_destroy(cfg);

    /* Syntax errors: file and line. */
    write_cfg(fx, "bad.cfg", "a = 1;\nb = {\n  c = [1, 2.5];\n};\n", path, sizeof path);
    cfg = (duet_config *)(uintptr_t)1;
    snprintf(want, sizeof want, "%s:3: mismatched element type in array", path);
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, want, NULL);
    assert_null(cfg);
    write_cfg(fx, "bad2.cfg", "a = 1;\n\nb = ;\n", path, sizeof path);
    snprintf(want, sizeof want, "%s:3: syntax error", path);
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, want, NULL);
    tu_path(path, sizeof path, fx->dir, "none.cfg");
    tu_expect_error(duet_config_load(path, &cfg), DUET_EIO, "none.cfg", NULL);
    tu_expect_error(duet_config_load_string("x = \"unterminated;\n", "<meta>", &cfg), DUET_ECONFIG,
                    "<meta>:", NULL);
}

static void test_include_relative(void **state) {
    tu_tmpdir *fx = *state;
    char sub[300], path[512], base[512];
    tu_path(sub, sizeof sub, fx->dir, "configs");
    assert_int_equal(mkdir(sub, 0755), 0);
    write_cfg(fx, "configs/_base.cfg", "total_iters = 10;\nlr = \"x\";\n", base, sizeof base);
    write_cfg(fx, "configs/main.cfg", "@include \"_base.cfg\"\nseed = 3;\n", path, sizeof path);
    /* Load from another working directory's point of view: the include is
     * found next to main.cfg, not in the current folder. */
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(path, &cfg));
    int64_t i;
    TU_OK(duet_config_get_int(cfg, "total_iters", &i));
    assert_int_equal(i, 10);
    double d;
    tu_expect_error(duet_config_get_double(cfg, "lr", &d), DUET_ECONFIG,
                    "_base.cfg:2: 'lr' must be a number", NULL);
    duet_config_destroy(cfg);
    /* An @include of a folder (libconfig's scanner would exit the process
     * on it, found by the config fuzzer) is an error with file and line,
     * from a file and from a string. */
    write_cfg(fx, "configs/dir.cfg", "seed = 3;\n@include \".\"\n", path, sizeof path);
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, "dir.cfg:2: @include \".\"",
                    "is not a regular file", NULL);
    assert_null(cfg);
    tu_expect_error(duet_config_load_string("@include \"/\"\n", "<text>", &cfg), DUET_ECONFIG,
                    "<text>:1: @include \"/\"", "is not a regular file", NULL);
}

static void test_overrides(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(write_cfg(fx, "o.cfg", k_srgan, path, sizeof path), &cfg));
    int64_t i;
    double d;
    bool b;
    const char *s;
    size_t n;

    TU_OK(duet_config_set(cfg, "total_iters=2000"));
    TU_OK(duet_config_get_int(cfg, "total_iters", &i));
    assert_int_equal(i, 2000);
    TU_OK(duet_config_set(cfg, " lr_config.gamma = 3 ")); /* int into a float key */
    assert_int_equal(duet_config_kind(cfg, "lr_config.gamma"), DUET_CONFIG_FLOAT);
    TU_OK(duet_config_get_double(cfg, "lr_config.gamma", &d));
    assert_true(d == 3.0);
    TU_OK(duet_config_set(cfg, "optimizers.generator.lr=0.3333333333333333"));
    TU_OK(duet_config_get_double(cfg, "optimizers.generator.lr", &d));
    assert_true(d == 0.3333333333333333);
    TU_OK(duet_config_set(cfg, "work_dir=./runs/a b"));
    TU_OK(duet_config_get_string(cfg, "work_dir", &s));
    assert_string_equal(s, "./runs/a b");
    TU_OK(duet_config_set(cfg, "work_dir=123")); /* a string key keeps the text */
    TU_OK(duet_config_get_string(cfg, "work_dir", &s));
    assert_string_equal(s, "123");
    TU_OK(duet_config_set(cfg, "model.type=\"SR\\\"GAN\""));
    TU_OK(duet_config_get_string(cfg, "model.type", &s));
    assert_string_equal(s, "SR\"GAN");
    TU_OK(duet_config_set(cfg, "lr_config.by_epoch=TRUE"));
    TU_OK(duet_config_get_bool(cfg, "lr_config.by_epoch", &b));
    assert_true(b);
    /* A 32-bit key given a 64-bit value. */
    TU_OK(duet_config_set(cfg, "total_iters=10000000000"));
    TU_OK(duet_config_get_int(cfg, "total_iters", &i));
    assert_true(i == INT64_C(10000000000));
    TU_OK(duet_config_set(cfg, "seed=-7"));
    TU_OK(duet_config_get_int(cfg, "seed", &i));
    assert_true(i == -7);

    /* Arrays: integers into a float array become floats. */
    TU_OK(duet_config_set(cfg, "optimizers.generator.betas=[0, 1]"));
    double betas[3];
    TU_OK(duet_config_get_double_array(cfg, "optimizers.generator.betas", betas, 3, &n));
    assert_true(n == 2 && betas[0] == 0.0 && betas[1] == 1.0);
    TU_OK(duet_config_set(cfg, "lr_config.step=[10, 20, 30]"));
    int64_t steps[4];
    TU_OK(duet_config_get_int_array(cfg, "lr_config.step", steps, 4, &n));
    assert_true(n == 3 && steps[2] == 30);
    tu_expect_error(duet_config_set(cfg, "lr_config.step=[0.5]"), DUET_ECONFIG,
                    "is an array of integers", NULL);
    tu_expect_error(duet_config_set(cfg, "lr_config.step=[1, 2.5]"), DUET_ECONFIG,
                    "cannot parse the value", NULL);

    /* Type kept or a clear failure naming where the key was defined. */
    char want[700];
    snprintf(want, sizeof want, "--set scale=abc: 'scale' is an integer (%s:2); "
             "cannot set it to a string", path);
    tu_expect_error(duet_config_set(cfg, "scale=abc"), DUET_ECONFIG, want, NULL);
    /* total_iters became 64-bit through --set: messages name the override. */
    tu_expect_error(duet_config_set(cfg, "total_iters=abc"), DUET_ECONFIG,
                    "(--set total_iters=10000000000)", NULL);
    tu_expect_error(duet_config_set(cfg, "total_iters=1.5"), DUET_ECONFIG,
                    "cannot set it to a float", NULL);
    tu_expect_error(duet_config_set(cfg, "lr_config.by_epoch=1"), DUET_ECONFIG,
                    "is a boolean", NULL);
    tu_expect_error(duet_config_set(cfg, "model=3"), DUET_ECONFIG, "'model' is a group", NULL);
    tu_expect_error(duet_config_set(cfg, "total_iters.x=3"), DUET_ECONFIG,
                    "'total_iters' is an", NULL);
    tu_expect_error(duet_config_set(cfg, "total_iters"), DUET_ECONFIG, "expected key=value", NULL);
    tu_expect_error(duet_config_set(cfg, "=3"), DUET_ECONFIG, "empty key", NULL);
    tu_expect_error(duet_config_set(cfg, "new.9bad=3"), DUET_ECONFIG,
                    "'9bad' is not a valid", NULL);
    /* libconfig reads true/false as values, never as names: such a key would
     * make a config that cannot be read back (found by fuzz_config). */
    tu_expect_error(duet_config_set(cfg, "new.True=3"), DUET_ECONFIG,
                    "'True' is not a valid", NULL);
    tu_expect_error(duet_config_set(cfg, "false=1"), DUET_ECONFIG, "'false' is not a valid",
                    NULL);
    assert_false(duet_config_has(cfg, "new")); /* a failed --set changes nothing */
    TU_OK(duet_config_get_int(cfg, "total_iters", &i)); /* unchanged by the failures */
    assert_true(i == INT64_C(10000000000));

    /* New keys, with their groups. */
    TU_OK(duet_config_set(cfg, "model.generator.upscale_factor=2"));
    TU_OK(duet_config_get_int(cfg, "model.generator.upscale_factor", &i));
    assert_int_equal(i, 2);
    TU_OK(duet_config_set(cfg, "evaluation.metric.name=PSNR"));
    TU_OK(duet_config_get_string(cfg, "evaluation.metric.name", &s));
    assert_string_equal(s, "PSNR");
    /* "+=" merges a group member by member. */
    TU_OK(duet_config_set(cfg, "model.generator+={ mid_channels = 8; in_channels = 3; }"));
    TU_OK(duet_config_get_int(cfg, "model.generator.mid_channels", &i));
    assert_int_equal(i, 8);
    TU_OK(duet_config_get_int(cfg, "model.generator.in_channels", &i));
    assert_int_equal(i, 3);
    TU_OK(duet_config_get_int(cfg, "model.generator.num_blocks", &i)); /* kept */
    assert_int_equal(i, 4);
    /* "=" replaces it, as writing the group in the file would. */
    TU_OK(duet_config_set(cfg, "model.generator={ type = \"RRDBNet\"; mid_channels = 16; }"));
    TU_OK(duet_config_get_int(cfg, "model.generator.mid_channels", &i));
    assert_int_equal(i, 16);
    assert_false(duet_config_has(cfg, "model.generator.num_blocks"));
    assert_false(duet_config_has(cfg, "model.generator.in_channels"));
    tu_expect_error(duet_config_set(cfg, "model.nothing+={ a = 1; }"), DUET_ECONFIG,
                    "'+=' merges a group into a group", NULL);
    tu_expect_error(duet_config_set(cfg, "total_iters+={ a = 1; }"), DUET_ECONFIG,
                    "'+=' merges a group into a group", NULL);
    /* Lists: replaced whole, or an element's member. */
    TU_OK(duet_config_set(cfg, "pipeline.[1].ratio=0.25"));
    TU_OK(duet_config_get_double(cfg, "pipeline.[1].ratio", &d));
    assert_true(d == 0.25);
    TU_OK(duet_config_set(cfg, "pipeline=({ type = \"Crop\"; size = 64; })"));
    TU_OK(duet_config_length(cfg, "pipeline", &n));
    assert_int_equal(n, 1);
    TU_OK(duet_config_get_int(cfg, "pipeline.[0].size", &i));
    assert_int_equal(i, 64);
    duet_config_destroy(cfg);
}

static const char *k_typo =
    "model = {\n"
    "  generator = {\n"
    "    type = \"MSRResNet\";\n"
    "    mid_channel = 64;\n"
    "    num_blocks = 4;\n"
    "  };\n"
    "};\n"
    "steps = [1, 2];\n"
    "ignored = { a = 1; b = (1, \"x\"); };\n"
    "extra = 1;\n";

static void test_unknown_keys(void **state) {
    tu_tmpdir *fx = *state;
    char path[512], want[700];
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(write_cfg(fx, "typo.cfg", k_typo, path, sizeof path), &cfg));
    /* Nothing read yet: the first setting in file order is reported. */
    snprintf(want, sizeof want, "%s:3: unknown key 'model.generator.type'", path);
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, want, NULL);

    duet_config *gen = NULL;
    TU_OK(duet_config_sub(cfg, "model.generator", &gen));
    const char *s;
    int64_t i;
    TU_OK(duet_config_get_string(gen, "type", &s));
    TU_OK(duet_config_get_int_or(gen, "mid_channels", 64, &i)); /* the consumer's name */
    TU_OK(duet_config_get_int(gen, "num_blocks", &i));
    snprintf(want, sizeof want, "%s:4: unknown key 'model.generator.mid_channel' (did you "
             "mean 'mid_channels'?)", path);
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, want, NULL);
    /* A view checks only its own subtree. */
    tu_expect_error(duet_config_check_unused(gen), DUET_ECONFIG, "mid_channel'", NULL);
    TU_OK(duet_config_mark_used(gen, "mid_channel"));
    TU_OK(duet_config_check_unused(gen));
    duet_config_destroy(gen);

    /* Reading one element of an array reads the array. */
    snprintf(want, sizeof want, "%s:8: unknown key 'steps'", path);
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, want, NULL);
    TU_OK(duet_config_get_int(cfg, "steps.[1]", &i));
    assert_int_equal(i, 2);
    /* Marking a group marks everything under it; no did-you-mean when no
     * consumer name is close. */
    TU_OK(duet_config_mark_used(cfg, "ignored"));
    snprintf(want, sizeof want, "%s:10: unknown key 'extra': no part of duet reads it", path);
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, want, NULL);
    TU_OK(duet_config_get_int(cfg, "extra", &i));
    TU_OK(duet_config_check_unused(cfg));

    /* A key created by --set and never read names the override. */
    TU_OK(duet_config_set(cfg, "model.generator.mid_channelz=3"));
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG,
                    "--set model.generator.mid_channelz=3: unknown key "
                    "'model.generator.mid_channelz' (did you mean 'mid_channels'?)", NULL);
    tu_expect_error(duet_config_mark_used(cfg, "nothing.here"), DUET_ECONFIG, "nothing.here", NULL);
    duet_config_destroy(cfg);
}

static void test_text_round_trip(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(write_cfg(fx, "t.cfg", k_srgan, path, sizeof path), &cfg));
    TU_OK(duet_config_set(cfg, "optimizers.generator.lr=0.3333333333333333"));
    TU_OK(duet_config_set(cfg, "lr_config.gamma=1e-300"));
    TU_OK(duet_config_set(cfg, "work_dir=\"a\\\"b\\\\c\\n\\td\""));
    TU_OK(duet_config_set(cfg, "notes.big=10000000000"));
    TU_OK(duet_config_set(cfg, "notes.flag=false"));
    TU_OK(duet_config_set(cfg, "notes.empty=[]"));
    TU_OK(duet_config_set(cfg, "notes.f=2.0"));
    char *text = NULL;
    TU_OK(duet_config_text(cfg, &text));
    duet_config *back = NULL;
    int rc = duet_config_load_string(text, "<text>", &back);
    if (rc != DUET_OK) fail_msg("text does not load back: %s\n%s", duet_last_error(), text);
    double d;
    TU_OK(duet_config_get_double(back, "optimizers.generator.lr", &d));
    assert_true(d == 0.3333333333333333);
    TU_OK(duet_config_get_double(back, "optimizers.generator.betas.[1]", &d));
    assert_true(d == 0.999);
    TU_OK(duet_config_get_double(back, "lr_config.gamma", &d));
    assert_true(d == 1e-300);
    assert_int_equal(duet_config_kind(back, "notes.f"), DUET_CONFIG_FLOAT);
    const char *s;
    TU_OK(duet_config_get_string(back, "work_dir", &s));
    assert_string_equal(s, "a\"b\\c\n\td");
    int64_t i;
    TU_OK(duet_config_get_int(back, "notes.big", &i));
    assert_true(i == INT64_C(10000000000));
    TU_OK(duet_config_get_int(back, "seed", &i));
    assert_true(i == INT64_C(5000000000));
    TU_OK(duet_config_get_string(back, "pipeline.[0].key", &s));
    assert_string_equal(s, "gt");
    const char *metrics[2];
    size_t n;
    TU_OK(duet_config_get_string_array(back, "model.test_cfg.metrics", metrics, 2, &n));
    assert_string_equal(metrics[0], "PSNR");
    /* Same text again: the serialisation is stable. */
    char *text2 = NULL;
    TU_OK(duet_config_text(back, &text2));
    assert_string_equal(text, text2);
    free(text);
    free(text2);
    duet_config_destroy(back);
    duet_config_destroy(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_getters),
        TU_TMPDIR_TEST(test_errors_name_file_and_line),
        TU_TMPDIR_TEST(test_include_relative),
        TU_TMPDIR_TEST(test_overrides),
        TU_TMPDIR_TEST(test_unknown_keys),
        TU_TMPDIR_TEST(test_text_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
