/* CycleGAN as MMEditing 0.x trains it (mmedit/models/synthesizers/
 * cycle_gan.py; declared in duet/models.h): two generators and two
 * discriminators in two containers, cycle and identity losses, and the
 * image history pools (image_pool.c). The networks are always forwarded
 * through their container's DDP when the wrapper made one
 * (duet_ddp_forward_child), where MMEditing's get_module reaches around it. */
#include "models/models_internal.h"

#include "duet/comm.h"
#include "duet/ddp.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef struct cyclegan {
    int disc_steps, disc_init_steps;
    bool b2a, test_b2a; /* test_b2a: after MMEditing's flip for b2a */
    float cycle_weight;
    int64_t step_counter;
    duet_rng pool_rng;
    duet_rng dropout_rng; /* borrowed by the generators' Dropout layers */
    duet__image_pool *pool_a, *pool_b;
} cyclegan;

duet_cyclegan_opts duet_cyclegan_opts_default(void) {
    duet_cyclegan_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_resnet_generator_opts_default();
    o.discriminator = duet_patch_discriminator_opts_default();
    o.discriminator.in_channels = 3;
    o.discriminator.norm = DUET_GEN_NORM_IN;
    o.gan_loss = duet_gan_loss_opts_default();
    o.gan_loss.gan_type = "lsgan";
    o.cycle_loss_weight = 10.0f;
    o.id_loss_weight = 0.5f;
    o.disc_steps = 1;
    o.buffer_size = 50;
    return o;
}

static void cyclegan_free(void *impl) {
    cyclegan *p = impl;
    if (p == NULL) return;
    duet__image_pool_destroy(p->pool_a);
    duet__image_pool_destroy(p->pool_b);
    free(p);
}

/* The network `net` ("a" or "b") of container part `part`, forwarded
 * through the part's DDP when it has one, so that the DDP is armed and the
 * next backward averages the gradients. */
static int net_forward(duet_model *m, const char *part, const char *net, duet_tensor *x,
                       duet_tensor **out) {
    *out = NULL;
    duet_module *c = NULL;
    DUET_TRY(duet__need_part(m, part, &c));
    if (duet_is_ddp(c)) return duet_ddp_forward_child(c, net, 1, &x, out);
    duet_module *n = duet_module_child(c, net);
    if (n == NULL) return duet__error(DUET_ESTATE, "CycleGAN: %s has no network '%s'", part, net);
    return duet_module_forward(n, x, out);
}

/* A container of networks (PyTorch's ModuleDict): no forward of its own. */
static const duet_module_type module_dict_type = {"ModuleDict", NULL, NULL};

static int test_forward(duet_model *m, duet_tensor *x, duet_tensor **out) {
    const cyclegan *p = duet_model_impl(m);
    return net_forward(m, "generators", p->test_b2a ? "b" : "a", x, out);
}

/* ---- the pools over the global batch ------------------------------------------ */

/* The process group to pool over: the discriminators' DDP's (NULL without
 * the wrapper: this process alone). */
static duet_comm *pool_comm(duet_model *m) {
    duet_module *d = duet_model_part(m, "discriminators");
    return duet_is_ddp(d) ? duet_ddp_comm(d) : NULL;
}

/* Queries pool with the images of every rank, in rank order (the global
 * batch), so every rank draws the same and holds the same pool; *out is
 * this rank's share of the answer. Ranks must hold equal shapes. */
static int pool_query(duet_model *m, duet__image_pool *pool, duet_tensor *local,
                      duet_tensor **out) {
    cyclegan *p = duet_model_impl(m);
    *out = NULL;
    duet_comm *comm = pool_comm(m);
    const int size = comm != NULL ? duet_comm_size(comm) : 1;
    if (size == 1) return duet__image_pool_query(pool, local, &p->pool_rng, out);
    const int rank = duet_comm_rank(comm);
    uint64_t mine[4], *all = malloc((size_t)size * sizeof mine);
    if (all == NULL) return duet__error(DUET_ENOMEM, "CycleGAN: out of memory");
    for (int i = 0; i < 4; i++) mine[i] = (uint64_t)local->shape[i];
    int rc = duet_comm_allgather(comm, mine, all, 4, DUET_DTYPE_U64);
    for (int r = 0; r < size && rc == DUET_OK; r++)
        if (memcmp(all + 4 * r, all, sizeof mine) != 0)
            rc = duet__error(DUET_ESHAPE, "CycleGAN: the image pools take the batch of every "
                             "rank, and rank %d has %" PRIu64 " images of %" PRIu64 "x%" PRIu64
                             "x%" PRIu64 " where rank 0 has %" PRIu64 " of %" PRIu64 "x%" PRIu64
                             "x%" PRIu64 "; give every rank the same batch size and crop", r,
                             all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3], all[0],
                             all[1], all[2], all[3]);
    free(all);
    DUET_TRY(rc);
    const int64_t n = local->shape[0];
    duet_tensor *global = NULL, *answer = NULL;
    const float *mine_f = NULL;
    float *all_f = NULL;
    /* Gathered on the host (mapped: in place on the CPU, copies elsewhere):
     * the pool draws on the host anyway. */
    rc = duet_tensor_create_on(duet_tensor_device(local), 4,
                               (int64_t[]){n * size, local->shape[1], local->shape[2],
                                           local->shape[3]},
                               &global);
    if (rc == DUET_OK) rc = duet_tensor_map_read(local, &mine_f);
    if (rc == DUET_OK) rc = duet_tensor_map_write(global, false, &all_f);
    if (rc == DUET_OK)
        rc = duet_comm_allgather(comm, mine_f, all_f, (size_t)local->numel, DUET_DTYPE_F32);
    duet_tensor_unmap_read(local, mine_f);
    if (global != NULL) {
        int urc = duet_tensor_unmap_write(global, all_f);
        if (rc == DUET_OK) rc = urc;
    }
    if (rc == DUET_OK) rc = duet__image_pool_query(pool, global, &p->pool_rng, &answer);
    if (rc == DUET_OK) rc = duet_tensor_slice0(answer, (int64_t)rank * n, n, out);
    duet_tensor_release(global);
    duet_tensor_release(answer);
    return rc;
}

/* ---- train_step --------------------------------------------------------------- */

typedef struct outputs {
    duet_tensor *real_a, *real_b;              /* borrowed from the batch */
    duet_tensor *fake_b, *rec_a, *fake_a, *rec_b; /* owned */
} outputs;

static void outputs_release(outputs *o) {
    duet_tensor_release(o->fake_b);
    duet_tensor_release(o->rec_a);
    duet_tensor_release(o->fake_a);
    duet_tensor_release(o->rec_b);
}

/* *sum += t (t's reference is taken over; *sum NULL: becomes t). */
static int accumulate(duet_tensor **sum, duet_tensor *t) {
    if (*sum == NULL) {
        *sum = t;
        return DUET_OK;
    }
    duet_tensor *s = NULL;
    int rc = duet_add(*sum, t, &s);
    duet_tensor_release(*sum);
    duet_tensor_release(t);
    *sum = s;
    return rc;
}

/* A loss term, logged under `name` and added to *total. */
static int add_term(duet_log_vars *log, const char *name, duet_tensor *term, duet_tensor **total) {
    int rc = duet__log_scalar(log, name, term);
    if (rc != DUET_OK) {
        duet_tensor_release(term);
        return rc;
    }
    return accumulate(total, term);
}

/* gan_loss(D_net(x), real, generator side) */
static int gan_g(duet_model *m, const char *net, duet_tensor *x, duet_tensor **out) {
    duet_module *gan = NULL;
    duet_tensor *pred = NULL;
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    DUET_TRY(net_forward(m, "discriminators", net, x, &pred));
    int rc = duet_gan_loss(gan, pred, true, false, out);
    duet_tensor_release(pred);
    return rc;
}

/* id_loss(G_net(x), x) * cycle weight (MMEditing scales it so). */
static int identity_term(duet_model *m, duet_module *id, const char *net, duet_tensor *x,
                         duet_tensor **out) {
    const cyclegan *p = duet_model_impl(m);
    duet_tensor *y = NULL, *l = NULL;
    DUET_TRY(net_forward(m, "generators", net, x, &y));
    int rc = duet_module_forward2(id, y, x, &l);
    if (rc == DUET_OK) rc = duet_scale(l, p->cycle_weight, out);
    duet_tensor_release(y);
    duet_tensor_release(l);
    return rc;
}

static int generator_step(duet_model *m, const outputs *o, duet_optimizer *opt_g,
                          duet_log_vars *log) {
    duet_module *discs = NULL, *cyc = NULL;
    DUET_TRY(duet__need_part(m, "discriminators", &discs));
    DUET_TRY(duet__need_part(m, "cycle_loss", &cyc));
    duet_module *id = duet_model_part(m, "id_loss");
    duet_module_set_requires_grad(discs, false);
    duet_optimizer_zero_grad(opt_g);
    /* parse_losses sums the terms in this order. */
    duet_tensor *total = NULL, *t = NULL;
    const int from = log->count;
    int rc = DUET_OK;
    if (id != NULL) {
        rc = identity_term(m, id, "a", o->real_b, &t);
        if (rc == DUET_OK) rc = add_term(log, "loss_id_a", t, &total);
        if (rc == DUET_OK) rc = identity_term(m, id, "b", o->real_a, &t);
        if (rc == DUET_OK) rc = add_term(log, "loss_id_b", t, &total);
    }
    if (rc == DUET_OK) rc = gan_g(m, "a", o->fake_b, &t);
    if (rc == DUET_OK) rc = add_term(log, "loss_gan_g_a", t, &total);
    if (rc == DUET_OK) rc = gan_g(m, "b", o->fake_a, &t);
    if (rc == DUET_OK) rc = add_term(log, "loss_gan_g_b", t, &total);
    if (rc == DUET_OK) rc = duet_module_forward2(cyc, o->rec_a, o->real_a, &t);
    if (rc == DUET_OK) rc = add_term(log, "loss_cycle_a", t, &total);
    if (rc == DUET_OK) rc = duet_module_forward2(cyc, o->rec_b, o->real_b, &t);
    if (rc == DUET_OK) rc = add_term(log, "loss_cycle_b", t, &total);
    if (rc == DUET_OK) rc = duet__log_total(log, from);
    if (rc == DUET_OK) rc = duet_backward(total);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    duet_tensor_release(total);
    return rc;
}

/* One discriminator's loss: (gan(D(pool(fake)), fake) + gan(D(real), real))
 * * 0.5, logged as `name`. */
static int disc_term(duet_model *m, const char *net, duet__image_pool *pool, duet_tensor *fake,
                     duet_tensor *real, const char *name, duet_log_vars *log,
                     duet_tensor **out) {
    duet_module *gan = NULL;
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *pooled = NULL, *fp = NULL, *rp = NULL, *lf = NULL, *lr = NULL, *sum = NULL;
    int rc = pool_query(m, pool, fake, &pooled);
    if (rc == DUET_OK) rc = net_forward(m, "discriminators", net, pooled, &fp);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, fp, false, true, &lf);
    if (rc == DUET_OK) rc = net_forward(m, "discriminators", net, real, &rp);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, rp, true, true, &lr);
    if (rc == DUET_OK) rc = duet_add(lf, lr, &sum);
    float v = 0.0f;
    if (rc == DUET_OK) rc = duet_tensor_item(sum, &v);
    if (rc == DUET_OK) rc = duet_log_vars_set(log, name, (double)v * 0.5);
    if (rc == DUET_OK) rc = duet_scale(sum, 0.5f, out);
    duet_tensor *ts[6] = {pooled, fp, rp, lf, lr, sum};
    for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    return rc;
}

/* MMEditing runs loss_d_a.backward() and loss_d_b.backward(); each network
 * gets its gradient from its own term only, so one backward of the sum gives
 * the same gradients, and it gives the discriminators' DDP (both networks)
 * every gradient in one pass. Two backwards would leave it half-reduced. */
static int discriminator_step(duet_model *m, const outputs *o, duet_optimizer *opt_d,
                              duet_log_vars *log) {
    cyclegan *p = duet_model_impl(m);
    duet_module *discs = NULL;
    DUET_TRY(duet__need_part(m, "discriminators", &discs));
    duet_module_set_requires_grad(discs, true);
    duet_optimizer_zero_grad(opt_d);
    duet_tensor *la = NULL, *lb = NULL, *total = NULL;
    int rc = disc_term(m, "a", p->pool_b, o->fake_b, o->real_b, "loss_gan_d_a", log, &la);
    if (rc == DUET_OK)
        rc = disc_term(m, "b", p->pool_a, o->fake_a, o->real_a, "loss_gan_d_b", log, &lb);
    if (rc == DUET_OK) rc = duet_add(la, lb, &total);
    /* The pools answer copies without history, so this backward reaches no
     * generator; it keeps their graph for the generator step. */
    if (rc == DUET_OK) rc = duet_backward_keep_unreached(total);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor_release(la);
    duet_tensor_release(lb);
    duet_tensor_release(total);
    return rc;
}

static int cyclegan_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                               duet_log_vars *log) {
    cyclegan *p = duet_model_impl(m);
    duet_tensor *img_a = NULL, *img_b = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *discs = NULL;
    DUET_TRY(duet_batch_require(batch, "img_a", &img_a));
    DUET_TRY(duet_batch_require(batch, "img_b", &img_b));
    DUET_TRY(duet_optimizer_set_require(opts, "generators", &opt_g));
    DUET_TRY(duet_optimizer_set_require(opts, "discriminators", &opt_d));
    DUET_TRY(duet__need_part(m, "discriminators", &discs));
    outputs o = {.real_a = p->b2a ? img_b : img_a, .real_b = p->b2a ? img_a : img_b};
    /* forward_train */
    int rc = net_forward(m, "generators", "a", o.real_a, &o.fake_b);
    if (rc == DUET_OK) rc = net_forward(m, "generators", "b", o.fake_b, &o.rec_a);
    if (rc == DUET_OK) rc = net_forward(m, "generators", "b", o.real_b, &o.fake_a);
    if (rc == DUET_OK) rc = net_forward(m, "generators", "a", o.fake_a, &o.rec_b);
    /* MMEditing's order: the discriminators step first (on the pools'
     * detached answers; its backward keeps the generators' graph), then the
     * generators step, gated by disc_steps / disc_init_steps, backpropagates
     * through the outputs computed before the discriminators were updated. */
    if (rc == DUET_OK) rc = discriminator_step(m, &o, opt_d, log);
    if (rc == DUET_OK && p->step_counter % p->disc_steps == 0 &&
        p->step_counter >= p->disc_init_steps)
        rc = generator_step(m, &o, opt_g, log);
    duet_module_set_requires_grad(discs, true);
    outputs_release(&o);
    /* Without a generator step (or after a failure) the generators' graph
     * is still recorded; it belongs to this step only. */
    duet_tape_clear();
    DUET_TRY(rc);
    p->step_counter++;
    return DUET_OK;
}

static int cyclegan_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    return test_forward(m, lq, out);
}

/* MMEditing's forward_test runs the generators in training mode (no effect
 * with instance norm and no dropout); the dropout rng is put back so that
 * evaluating does not change later training steps. The output is the
 * translation of the test direction (show_input's side-by-side picture is
 * the runner's evaluation grid's job); no metrics. */
static int cyclegan_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    cyclegan *p = duet_model_impl(m);
    duet_tensor *img_a = NULL, *img_b = NULL, *fake_b = NULL, *fake_a = NULL;
    duet_module *gens = NULL;
    DUET_TRY(duet_batch_require(batch, "img_a", &img_a));
    DUET_TRY(duet_batch_require(batch, "img_b", &img_b));
    DUET_TRY(duet__need_part(m, "generators", &gens));
    duet_tensor *real_a = p->b2a ? img_b : img_a, *real_b = p->b2a ? img_a : img_b;
    const bool was_training = duet_module_is_training(gens);
    const duet_rng saved = p->dropout_rng;
    duet_module_train(gens, true);
    int rc = net_forward(m, "generators", "a", real_a, &fake_b);
    if (rc == DUET_OK) rc = net_forward(m, "generators", "b", real_b, &fake_a);
    duet_module_train(gens, was_training);
    p->dropout_rng = saved;
    if (rc == DUET_OK) out->output = duet_tensor_retain(p->test_b2a ? fake_a : fake_b);
    duet_tensor_release(fake_a);
    duet_tensor_release(fake_b);
    DUET_TRY(rc);
    out->nsamples = real_a->shape[0];
    return DUET_OK;
}

/* ---- checkpoint state ---------------------------------------------------------- */

/* Metadata keys: the step counter, then seed, stream, counter of each rng.
 * The pools: duet__image_pool_save in models_internal.h ("cyclegan.pool_a",
 * "cyclegan.pool_b"). */
static const char *const state_keys[7] = {
    "cyclegan.step_counter", "cyclegan.pool_rng_seed", "cyclegan.pool_rng_stream",
    "cyclegan.pool_rng_counter", "cyclegan.dropout_rng_seed", "cyclegan.dropout_rng_stream",
    "cyclegan.dropout_rng_counter"};

static int cyclegan_save_state(duet_model *m, duet_st_writer *w) {
    const cyclegan *p = duet_model_impl(m);
    const uint64_t v[7] = {(uint64_t)p->step_counter, p->pool_rng.seed, p->pool_rng.stream,
                           p->pool_rng.counter, p->dropout_rng.seed, p->dropout_rng.stream,
                           p->dropout_rng.counter};
    for (int i = 0; i < 7; i++) {
        char s[32];
        snprintf(s, sizeof s, "%" PRIu64, v[i]);
        DUET_TRY(duet_st_writer_set_meta(w, state_keys[i], s));
    }
    DUET_TRY(duet__image_pool_save(p->pool_a, w, "cyclegan.pool_a"));
    return duet__image_pool_save(p->pool_b, w, "cyclegan.pool_b");
}

static int cyclegan_load_state(duet_model *m, const duet_st *ckpt) {
    uint64_t v[7];
    for (int i = 0; i < 7; i++) {
        const char *s = duet_st_meta(ckpt, state_keys[i]);
        if (s == NULL)
            return duet__error(DUET_ENOTFOUND, "the checkpoint has no metadata '%s' (a CycleGAN "
                               "checkpoint has): resume a CycleGAN run, or start from it with "
                               "load_from", state_keys[i]);
        char *end = NULL;
        errno = 0;
        unsigned long long n = strtoull(s, &end, 10);
        if (end == s || *end != '\0' || errno != 0 || s[0] == '-' ||
            (i == 0 && n > (unsigned long long)INT64_MAX))
            return duet__error(DUET_EFORMAT, "metadata '%s' is '%s', not a count", state_keys[i],
                               s);
        v[i] = n;
    }
    cyclegan *p = duet_model_impl(m);
    DUET_TRY(duet__image_pool_load(p->pool_a, ckpt, "cyclegan.pool_a"));
    DUET_TRY(duet__image_pool_load(p->pool_b, ckpt, "cyclegan.pool_b"));
    p->step_counter = (int64_t)v[0];
    p->pool_rng = (duet_rng){.seed = v[1], .stream = v[2], .counter = v[3]};
    p->dropout_rng = (duet_rng){.seed = v[4], .stream = v[5], .counter = v[6]};
    return DUET_OK;
}

/* forward is G_a on real_a or (test_b2a) G_b on real_b; b2a swaps which
 * batch image is real_a. */
static const char *cyclegan_input_key(duet_model *m) {
    const cyclegan *p = duet_model_impl(m);
    return p->test_b2a != p->b2a ? "img_b" : "img_a";
}

/* forward and val_step use the generators (a and b) only. */
static const char *const eval_parts[] = {"generators", NULL};

static const duet_model_ops cyclegan_ops = {
    .name = "CycleGAN",
    .forward = cyclegan_forward,
    .train_step = cyclegan_train_step,
    .val_step = cyclegan_val_step,
    .destroy = cyclegan_free,
    .save_state = cyclegan_save_state,
    .load_state = cyclegan_load_state,
    .input_key = cyclegan_input_key,
    .eval_parts = eval_parts,
};

/* ---- construction -------------------------------------------------------------- */

/* The root's forward: the generator of the test direction (its impl
 * points at the model's test_b2a). */
static int root_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    const bool *test_b2a = duet_module_impl(self);
    const char *net = test_b2a != NULL && *test_b2a ? "b" : "a";
    duet_module *gens = duet_module_child(self, "generators");
    if (gens == NULL) return duet__error(DUET_ESTATE, "CycleGAN has no generators");
    if (duet_is_ddp(gens)) return duet_ddp_forward_child(gens, net, nin, in, out);
    duet_module *g = duet_module_child(gens, net);
    if (g == NULL) return duet__error(DUET_ESTATE, "CycleGAN: generators has no '%s'", net);
    return duet_module_forwardn(g, nin, in, out);
}

static const duet_module_type cyclegan_module_type = {"CycleGAN", root_forward, NULL};

static int check_opts(const duet_cyclegan_opts *o) {
    if (o->disc_steps < 1 || o->disc_init_steps < 0)
        return duet__error(DUET_EINVAL, "CycleGAN: disc_steps %d must be >= 1 and "
                           "disc_init_steps %d >= 0", o->disc_steps, o->disc_init_steps);
    if (o->buffer_size < 0)
        return duet__error(DUET_EINVAL, "CycleGAN: buffer_size %" PRId64 " must be >= 0",
                           o->buffer_size);
    /* rec_a = G_b(G_a(real_a)): each generator reads the other's output. */
    if (o->generator.in_channels != o->generator.out_channels)
        return duet__error(DUET_EINVAL, "CycleGAN: the generator maps %d channels to %d; the "
                           "cycle (and the identity loss) need in_channels == out_channels",
                           o->generator.in_channels, o->generator.out_channels);
    if (o->discriminator.in_channels != o->generator.out_channels)
        return duet__error(DUET_EINVAL, "CycleGAN: the discriminator takes %d channels, the "
                           "generator makes %d", o->discriminator.in_channels,
                           o->generator.out_channels);
    return DUET_OK;
}

/* A ModuleDict {a, b} of two networks made by make. */
static int pair_create(duet_module **out, int (*make)(duet_module **, const void *, duet_rng *,
                                                      duet_rng *),
                       const void *opts, duet_rng *rng, duet_rng *dropout_rng) {
    *out = NULL;
    duet_module *d = NULL, *net = NULL;
    DUET_TRY(duet_module_create(&module_dict_type, NULL, &d));
    int rc = make(&net, opts, rng, dropout_rng);
    if (rc == DUET_OK) rc = duet_module_add_child(d, "a", net);
    if (rc == DUET_OK) rc = make(&net, opts, rng, dropout_rng);
    if (rc == DUET_OK) rc = duet_module_add_child(d, "b", net);
    if (rc != DUET_OK) {
        duet_module_destroy(d);
        return rc;
    }
    *out = d;
    return DUET_OK;
}

static int make_generator(duet_module **out, const void *o, duet_rng *rng, duet_rng *drop) {
    return duet_resnet_generator_create(o, rng, drop, out);
}

static int make_discriminator(duet_module **out, const void *o, duet_rng *rng, duet_rng *drop) {
    (void)drop;
    return duet_patch_discriminator_create(o, rng, out);
}

int duet_cyclegan_create(const duet_cyclegan_opts *opts, duet_rng *rng, duet_model **out) {
    *out = NULL;
    DUET_TRY(check_opts(opts));
    cyclegan *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "CycleGAN: out of memory");
    p->disc_steps = opts->disc_steps;
    p->disc_init_steps = opts->disc_init_steps;
    p->b2a = opts->b2a;
    /* MMEditing: test_direction is relative to the training direction. */
    p->test_b2a = opts->b2a ? !opts->test_b2a : opts->test_b2a;
    p->cycle_weight = opts->cycle_loss_weight;
    p->pool_rng = duet_rng_make(opts->pool_seed, 0);
    p->dropout_rng = duet_rng_make(opts->dropout_seed, 0);
    int rc = duet__image_pool_create(opts->buffer_size, &p->pool_a);
    if (rc == DUET_OK) rc = duet__image_pool_create(opts->buffer_size, &p->pool_b);
    duet_module *root = NULL, *part = NULL;
    if (rc == DUET_OK) rc = duet_module_create(&cyclegan_module_type, &p->test_b2a, &root);
    if (rc != DUET_OK) {
        cyclegan_free(p);
        return rc;
    }
    rc = pair_create(&part, make_generator, &opts->generator, rng, &p->dropout_rng);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generators", part);
    if (rc == DUET_OK)
        rc = pair_create(&part, make_discriminator, &opts->discriminator, rng, NULL);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "discriminators", part);
    if (rc == DUET_OK) rc = duet_gan_loss_create(&opts->gan_loss, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "gan_loss", part);
    if (rc == DUET_OK) rc = duet_l1_loss_module_create(opts->cycle_loss_weight, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "cycle_loss", part);
    if (rc == DUET_OK && opts->id_loss_weight > 0.0f) {
        rc = duet_l1_loss_module_create(opts->id_loss_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "id_loss", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "CycleGAN");
        duet_module_destroy(root);
        cyclegan_free(p);
        return rc;
    }
    return duet_model_create(&cyclegan_ops, p, root, out);
}

static cyclegan *impl_of(duet_model *m) {
    DUET_ASSERT(strcmp(duet_model_type_name(m), "CycleGAN") == 0);
    return duet_model_impl(m);
}

int64_t duet_cyclegan_step_counter(duet_model *m) { return impl_of(m)->step_counter; }
const char *duet_cyclegan_test_generator(duet_model *m) {
    return impl_of(m)->test_b2a ? "generators.b" : "generators.a";
}
duet_rng *duet_cyclegan_pool_rng(duet_model *m) { return &impl_of(m)->pool_rng; }

int64_t duet_cyclegan_pool_count(duet_model *m, char which) {
    const cyclegan *p = impl_of(m);
    return duet__image_pool_count(which == 'a' ? p->pool_a : p->pool_b);
}
