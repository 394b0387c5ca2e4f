/* A model written outside duet, trained by duet's command line like a
 * built-in.
 *
 * The program registers, by name, its own networks (ToyGenerator: x2
 * super-resolution by a residual pixel-shuffle net; ToyDiscriminator: a
 * patch discriminator), its own loss (ToyL1Loss), its own dataset
 * (ToyImages: named tensors "lq" and "gt" made on the fly) and its own
 * two-network model (ToyGAN: generator step with the discriminator frozen,
 * then the discriminator step), then hands its arguments to duet_cli_main:
 * it is `duet` with these types added, `train | test | infer | info`.
 * `train` builds them through the registry from a config that names them,
 * wraps each network in its own DDP (DistributedDataParallelWrapper),
 * builds the optimizers from the config and trains:
 *
 *   mpiexec -n 2 ./example_custom_model train toy.cfg --work-dir work
 *
 * Without arguments (as CTest runs it) it checks itself: it writes the
 * config below as toy.cfg and runs `train toy.cfg` through duet_cli_main,
 *
 *   mpiexec -n 2 ./example_custom_model
 *
 * The runner's EMA hook keeps generator_ema, a moving average of the
 * generator, as MMEditing's ExponentialMovingAverageHook does.
 *
 * It checks what it trained: the pixel loss drops, and every rank ends with
 * bit-identical parameters, generator_ema included (DDP averages the
 * gradients each step; each rank averages its own identical generator).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <math.h>
#include <unistd.h>

#include "duet/duet.h"

#define CHECK(expr)                                                                       \
    do {                                                                                  \
        int rc_ = (expr);                                                                 \
        if (rc_ != DUET_OK) {                                                             \
            fprintf(stderr, "%s: %s\n", #expr, duet_last_error());                        \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

/* ---- networks: module types with their own forward -------------------------------- */

/* out = pixel_shuffle(conv2(leaky(conv1(x))), 2) + bilinear x2 of x:
 * x (N, 3, h, w) -> (N, 3, 2h, 2w). */
static int toy_generator_forward(duet_module *self, int nin, duet_tensor *const *in,
                                 duet_tensor **out) {
    (void)nin;
    duet_tensor *a = NULL, *b = NULL, *c = NULL, *up = NULL;
    int rc = duet_module_forward(duet_module_child(self, "conv1"), in[0], &a);
    if (rc == DUET_OK) rc = duet_leaky_relu(a, 0.2f, &b);
    duet_tensor_release(a);
    a = NULL;
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "conv2"), b, &a);
    if (rc == DUET_OK) rc = duet_pixel_shuffle(a, 2, &c);
    if (rc == DUET_OK) rc = duet_upsample_bilinear(in[0], 2, &up);
    if (rc == DUET_OK) rc = duet_add(c, up, out);
    duet_tensor_release(a), duet_tensor_release(b), duet_tensor_release(c);
    duet_tensor_release(up);
    return rc;
}

/* Patch logits (N, 1, h/2, w/2) of an image (N, 3, h, w). */
static int toy_discriminator_forward(duet_module *self, int nin, duet_tensor *const *in,
                                     duet_tensor **out) {
    (void)nin;
    duet_tensor *a = NULL, *b = NULL;
    int rc = duet_module_forward(duet_module_child(self, "conv1"), in[0], &a);
    if (rc == DUET_OK) rc = duet_leaky_relu(a, 0.2f, &b);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "conv2"), b, out);
    duet_tensor_release(a), duet_tensor_release(b);
    return rc;
}

static const duet_module_type toy_generator_type = {"ToyGenerator", toy_generator_forward,
                                                    NULL};
static const duet_module_type toy_discriminator_type = {"ToyDiscriminator",
                                                        toy_discriminator_forward, NULL};

/* A module of `type` with conv1 (3 -> mid, 3x3, stride s1) and conv2 (mid ->
 * out2, 3x3). */
static int two_convs(const duet_module_type *type, int mid, int s1, int out2, duet_rng *rng,
                     duet_module **out) {
    duet_module *m = NULL, *c = NULL;
    DUET_TRY(duet_module_create(type, NULL, &m));
    int rc = duet_conv2d_module_create(3, mid, 3, s1, 1, true, rng, &c);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv1", c);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(mid, out2, 3, 1, 1, true, rng, &c);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv2", c);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

static int read_mid(duet_config *cfg, const char *path, int *mid) {
    int64_t v = 0;
    DUET_TRY(duet_config_get_int_or(cfg, "mid_channels", 8, &v));
    if (v < 1 || v > 256)
        return duet__error(DUET_ECONFIG, "%s.mid_channels: %lld (use 1 to 256)", path,
                           (long long)v);
    *mid = (int)v;
    return DUET_OK;
}

static int build_toy_generator(duet_config *cfg, const char *path, duet_rng *rng,
                               duet_module **out) {
    int mid = 0;
    DUET_TRY(read_mid(cfg, path, &mid));
    return two_convs(&toy_generator_type, mid, 1, 3 * 4, rng, out);
}

static int build_toy_discriminator(duet_config *cfg, const char *path, duet_rng *rng,
                                   duet_module **out) {
    int mid = 0;
    DUET_TRY(read_mid(cfg, path, &mid));
    return two_convs(&toy_discriminator_type, mid, 2, 1, rng, out);
}

/* ---- a loss: forward2(pred, target) = loss_weight * mean |pred - target| ------------ */

static int toy_l1_forward(duet_module *self, int nin, duet_tensor *const *in,
                          duet_tensor **out) {
    if (nin != 2) return duet__error(DUET_EINVAL, "ToyL1Loss takes (pred, target)");
    return duet_l1_loss(in[0], in[1], *(float *)duet_module_impl(self), out);
}

static const duet_module_type toy_l1_type = {"ToyL1Loss", toy_l1_forward, free};

static int build_toy_l1(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out) {
    (void)path, (void)rng;
    double w = 1.0;
    DUET_TRY(duet_config_get_double_or(cfg, "loss_weight", 1.0, &w));
    float *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "ToyL1Loss: out of memory");
    *impl = (float)w;
    return duet_module_create(&toy_l1_type, impl, out);
}

/* ---- the model --------------------------------------------------------------------- */

typedef struct toy_gan {
    float gan_weight;
} toy_gan;

/* What the checks below read: this rank's pixel loss at each step, and a
 * hash of its parameters (generator_ema too: a part of the model) after the
 * last one. */
enum { MAX_STEPS = 256 };
static double pix_history[MAX_STEPS];
static int steps_done;
static uint64_t params_hash;

static uint64_t hash_params(duet_model *m) {
    uint64_t h = 1469598103934665603ull;
    duet_named_tensors p = {0};
    if (duet_module_named_parameters(duet_model_module(m), false, &p) != DUET_OK) return 0;
    for (size_t i = 0; i < p.count; i++) {
        const unsigned char *b = (const unsigned char *)p.items[i].tensor->data;
        for (size_t k = 0; k < sizeof(float) * (size_t)p.items[i].tensor->numel; k++)
            h = (h ^ b[k]) * 1099511628211ull;
    }
    duet_named_tensors_clear(&p);
    return h;
}

static int bce(duet_module *d, duet_tensor *x, float target, duet_tensor **loss) {
    duet_tensor *pred = NULL;
    DUET_TRY(duet_module_forward(d, x, &pred));
    int rc = duet_bce_with_logits_const(pred, target, 1.0f, loss);
    duet_tensor_release(pred);
    return rc;
}

/* MMEditing's order for SRGAN-like models: generator step (discriminator
 * frozen: its parameters get no gradient, its DDP is not armed), then the
 * discriminator on real and detached fake images. */
static int toy_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                          duet_log_vars *log) {
    toy_gan *t = duet_model_impl(m);
    duet_tensor *lq = NULL, *gt = NULL;
    duet_optimizer *og = NULL, *od = NULL;
    DUET_TRY(duet_batch_require(batch, "lq", &lq));
    DUET_TRY(duet_batch_require(batch, "gt", &gt));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &og));
    DUET_TRY(duet_optimizer_set_require(opts, "discriminator", &od));
    duet_module *g = duet_model_part(m, "generator"), *d = duet_model_part(m, "discriminator");
    duet_module *pix = duet_model_part(m, "pixel_loss");

    duet_tensor *fake = NULL, *l_pix = NULL, *l_gan = NULL, *l_gan_w = NULL, *l_g = NULL;
    DUET_TRY(duet_module_forward(g, lq, &fake));
    duet_module_set_requires_grad(d, false);
    int rc = duet_module_forward2(pix, fake, gt, &l_pix);
    if (rc == DUET_OK) rc = bce(d, fake, 1.0f, &l_gan);
    if (rc == DUET_OK) rc = duet_scale(l_gan, t->gan_weight, &l_gan_w);
    if (rc == DUET_OK) rc = duet_add(l_pix, l_gan_w, &l_g);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(og);
        rc = duet_backward(l_g);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(og);
    duet_module_set_requires_grad(d, true);
    if (rc == DUET_OK) rc = duet_log_vars_set(log, "loss_pix", l_pix->data[0]);
    if (rc == DUET_OK) rc = duet_log_vars_set(log, "loss_gan", l_gan->data[0]);
    if (rc == DUET_OK && steps_done < MAX_STEPS) pix_history[steps_done] = l_pix->data[0];
    duet_tensor_release(l_pix), duet_tensor_release(l_gan), duet_tensor_release(l_gan_w);
    duet_tensor_release(l_g);

    duet_tensor *fake_d = NULL, *l_real = NULL, *l_fake = NULL;
    if (rc == DUET_OK) rc = bce(d, gt, 1.0f, &l_real);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(od);
        rc = duet_backward(l_real);
    }
    if (rc == DUET_OK) rc = duet_detach(fake, &fake_d);
    if (rc == DUET_OK) rc = bce(d, fake_d, 0.0f, &l_fake);
    if (rc == DUET_OK) rc = duet_backward(l_fake);
    if (rc == DUET_OK) rc = duet_optimizer_step(od);
    if (rc == DUET_OK) rc = duet_log_vars_set(log, "loss_d", l_real->data[0] + l_fake->data[0]);
    duet_tensor_release(fake_d), duet_tensor_release(l_real), duet_tensor_release(l_fake);
    duet_tensor_release(fake);
    if (rc != DUET_OK) {
        duet_tape_clear(); /* a failed step may leave recorded nodes */
        return rc;
    }
    steps_done++;
    params_hash = hash_params(m);
    return DUET_OK; /* duet_model_train_step averages the log values over the ranks */
}

static int toy_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    return duet_module_forward(duet_model_part(m, "generator"), lq, out);
}

static const duet_model_ops toy_ops = {
    .name = "ToyGAN",
    .forward = toy_forward,
    .train_step = toy_train_step,
    .destroy = free,
};

static int toy_root_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    return duet_module_forwardn(duet_module_child(self, "generator"), nin, in, out);
}
static const duet_module_type toy_root_type = {"ToyGAN", toy_root_forward, NULL};

/* model = { type = "ToyGAN"; generator = {...}; discriminator = {...};
 *           pixel_loss = {...}; gan_weight = 0.01; } */
static int build_toy_gan(duet_config *cfg, const char *path, duet_rng *rng, duet_model **out) {
    (void)path;
    double gan_weight = 0.01;
    DUET_TRY(duet_config_get_double_or(cfg, "gan_weight", 0.01, &gan_weight));
    duet_module *root = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&toy_root_type, NULL, &root));
    const char *parts[] = {"generator", "discriminator", "pixel_loss"};
    int rc = DUET_OK;
    for (int i = 0; i < 3 && rc == DUET_OK; i++) {
        rc = duet_build_module(cfg, parts[i], rng, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, parts[i], part);
    }
    toy_gan *t = rc == DUET_OK ? malloc(sizeof *t) : NULL;
    if (rc == DUET_OK && t == NULL) rc = duet__error(DUET_ENOMEM, "ToyGAN: out of memory");
    if (rc != DUET_OK) {
        duet_module_destroy(root);
        return rc;
    }
    t->gan_weight = (float)gan_weight;
    return duet_model_create(&toy_ops, t, root, out);
}

/* ---- a dataset: smooth pictures made on the fly ----------------------------------- */

/* Sample i: "gt" (1, 3, 16, 16), sums of sines whose frequencies come from
 * i and whose phase the sample's generator draws (a new one each epoch);
 * "lq" (1, 3, 8, 8), its 2x2 means. Named as the SR datasets name theirs,
 * so the model reads "lq" and "gt" whichever dataset feeds it. */
static int toy_images_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    (void)impl;
    duet_tensor *gt = NULL, *lq = NULL;
    DUET_TRY(duet_tensor_create4(1, 3, 16, 16, &gt));
    int rc = duet_tensor_create4(1, 3, 8, 8, &lq);
    float fx = 0.2f + 0.05f * (float)(index % 7), fy = 0.15f + 0.04f * (float)(index % 5);
    float phase = 6.2832f * duet_rng_uniform(rng);
    for (int c = 0; rc == DUET_OK && c < 3; c++)
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 16; x++)
                gt->data[(c * 16 + y) * 16 + x] =
                    0.5f + 0.4f * sinf(fx * (float)x * (float)(1 + c) + fy * (float)y + phase);
    for (int c = 0; rc == DUET_OK && c < 3; c++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                const float *g = gt->data + (c * 16 + 2 * y) * 16 + 2 * x;
                lq->data[(c * 8 + y) * 8 + x] = 0.25f * (g[0] + g[1] + g[16] + g[17]);
            }
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "lq", lq);
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "gt", gt);
    duet_tensor_release(gt);
    duet_tensor_release(lq);
    return rc;
}

static const duet_dataset_ops toy_images_ops = {.name = "ToyImages", .get = toy_images_get};

/* data.train = { type = "ToyImages"; size = 64; }; */
static int build_toy_images(duet_config *cfg, const char *path, bool train, duet_dataset **out) {
    (void)train;
    int64_t size = 0;
    DUET_TRY(duet_config_get_int_or(cfg, "size", 64, &size));
    if (size < 1) return duet__error(DUET_ECONFIG, "%s.size: %lld (use >= 1)", path, (long long)size);
    return duet_dataset_create(&toy_images_ops, NULL, size, out);
}

/* ---- config ---------------------------------------------------------------------- */

static const char *config_text =
    "model = {\n"
    "  type = \"ToyGAN\";\n"
    "  generator = { type = \"ToyGenerator\"; mid_channels = 16; };\n"
    "  discriminator = { type = \"ToyDiscriminator\"; mid_channels = 8; };\n"
    "  pixel_loss = { type = \"ToyL1Loss\"; loss_weight = 1.0; };\n"
    "  gan_weight = 0.01;\n"
    "};\n"
    "data = {\n"
    "  samples_per_gpu = 4;\n"
    "  prefetch = 0;\n"
    "  train = { type = \"ToyImages\"; size = 64; times = 10; };\n"
    "};\n"
    "optimizers = {\n"
    "  generator = { type = \"Adam\"; lr = 2e-3; betas = [0.9, 0.999]; };\n"
    "  discriminator = { type = \"Adam\"; lr = 1e-3; betas = [0.9, 0.999]; };\n"
    "};\n"
    "custom_hooks = ( { type = \"ExponentialMovingAverageHook\";\n"
    "  module_keys = [\"generator_ema\"]; interval = 1; interp_cfg = { momentum = 0.9; }; } );\n"
    "total_iters = 80;\n"
    "log_config = { interval = 20; };\n"
    "checkpoint_config = { interval = 40; };\n"
    "seed = 3;\n"
    "work_dir = \"%s/work\";\n";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh folder for the run, made by rank 0 and named to every rank. */
static int make_dir(duet_comm *comm, char *dir, size_t size) {
    memset(dir, 0, size);
    if (duet_comm_rank(comm) == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, size, "%s/duet_custom_model_XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
        if (mkdtemp(dir) == NULL) return duet__error(DUET_EIO, "cannot create %s", dir);
    }
    return duet_comm_bcast(comm, dir, size, DUET_DTYPE_U8, 0);
}

/* The self-check: `train` of the config above through duet_cli_main, in a
 * fresh folder. This program initialises MPI itself, so duet_cli_main leaves
 * it initialised (duet finalizes only what it initialised) and the checks
 * after training can still talk to the other ranks. */
static int train_and_check(const char *prog) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
    duet_comm *comm = NULL;
    CHECK(duet_comm_world(&comm));
    int rank = duet_comm_rank(comm), world = duet_comm_size(comm);

    char dir[256], path[600], work[300];
    CHECK(make_dir(comm, dir, sizeof dir));
    snprintf(path, sizeof path, "%s/toy.cfg", dir);
    snprintf(work, sizeof work, "%s/work", dir);
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        if (f == NULL) return fprintf(stderr, "cannot write %s\n", path), 1;
        fprintf(f, config_text, dir);
        fclose(f);
    }
    CHECK(duet_comm_barrier(comm));

    char *args[] = {(char *)prog, "train", path, "--work-dir", work, NULL};
    int status = duet_cli_main(5, args);
    if (status != 0) {
        fprintf(stderr, "rank %d: `%s train %s` exited with %d\n", rank, prog, path, status);
        return status;
    }

    /* ToyGAN has no val_step: asking for evaluation is refused at start-up,
     * before a single step (not after all of them, at the first
     * evaluation). */
    char work2[320];
    snprintf(work2, sizeof work2, "%s/work_eval", dir);
    int steps_before = steps_done;
    char *eval_args[] = {(char *)prog, "train", path, "--work-dir", work2, "--set",
                         "evaluation={interval=10;}", NULL};
    if (duet_cli_main(7, eval_args) == 0 || steps_done != steps_before) {
        fprintf(stderr, "rank %d: evaluation of a model without val_step was not refused at "
                "start-up (%d steps ran)\n", rank, steps_done - steps_before);
        return 1;
    }

    /* The loss dropped (the mean of the first and last ten steps), the
     * parameters are the same bits on every rank, and the run wrote its
     * checkpoint. */
    int bad = 0;
    double first = 0, last = 0;
    for (int i = 0; i < 10; i++) {
        first += pix_history[i] / 10;
        last += pix_history[steps_done - 1 - i] / 10;
    }
    if (steps_done != 80 || !(last < 0.8 * first)) {
        fprintf(stderr, "rank %d: %d steps, loss_pix %.4f -> %.4f: did not learn\n", rank,
                steps_done, first, last);
        bad = 1;
    }
    snprintf(path, sizeof path, "%s/latest.safetensors", work);
    if (rank == 0 && access(path, R_OK) != 0) {
        fprintf(stderr, "no checkpoint %s\n", path);
        bad = 1;
    }
    uint64_t *all = calloc((size_t)world, sizeof *all);
    if (all == NULL) return 1;
    CHECK(duet_comm_allgather(comm, &params_hash, all, 1, DUET_DTYPE_U64));
    for (int r = 1; r < world; r++)
        if (all[r] != all[0]) {
            fprintf(stderr, "rank %d holds other parameters than rank 0\n", r);
            bad = 1;
        }
    free(all);
    if (rank == 0)
        printf("custom model: loss_pix %.4f -> %.4f over %d steps on %d process%s; parameters "
               "identical on every rank: %s\n", first, last, steps_done, world,
               world == 1 ? "" : "es", bad ? "no" : "yes");
    int any_bad = bad;
    CHECK(duet_comm_allreduce(comm, &any_bad, 1, DUET_DTYPE_I32, DUET_REDUCE_MAX));
    CHECK(duet_comm_barrier(comm));
    if (rank == 0) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); /* the run's files */
    duet_comm_destroy(comm);
    MPI_Finalize();
    return any_bad ? 1 : 0;
}

int main(int argc, char **argv) {
    /* The open contract: every type the config names is ours. */
    CHECK(duet_registry_register_module("ToyGenerator", build_toy_generator));
    CHECK(duet_registry_register_module("ToyDiscriminator", build_toy_discriminator));
    CHECK(duet_registry_register_loss("ToyL1Loss", build_toy_l1));
    CHECK(duet_registry_register_model("ToyGAN", build_toy_gan));
    CHECK(duet_registry_register_dataset("ToyImages", build_toy_images));
    /* duet's command line, for our types as for the built-ins. */
    if (argc > 1) return duet_cli_main(argc, argv);
    return train_and_check(argv[0]);
}
