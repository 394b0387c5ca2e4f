/* The runner in one process: config errors come back with file, line and
 * key; a run stopped and resumed ends bitwise equal to an uninterrupted one
 * (weights, buffers, optimizer state), for BasicRestorer, SRGAN and ESRGAN
 * (with the EMA hook: generator_ema too); test and
 * infer read the checkpoints back. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fixture {
    char dir[64];     /* temporary root */
    char data[128];   /* images: data/train, data/val */
} fixture;

static void write_images(const char *dir, int n, int size, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    for (int i = 0; i < n; i++) {
        duet_image *img = NULL;
        TU_OK(duet_image_create(size, size, 3, &img));
        /* Smooth gradients plus noise: something to learn, nothing flat. */
        float a = duet_rng_uniform(&rng), b = duet_rng_uniform(&rng);
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++)
                for (int c = 0; c < 3; c++) {
                    float v = 128 + 100 * a * (float)((x * (c + 1)) % 17) / 17.0f -
                              60 * b * (float)(y % 11) / 11.0f + 20 * duet_rng_uniform(&rng);
                    img->data[(y * size + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
        char path[512];
        snprintf(path, sizeof path, "%s/%02d.png", dir, i);
        TU_OK(duet_image_save_png(img, path));
        duet_image_destroy(img);
    }
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/duet_runner_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    char p[256];
    mkdir(f->data, 0777);
    snprintf(p, sizeof p, "%s/train", f->data);
    mkdir(p, 0777);
    write_images(p, 4, 40, 1);
    snprintf(p, sizeof p, "%s/val", f->data);
    mkdir(p, 0777);
    write_images(p, 3, 32, 2);
    *state = f;
    return 0;
}

static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_rf(sub);
        }
        if (d != NULL) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int teardown(void **state) {
    fixture *f = *state;
    rm_rf(f->dir);
    free(f);
    return 0;
}

/* The tiny configs, with the data folders filled in. */
static const char restorer_cfg[] =
    "model = {\n"
    "  type = \"BasicRestorer\";\n"
    "  generator = { type = \"MSRResNet\"; in_channels = 3; out_channels = 3;\n"
    "                mid_channels = 8; num_blocks = 1; upscale_factor = 4; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1.0; reduction = \"mean\"; };\n"
    "  test_cfg = { metrics = [\"PSNR\", \"SSIM\"]; crop_border = 0; };\n"
    "};\n";

static const char srgan_cfg[] =
    "model = {\n"
    "  type = \"SRGAN\";\n"
    "  generator = { type = \"MSRResNet\"; in_channels = 3; out_channels = 3;\n"
    "                mid_channels = 8; num_blocks = 1; upscale_factor = 4; };\n"
    "  discriminator = { type = \"ModifiedVGG\"; in_channels = 3; mid_channels = 4;\n"
    "                    input_size = 32; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1e-2; reduction = \"mean\"; };\n"
    "  perceptual_loss = { type = \"PerceptualLoss\"; cfg = [4, 0, 8]; layer_ids = [3];\n"
    "                      layer_weights = [1.0]; perceptual_weight = 1.0; style_weight = 0.0;\n"
    "                      norm_img = false; pretrained = \"random\"; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"vanilla\"; loss_weight = 5e-3;\n"
    "               real_label_val = 1.0; fake_label_val = 0.0; };\n"
    "  train_cfg = { disc_steps = 1; disc_init_steps = 4; };\n"
    "  test_cfg = { metrics = [\"PSNR\", \"SSIM\"]; crop_border = 0; };\n"
    "};\n";

/* ESRGAN (the relativistic GAN on SRGAN's frame, RRDBNet generator), with
 * the same disc_init_steps trap: its step counter must be restored too. */
static const char esrgan_cfg[] =
    "model = {\n"
    "  type = \"ESRGAN\";\n"
    "  generator = { type = \"RRDBNet\"; in_channels = 3; out_channels = 3;\n"
    "                mid_channels = 8; num_blocks = 1; growth_channels = 4; };\n"
    "  discriminator = { type = \"ModifiedVGG\"; in_channels = 3; mid_channels = 4;\n"
    "                    input_size = 32; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1e-2; reduction = \"mean\"; };\n"
    "  perceptual_loss = { type = \"PerceptualLoss\"; cfg = [4, 0, 8]; layer_ids = [3];\n"
    "                      layer_weights = [1.0]; perceptual_weight = 1.0; style_weight = 0.0;\n"
    "                      norm_img = false; pretrained = \"random\"; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"vanilla\"; loss_weight = 5e-3;\n"
    "               real_label_val = 1.0; fake_label_val = 0.0; };\n"
    "  train_cfg = { disc_steps = 1; disc_init_steps = 4; };\n"
    "  test_cfg = { metrics = [\"PSNR\", \"SSIM\"]; crop_border = 0; };\n"
    "};\n";

/* Returns the line number `extra` starts on. */
static int write_config(const fixture *f, const char *name, const char *model, int patch,
                        const char *extra, char *path, size_t size) {
    snprintf(path, size, "%s/%s", f->dir, name);
    FILE *o = fopen(path, "w");
    assert_non_null(o);
    fputs(model, o);
    fprintf(o,
            "data = {\n"
            "  samples_per_gpu = 2;\n"
            "  prefetch = 2;\n"
            "  train = { type = \"SRFolderGTDataset\"; gt_folder = \"%s/train\"; scale = 4;\n"
            "            gt_patch_size = %d; times = 1; };\n"
            "  val = { type = \"SRFolderGTDataset\"; gt_folder = \"%s/val\"; scale = 4; };\n"
            "};\n"
            "optimizers = { generator = { type = \"Adam\"; lr = 1e-3; betas = [0.9, 0.999]; };%s };\n"
            "lr_config = { policy = \"Step\"; by_epoch = false; step = [4]; gamma = 0.5; };\n"
            "total_iters = 7;\n"
            "checkpoint_config = { interval = 2; save_optimizer = true; by_epoch = false; };\n"
            "evaluation = { interval = 7; save_image = true; num_images = 2; };\n"
            "log_config = { interval = 1; };\n"
            "wrapper = { type = \"DistributedDataParallelWrapper\"; broadcast_buffers = false;\n"
            "            find_unused_parameters = false; };\n"
            "seed = 3;\n"
            "work_dir = \"%s/work\";\n"
            "%s",
            f->data, patch, f->data,
            strstr(model, "SRGAN") ? " discriminator = { type = \"Adam\"; lr = 1e-3; };" : "",
            f->dir, extra != NULL ? extra : "");
    fclose(o);
    /* Count the lines before `extra`. */
    o = fopen(path, "r");
    assert_non_null(o);
    int lines = 1, c;
    long before = 0;
    while ((c = fgetc(o)) != EOF) before++;
    long stop = before - (long)(extra != NULL ? strlen(extra) : 0);
    rewind(o);
    for (long i = 0; i < stop && (c = fgetc(o)) != EOF; i++) lines += c == '\n';
    fclose(o);
    return lines;
}

static int train(const char *cfg, const char *work_dir, bool resume, const char *set1,
                 const char *set2) {
    duet_runner_opts o = duet_runner_opts_default();
    o.config = cfg;
    o.work_dir = work_dir;
    o.resume = resume;
    o.quiet = true;
    const char *sets[2];
    if (set1 != NULL) sets[o.nsets++] = set1;
    if (set2 != NULL) sets[o.nsets++] = set2;
    o.sets = sets;
    return duet_runner_train(&o);
}

/* Every entry of a and b: same names, shapes and bytes. */
static void assert_same_checkpoint(const char *a, const char *b) {
    duet_st *sa = NULL, *sb = NULL;
    TU_OK(duet_st_load(a, &sa));
    TU_OK(duet_st_load(b, &sb));
    assert_int_equal(duet_st_count(sa), duet_st_count(sb));
    size_t nopt = 0;
    for (size_t i = 0; i < duet_st_count(sa); i++) {
        const char *name = duet_st_name(sa, i);
        if (!duet_st_has(sb, name)) fail_msg("%s has %s, %s does not", a, name, b);
        const char *da, *db;
        const void *ba, *bb;
        size_t na, nb;
        int nda, ndb;
        int64_t sha[DUET_ST_MAX_DIMS], shb[DUET_ST_MAX_DIMS];
        TU_OK(duet_st_raw(sa, name, &da, &ba, &na, &nda, sha));
        TU_OK(duet_st_raw(sb, name, &db, &bb, &nb, &ndb, shb));
        assert_string_equal(da, db);
        assert_int_equal(na, nb);
        if (memcmp(ba, bb, na) != 0)
            fail_msg("%s differs between the uninterrupted and the resumed run", name);
        if (strncmp(name, "optimizer.", 10) == 0) nopt++;
    }
    assert_true(nopt > 0); /* optimizer state was compared too */
    assert_string_equal(duet_st_meta(sa, "iter"), duet_st_meta(sb, "iter"));
    assert_string_equal(duet_st_meta(sa, "epoch"), duet_st_meta(sb, "epoch"));
    assert_string_equal(duet_st_meta(sa, "sampler_position"),
                        duet_st_meta(sb, "sampler_position"));
    duet_st_destroy(sa);
    duet_st_destroy(sb);
}

static void resume_equals_uninterrupted_with(fixture *f, const char *model, int patch,
                                             const char *extra) {
    char cfg[256], a[256], b[256], la[300], lb[300];
    write_config(f, "resume.cfg", model, patch, extra, cfg, sizeof cfg);
    snprintf(a, sizeof a, "%s/a", f->dir);
    snprintf(b, sizeof b, "%s/b", f->dir);
    /* 7 iterations of 2 images over 4 images: 2 batches per epoch, so the
     * stop at 3 is in the middle of an epoch, and the lr milestone at 4
     * comes after it. */
    TU_OK(train(cfg, a, false, NULL, NULL));
    TU_OK(train(cfg, b, false, "total_iters=3", NULL));
    snprintf(lb, sizeof lb, "%s/latest.safetensors", b);
    duet_st *st = NULL;
    TU_OK(duet_st_load(lb, &st));
    assert_string_equal(duet_st_meta(st, "iter"), "3");
    duet_st_destroy(st);
    TU_OK(train(cfg, b, true, NULL, NULL));
    snprintf(la, sizeof la, "%s/latest.safetensors", a);
    assert_same_checkpoint(la, lb);
    /* With the EMA hook, the comparison covered generator_ema: one entry
     * for each of the generator's. */
    if (extra != NULL && strstr(extra, "generator_ema") != NULL) {
        TU_OK(duet_st_load(la, &st));
        size_t ngen = 0, nema = 0;
        for (size_t i = 0; i < duet_st_count(st); i++) {
            ngen += strncmp(duet_st_name(st, i), "generator.", 10) == 0;
            nema += strncmp(duet_st_name(st, i), "generator_ema.", 14) == 0;
        }
        duet_st_destroy(st);
        assert_true(nema > 0);
        assert_int_equal(nema, ngen);
    }
    /* The interrupted run also wrote iter_2 and iter_4, 6, 7 after resuming. */
    char p[300];
    snprintf(p, sizeof p, "%s/iter_2.safetensors", b);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/iter_6.safetensors", b);
    assert_int_equal(access(p, R_OK), 0);
    /* Each run's log.jsonl and evaluation grid. */
    snprintf(p, sizeof p, "%s/log.jsonl", a);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/val/iter_7.png", a);
    assert_int_equal(access(p, R_OK), 0);
    rm_rf(a);
    rm_rf(b);
}

static void resume_equals_uninterrupted(fixture *f, const char *model, int patch) {
    resume_equals_uninterrupted_with(f, model, patch, NULL);
}

static void test_resume_basic_restorer(void **state) {
    resume_equals_uninterrupted(*state, restorer_cfg, 16);
}

/* disc_init_steps = 4: the generator first steps at iteration 5, after the
 * stop at 3, so the resumed run must restore SRGAN's step counter. */
static void test_resume_srgan(void **state) {
    resume_equals_uninterrupted(*state, srgan_cfg, 32);
}

/* MMEditing's EMA hook: generator_ema is checkpointed, resumed bitwise (the
 * stop at 3 is after start_iter 2, so the resumed run continues an average
 * already under way), and used by `duet test`, which needs it in the
 * checkpoint when the config has the hook. */
static const char ema_hook[] =
    "custom_hooks = ( { type = \"ExponentialMovingAverageHook\";\n"
    "  module_keys = [\"generator_ema\"]; interval = 1; start_iter = 2;\n"
    "  interp_cfg = { momentum = 0.5; }; } );\n";

/* model with disc_init_steps = 1 instead of 4, into out: the generator
 * then changes from iteration 2 on, so the average at the stop (iteration 3)
 * is not the generator itself, and a resume that lost it would show. */
static void early_generator(const char *model, char *out, size_t size) {
    const char *at = strstr(model, "disc_init_steps = 4;");
    assert_non_null(at);
    snprintf(out, size, "%.*sdisc_init_steps = 1;%s", (int)(at - model), model,
             at + strlen("disc_init_steps = 4;"));
}

static void test_resume_srgan_ema(void **state) {
    fixture *f = *state;
    char model[sizeof srgan_cfg];
    early_generator(srgan_cfg, model, sizeof model);
    resume_equals_uninterrupted_with(f, model, 32, ema_hook);
    char cfg[256], a[256], ck[300];
    write_config(f, "ema.cfg", srgan_cfg, 32, ema_hook, cfg, sizeof cfg);
    snprintf(a, sizeof a, "%s/ema", f->dir);
    TU_OK(train(cfg, a, false, NULL, NULL));
    snprintf(ck, sizeof ck, "%s/latest.safetensors", a);
    duet_st *st = NULL;
    TU_OK(duet_st_load(ck, &st));
    duet_tensor *g = NULL, *e = NULL;
    TU_OK(duet_st_get(st, "generator.conv_first.weight", &g));
    TU_OK(duet_st_get(st, "generator_ema.conv_first.weight", &e));
    assert_int_equal(g->numel, e->numel);
    assert_true(memcmp(g->data, e->data, sizeof(float) * (size_t)g->numel) != 0);
    duet_tensor_release(g), duet_tensor_release(e);
    duet_st_destroy(st);
    duet_runner_opts o = duet_runner_opts_default();
    o.config = cfg;
    o.checkpoint = ck;
    o.quiet = true;
    duet_test_result res;
    TU_OK(duet_runner_test(&o, &res));
    assert_int_equal(res.images, 3);
    /* A checkpoint without generator_ema cannot be tested with the hook. */
    char plain[256], pck[300];
    snprintf(plain, sizeof plain, "%s/plain", f->dir);
    TU_OK(train(cfg, plain, false, "total_iters=1", "custom_hooks=()"));
    snprintf(pck, sizeof pck, "%s/latest.safetensors", plain);
    o.checkpoint = pck;
    tu_expect_error(duet_runner_test(&o, &res), DUET_ENOTFOUND, "generator_ema.", NULL);
    rm_rf(a);
    rm_rf(plain);
}

/* loss_gan of every "train" record of a log.jsonl, in order; the "val"
 * record's line into val (empty when none). */
static int read_log(const char *work_dir, double *gan, int cap, char *val, size_t vsize) {
    char path[300], line[4096];
    snprintf(path, sizeof path, "%s/log.jsonl", work_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = 0;
    val[0] = '\0';
    while (fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, "\"mode\":\"val\"") != NULL) snprintf(val, vsize, "%s", line);
        const char *g = strstr(line, "\"loss_gan\":");
        if (g != NULL && n < cap) gan[n++] = strtod(g + strlen("\"loss_gan\":"), NULL);
    }
    fclose(f);
    return n;
}

/* Evaluation logs the metrics test_cfg names and no others; an interval
 * average divides each value by the iterations that logged it (SRGAN logs
 * loss_gan from iteration 5 on: disc_init_steps = 4). */
static void test_logs_follow_test_cfg_and_counts(void **state) {
    fixture *f = *state;
    char cfg[256], a[256], b[256], val[4096];
    write_config(f, "logs.cfg", srgan_cfg, 32, NULL, cfg, sizeof cfg);
    snprintf(a, sizeof a, "%s/log_a", f->dir);
    snprintf(b, sizeof b, "%s/log_b", f->dir);
    TU_OK(train(cfg, a, false, "model.test_cfg.metrics=[\"PSNR\"]", NULL));
    double per_iter[16], whole[4];
    int n = read_log(a, per_iter, 16, val, sizeof val);
    assert_int_equal(n, 3); /* iterations 5, 6, 7 */
    assert_non_null(strstr(val, "\"PSNR\""));
    assert_null(strstr(val, "SSIM"));
    TU_OK(train(cfg, b, false, "model.test_cfg.metrics=[\"PSNR\"]", "log_config.interval=7"));
    assert_int_equal(read_log(b, whole, 4, val, sizeof val), 1);
    double mean = (per_iter[0] + per_iter[1] + per_iter[2]) / 3;
    if (fabs(whole[0] - mean) > 1e-6 * fabs(mean))
        fail_msg("loss_gan over iterations 1-7: %.9g, want the mean of its 3 values %.9g",
                 whole[0], mean);
    rm_rf(a);
    rm_rf(b);
}

/* As test_resume_srgan_ema, for ESRGAN: its step counter (the generator
 * first steps at iteration 2) and generator_ema (MMEditing's custom_hooks
 * spelling, averaging from iteration 3, the stop) resume bitwise. */
static void test_resume_esrgan(void **state) {
    char model[sizeof esrgan_cfg];
    early_generator(esrgan_cfg, model, sizeof model);
    resume_equals_uninterrupted_with(*state, model, 32, ema_hook);
}

/* A config error: status, and a message naming the key, the other strings
 * in want, and file:line (line_of_extra: the line `extra` starts on). */
static void expect_config_error(fixture *f, const char *extra, const char *set,
                                bool line_of_extra, const char *const *want) {
    char cfg[256];
    int line = write_config(f, "bad.cfg", restorer_cfg, 16, extra, cfg, sizeof cfg);
    int rc = train(cfg, NULL, false, set, NULL);
    assert_int_equal(rc, DUET_ECONFIG);
    for (int i = 0; want[i] != NULL; i++)
        if (strstr(duet_last_error(), want[i]) == NULL)
            fail_msg("error '%s' does not mention '%s'", duet_last_error(), want[i]);
    if (line_of_extra) {
        char where[64];
        snprintf(where, sizeof where, "bad.cfg:%d:", line);
        if (strstr(duet_last_error(), where) == NULL)
            fail_msg("error '%s' does not give the place '%s'", duet_last_error(), where);
    }
}

static void test_config_errors(void **state) {
    fixture *f = *state;
    /* An unknown key: file:line, the key and the likely intended one. */
    expect_config_error(f, "totl_iters = 5;\n", NULL, true,
                        (const char *[]){"totl_iters", "total_iters", NULL});
    /* A typo inside a nested group, added by --set. */
    expect_config_error(f, NULL, "model.generator.mid_channel=4", false,
                        (const char *[]){"model.generator.mid_channel", "mid_channels", NULL});
    /* A value of the wrong type: file, line and key. */
    expect_config_error(f, "load_from = 5;\n", NULL, true,
                        (const char *[]){"load_from", "string", NULL});
    /* Known keys with bad values. */
    expect_config_error(f, NULL, "lr_config.policy=\"Poly\"", false,
                        (const char *[]){"bad.cfg:", "lr_config.policy", "Poly", "Linear", NULL});
    expect_config_error(f, NULL, "data.train.type=\"LMDBDataset\"", false,
                        (const char *[]){"bad.cfg:", "data.train.type", "LMDBDataset", NULL});
    expect_config_error(f, NULL, "checkpoint_config.by_epoch=true", false,
                        (const char *[]){"bad.cfg:", "checkpoint_config.by_epoch", "iteration", NULL});
    /* Nothing was written. */
    char p[256];
    snprintf(p, sizeof p, "%s/work", f->dir);
    assert_int_not_equal(access(p, F_OK), 0);
}

static void test_other_errors(void **state) {
    fixture *f = *state;
    char cfg[256];
    write_config(f, "ok.cfg", restorer_cfg, 16, NULL, cfg, sizeof cfg);
    /* A missing config file. */
    assert_int_equal(train("/nonexistent/x.cfg", NULL, false, NULL, NULL), DUET_EIO);
    assert_non_null(strstr(duet_last_error(), "/nonexistent/x.cfg"));
    /* load_from a missing checkpoint names it. */
    int rc = train(cfg, NULL, false, "load_from=\"/nonexistent/w.safetensors\"", NULL);
    assert_int_not_equal(rc, DUET_OK);
    assert_non_null(strstr(duet_last_error(), "/nonexistent/w.safetensors"));
    /* A weight that overflows float is refused where it is read. */
    char nan_wd[256];
    snprintf(nan_wd, sizeof nan_wd, "%s/nan", f->dir);
    rc = train(cfg, nan_wd, false, "model.pixel_loss.loss_weight=1e39", NULL);
    assert_int_equal(rc, DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "model.pixel_loss.loss_weight"));
    /* A non-finite loss stops the run with the iteration and the value's
     * name (a huge but finite learning rate blows the weights up after the
     * first step). */
    rc = train(cfg, nan_wd, false, "optimizers.generator.lr=3e38", NULL);
    assert_int_equal(rc, DUET_ENUMERIC);
    assert_non_null(strstr(duet_last_error(), "iteration 2: loss_pix is"));
    rm_rf(nan_wd);
    /* --resume without a checkpoint in the work dir. */
    char wd[256];
    snprintf(wd, sizeof wd, "%s/empty", f->dir);
    rc = train(cfg, wd, true, NULL, NULL);
    assert_int_not_equal(rc, DUET_OK);
    assert_non_null(strstr(duet_last_error(), "latest.safetensors"));
    rm_rf(wd);
}

static void test_test_and_infer(void **state) {
    fixture *f = *state;
    char cfg[256], wd[256], ckpt[300], out[300], img[400];
    write_config(f, "ti.cfg", restorer_cfg, 16, NULL, cfg, sizeof cfg);
    snprintf(wd, sizeof wd, "%s/ti", f->dir);
    TU_OK(train(cfg, wd, false, "total_iters=2", NULL));
    snprintf(ckpt, sizeof ckpt, "%s/latest.safetensors", wd);
    snprintf(out, sizeof out, "%s/out", wd);

    duet_runner_opts o = duet_runner_opts_default();
    o.config = cfg;
    o.checkpoint = ckpt;
    o.out_dir = out;
    o.quiet = true;
    duet_test_result res;
    TU_OK(duet_runner_test(&o, &res));
    assert_int_equal(res.images, 3);
    /* Plausible numbers for 32x32 images (dB, and SSIM in (0, 1]). */
    assert_true(res.psnr > 5 && res.psnr < 60);
    assert_true(res.psnr_bicubic > 5 && res.psnr_bicubic < 60);
    assert_true(res.ssim > 0 && res.ssim <= 1);
    /* Outputs are the ground truth's size. */
    snprintf(img, sizeof img, "%s/01.png", out);
    duet_image *im = NULL;
    TU_OK(duet_image_load(img, &im));
    assert_int_equal(im->width, 32);
    assert_int_equal(im->height, 32);
    duet_image_destroy(im);

    /* infer: an 8x8 input becomes 32x32. */
    char in[300];
    snprintf(in, sizeof in, "%s/small.png", f->dir);
    TU_OK(duet_image_create(8, 8, 3, &im));
    memset(im->data, 90, 8 * 8 * 3);
    TU_OK(duet_image_save_png(im, in));
    duet_image_destroy(im);
    const char *images[] = {in};
    o.images = images;
    o.nimages = 1;
    snprintf(out, sizeof out, "%s/inf", wd);
    o.out_dir = out;
    TU_OK(duet_runner_infer(&o));
    snprintf(img, sizeof img, "%s/small.png", out);
    TU_OK(duet_image_load(img, &im));
    assert_int_equal(im->width, 32);
    assert_int_equal(im->height, 32);
    duet_image_destroy(im);
    rm_rf(wd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_other_errors),
        cmocka_unit_test(test_test_and_infer),
        cmocka_unit_test(test_resume_basic_restorer),
        cmocka_unit_test(test_resume_srgan),
        cmocka_unit_test(test_resume_srgan_ema),
        cmocka_unit_test(test_logs_follow_test_cfg_and_counts),
        cmocka_unit_test(test_resume_esrgan),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    duet_comm_finalize();
    return rc;
}
