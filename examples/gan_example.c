/* A tiny GAN through duet's public API: the generator learns to turn noise
 * into samples of N(3, 0.5). Two parts, "generator" and "discriminator",
 * each gets its own DDP from the DistributedDataParallelWrapper, so each
 * step synchronises only the gradients it produces.  mpiexec -n 2 ./example_gan_example
 */
#include <math.h>
#include <stdio.h>

#include "duet/duet.h"

#define CHECK(expr)                                                                       \
    do {                                                                                  \
        if ((expr) != DUET_OK) return fprintf(stderr, "%s: %s\n", #expr, duet_last_error()), 1; \
    } while (0)

/* Linear(in, 16) + activation + Linear(16, out). */
static int mlp(duet_module **out, int in, int n_out, duet_activation act, duet_rng *rng) {
    duet_module *l1 = NULL, *a = NULL, *l2 = NULL;
    DUET_TRY(duet_sequential_create(out));
    DUET_TRY(duet_linear_module_create(in, 16, true, rng, &l1));
    DUET_TRY(duet_sequential_append(*out, l1));
    DUET_TRY(duet_activation_module_create(act, 0.2f, &a));
    DUET_TRY(duet_sequential_append(*out, a));
    DUET_TRY(duet_linear_module_create(16, n_out, true, rng, &l2));
    return duet_sequential_append(*out, l2);
}

/* loss = BCE(D(x), target); backward; returns the loss value in *v. */
static int d_loss(duet_module *d, duet_tensor *x, float target, double *v, duet_tensor **loss) {
    duet_tensor *pred = NULL;
    DUET_TRY(duet_module_forward(d, x, &pred));
    int rc = duet_bce_with_logits_const(pred, target, 1.0f, loss);
    duet_tensor_release(pred);
    if (rc == DUET_OK) *v = (*loss)->data[0];
    return rc;
}

/* One generator step (discriminator frozen), then one discriminator step. */
static int gan_train_step(duet_model *m, const duet_batch *b, duet_optimizer_set *opts,
                          duet_log_vars *log) {
    duet_module *g = duet_model_part(m, "generator"), *d = duet_model_part(m, "discriminator");
    duet_optimizer *og = duet_optimizer_set_get(opts, "generator");
    duet_optimizer *od = duet_optimizer_set_get(opts, "discriminator");
    duet_tensor *fake = NULL, *fake_d = NULL, *loss = NULL;
    double lg, lr, lf;
    DUET_TRY(duet_module_forward(g, duet_batch_tensor_get(b, "z"), &fake));
    duet_module_set_requires_grad(d, false);
    DUET_TRY(d_loss(d, fake, 1.0f, &lg, &loss));
    duet_optimizer_zero_grad(og);
    DUET_TRY(duet_backward(loss));
    DUET_TRY(duet_optimizer_step(og));
    duet_tensor_release(loss);
    duet_module_set_requires_grad(d, true);
    duet_optimizer_zero_grad(od);
    DUET_TRY(d_loss(d, duet_batch_tensor_get(b, "real"), 1.0f, &lr, &loss));
    DUET_TRY(duet_backward(loss));
    duet_tensor_release(loss);
    DUET_TRY(duet_detach(fake, &fake_d));
    DUET_TRY(d_loss(d, fake_d, 0.0f, &lf, &loss));
    DUET_TRY(duet_backward(loss));
    DUET_TRY(duet_optimizer_step(od));
    duet_tensor_release(loss);
    duet_tensor_release(fake_d);
    duet_tensor_release(fake);
    DUET_TRY(duet_log_vars_set(log, "loss_g", lg));
    DUET_TRY(duet_log_vars_set(log, "loss_d", lr + lf));
    return DUET_OK; /* duet_model_train_step averages the log values over the ranks */
}

static int gan_forward(duet_model *m, duet_tensor *z, duet_tensor **out) {
    return duet_module_forward(duet_model_part(m, "generator"), z, out);
}

static const duet_model_ops gan_ops = {
    .name = "TinyGAN",
    .forward = gan_forward,
    .train_step = gan_train_step,
};
static const duet_module_type gan_root = {"TinyGAN", NULL, NULL};

int main(void) {
    duet_comm *comm = NULL;
    CHECK(duet_comm_world(&comm));
    int rank = duet_comm_rank(comm);
    duet_log_set_rank(rank, false);

    duet_rng init = duet_rng_make(0, 0); /* same weights everywhere (DDP broadcasts anyway) */
    duet_module *root = NULL, *g = NULL, *d = NULL;
    CHECK(duet_module_create(&gan_root, NULL, &root));
    CHECK(mlp(&g, 4, 1, DUET_ACT_RELU, &init));
    CHECK(duet_module_add_child(root, "generator", g));
    CHECK(mlp(&d, 1, 1, DUET_ACT_LEAKY_RELU, &init));
    CHECK(duet_module_add_child(root, "discriminator", d));
    duet_model *model = NULL;
    CHECK(duet_model_create(&gan_ops, NULL, root, &model));

    duet_wrapper *w = NULL;
    const char *devices[] = {"cpu"};
    CHECK(duet_wrapper_create(model, comm, devices, 1, NULL, &w)); /* owns the model */
    duet_optimizer_set *opts = NULL;
    duet_adam_opts adam = duet_adam_opts_default();
    adam.lr = 2e-3f;
    adam.beta1 = 0.5f;
    CHECK(duet_optimizer_set_create(&opts));
    CHECK(duet_optimizer_set_add_adam(opts, model, "generator", &adam));
    CHECK(duet_optimizer_set_add_adam(opts, model, "discriminator", &adam));

    duet_rng data = duet_rng_make(1, (uint64_t)rank); /* each rank its own samples */
    enum { N = 32, ITERS = 600 };
    for (int it = 1; it <= ITERS; it++) {
        duet_tensor *z = NULL, *real = NULL;
        CHECK(duet_tensor_create(2, (int64_t[]){N, 4}, &z));
        CHECK(duet_tensor_create(2, (int64_t[]){N, 1}, &real));
        for (int64_t i = 0; i < z->numel; i++) z->data[i] = duet_rng_normal(&data);
        for (int64_t i = 0; i < N; i++) real->data[i] = 3.0f + 0.5f * duet_rng_normal(&data);
        duet_batch b = {0};
        CHECK(duet_batch_add_tensor(&b, "z", z));
        CHECK(duet_batch_add_tensor(&b, "real", real));
        duet_log_vars log;
        CHECK(duet_wrapper_train_step(w, &b, opts, &log));
        if (it % 100 == 0)
            duet_log(DUET_LOG_INFO, "iter %d: loss_g %.4f loss_d %.4f", it, log.values[0],
                     log.values[1]);
        duet_batch_clear(&b), duet_tensor_release(z), duet_tensor_release(real);
    }

    /* Where did the generator land? Mean and spread of 1000 samples. */
    duet_tensor *z = NULL, *x = NULL;
    CHECK(duet_tensor_create(2, (int64_t[]){1000, 4}, &z));
    for (int64_t i = 0; i < z->numel; i++) z->data[i] = duet_rng_normal(&data);
    bool prev = duet_set_grad_enabled(false);
    CHECK(duet_wrapper_forward(w, z, &x));
    duet_set_grad_enabled(prev);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < x->numel; i++) mean += x->data[i] / x->numel;
    for (int64_t i = 0; i < x->numel; i++) var += pow(x->data[i] - mean, 2) / x->numel;
    duet_log(DUET_LOG_INFO, "generated mean %.3f (target 3), std %.3f (0.5)", mean, sqrt(var));
    int ok = fabs(mean - 3.0) < 0.5 && duet_wrapper_check_replicas(w) == DUET_OK;
    duet_tensor_release(z), duet_tensor_release(x);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
    duet_comm_destroy(comm);
    duet_comm_finalize();
    return ok ? 0 : 1;
}
