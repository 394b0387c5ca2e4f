/* The simulated device sim:N (src/sim/, white-box): names, memory the host
 * cannot reach, stream-ordered reuse, counted copies, streams that run
 * asynchronously and in order, events between streams, sticky kernel
 * errors, and the tape's storage on sim. Streams are made to wait on gates
 * the test opens, so that every order is decided by the test, not by
 * timing. */
#include "testutil.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"

/* ---- helpers ---------------------------------------------------------------- */

/* A gate a kernel waits at until the host opens it. Bounded (10 s, far
 * beyond any scheduling delay) so that a launch that wrongly blocked the
 * host fails the test instead of hanging it. */
typedef struct gate {
    atomic_int open;
    atomic_int reached;
} gate;

static int gate_kernel(void *arg) {
    gate *g = arg;
    atomic_store(&g->reached, 1);
    for (long i = 0; i < 10 * 1000 * 100 && !atomic_load(&g->open); i++) usleep(10);
    if (!atomic_load(&g->open))
        return duet__error(DUET_ETIMEOUT, "gate: the host never opened it (did a launch "
                           "block the host?)");
    return DUET_OK;
}

/* Appends `value` to a log (host memory the kernels share). */
typedef struct log_ctx {
    int *log;
    atomic_int *n;
    int value;
} log_ctx;

static int log_kernel(void *arg) {
    log_ctx *c = arg;
    c->log[atomic_fetch_add(c->n, 1)] = c->value;
    return DUET_OK;
}

static int launch_log(duet__sim_stream *s, int *log, atomic_int *n, int value) {
    log_ctx *c = malloc(sizeof *c);
    assert_non_null(c);
    *c = (log_ctx){log, n, value};
    return duet__sim_launch(s, "log", log_kernel, c, free);
}

/* *dst (a sim float, resolved on the worker) = v, or *out = *src. */
typedef struct poke_ctx {
    float *dst;
    const float *src;
    float *out;
    float v;
} poke_ctx;

static int poke_kernel(void *arg) {
    poke_ctx *c = arg;
    if (c->dst != NULL) *(float *)duet__sim_resolve(c->dst) = c->v;
    if (c->src != NULL) *c->out = *(const float *)duet__sim_resolve(c->src);
    return DUET_OK;
}

static int launch_poke(duet__sim_stream *s, float *dst, const float *src, float *out, float v) {
    poke_ctx *c = malloc(sizeof *c);
    assert_non_null(c);
    *c = (poke_ctx){dst, src, out, v};
    return duet__sim_launch(s, "poke", poke_kernel, c, free);
}

static float sim_read(const float *handle) {
    float v = -1.0f;
    TU_OK(duet__sim_copy(duet_device_cpu(), &v, duet_device_sim(duet__sim_index_of(handle)),
                         handle, sizeof v, "test read"));
    return v;
}

/* ---- names -------------------------------------------------------------------- */

static void test_names(void **state) {
    (void)state;
    duet_device d;
    char buf[DUET_DEVICE_STR_MAX];
    TU_OK(duet_device_parse("sim", &d));
    assert_int_equal(d.type, DUET_DEVICE_SIM);
    assert_int_equal(d.index, 0);
    TU_OK(duet_device_parse("sim:3", &d));
    assert_true(duet_device_equal(d, duet_device_sim(3)));
    assert_string_equal(duet_device_str(d, buf, sizeof buf), "sim:3");
    assert_int_equal(duet_device_parse("sim:", &d), DUET_EINVAL);
    assert_int_equal(duet_device_parse("sim:x", &d), DUET_EINVAL);
    TU_OK(duet_device_check(duet_device_sim(7)));
    assert_int_equal(duet_device_check(duet_device_sim(8)), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "sim:8"));
    assert_false(duet_device_equal(duet_device_sim(0), duet_device_cuda(0)));
    duet_sim_stats st;
    assert_int_equal(duet_sim_stats_get(8, &st), DUET_EINVAL);
}

/* ---- memory ------------------------------------------------------------------- */

static void test_alloc_free_reuse(void **state) {
    (void)state;
    duet_device d = duet_device_sim(1);
    void *a = NULL, *b = NULL, *c = NULL;
    size_t live0 = 0, peak = 0, reserved = 0;
    duet_device_alloc_stats(d, &live0, &peak, &reserved);
    TU_OK(duet__device_alloc(d, 1000, false, "test", &a));
    TU_OK(duet__device_alloc(d, 4096, true, "test", &b));
    assert_int_equal(duet__sim_index_of(a), 1);
    assert_null(duet_tensor_data_on(&(duet_tensor){.device = d, .data = a}, duet_device_cpu()));
    assert_ptr_equal((char *)duet__sim_resolve((char *)b + 100),
                     (char *)duet__sim_resolve(b) + 100);
    size_t live = 0;
    duet_device_alloc_stats(d, &live, &peak, &reserved);
    assert_int_equal(live - live0, 1024 + 4096);
    /* Zeroed on the stream. */
    assert_true(sim_read((float *)b + 1023) == 0.0f);
    /* A block freed on the host is reused by the next allocation of its
     * size (its work comes later on the compute stream). */
    duet__device_free(d, a);
    TU_OK(duet__device_alloc(d, 1000, false, "test", &c));
    assert_ptr_equal(c, a);
    duet__device_free(d, c);
    duet__device_free(d, b);
    duet_device_alloc_stats(d, &live, &peak, &reserved);
    assert_int_equal(live, live0);
    assert_true(reserved >= live0 + 1024 + 4096);
    /* Freed neighbours merge: one block of both sizes fits where they were. */
    TU_OK(duet__device_alloc(d, 1024 + 4096, false, "test", &c));
    assert_ptr_equal(c, a);
    duet__device_free(d, c);
}

static void test_out_of_arena(void **state) {
    (void)state;
    /* sim:6's arena is made here, with 4 MiB. */
    setenv("DUET_SIM_MEMORY", "4M", 1);
    void *a = NULL, *b = NULL;
    TU_OK(duet__sim_alloc(6, 3 << 20, false, "first block", &a));
    unsetenv("DUET_SIM_MEMORY");
    assert_int_equal(duet__sim_alloc(6, 2 << 20, false, "second block", &b), DUET_ENOMEM);
    assert_non_null(strstr(duet_last_error(), "second block"));
    assert_non_null(strstr(duet_last_error(), "sim:6"));
    duet__sim_free(6, a);
    TU_OK(duet__sim_alloc(6, 2 << 20, false, "second block", &b));
    duet__sim_free(6, b);
}

static void test_host_dereference_crashes(void **state) {
    (void)state;
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_create_on(duet_device_sim(0), 1, (int64_t[]){16}, &t));
    assert_null(duet_tensor_host_data(t));
    TU_OK(duet_device_synchronize(duet_device_sim(0)));
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child has no stream workers: it only reads. cmocka's own
         * SIGSEGV handler (inherited) would turn the fault into a failed
         * test inside the child: the default action must kill it. */
        signal(SIGSEGV, SIG_DFL);
        volatile float v = t->data[3];
        (void)v;
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSEGV);
    duet_tensor_release(t);
}

/* ---- tensors and counted copies -------------------------------------------- */

static void test_tensor_copies_counted(void **state) {
    (void)state;
    duet_device d = duet_device_sim(2);
    duet_sim_stats_reset(2);
    float host[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    duet_tensor *h = NULL, *t = NULL, *c = NULL, *u = NULL, *z = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){5}, host, &h));
    TU_OK(duet_tensor_to(h, d, &t)); /* h2d */
    assert_true(duet_device_equal(duet_tensor_device(t), d));
    assert_null(duet_tensor_host_data(t));
    TU_OK(duet_tensor_copy_to_host(t, back)); /* d2h */
    assert_memory_equal(back, host, sizeof host);
    duet_sim_stats st;
    TU_OK(duet_sim_stats_get(2, &st));
    assert_int_equal(st.h2d_copies, 1);
    assert_int_equal(st.d2h_copies, 1);
    assert_int_equal(st.h2d_bytes, sizeof host);
    assert_int_equal(st.d2h_bytes, sizeof host);
    assert_int_equal(st.d2d_copies, 0);

    /* clone and to(sim) are device copies; fill is a launch. */
    TU_OK(duet_tensor_clone(t, &c));
    TU_OK(duet_tensor_to(c, d, &u));
    TU_OK(duet_tensor_fill(t, 7.0f));
    TU_OK(duet_tensor_copy_to_host(c, back));
    assert_memory_equal(back, host, sizeof host);
    TU_OK(duet_tensor_copy_to_host(u, back));
    assert_memory_equal(back, host, sizeof host);
    TU_OK(duet_tensor_copy_to_host(t, back));
    for (int i = 0; i < 5; i++) assert_true(back[i] == 7.0f);
    TU_OK(duet_sim_stats_get(2, &st));
    assert_int_equal(st.d2d_copies, 2);
    assert_int_equal(st.d2d_bytes, 2 * sizeof host);
    assert_int_equal(st.d2h_copies, 4);
    assert_true(st.launches >= 1);

    /* copy_from_host, copy between devices, gradients. */
    float ones[5] = {1, 1, 1, 1, 1};
    TU_OK(duet_tensor_copy_from_host(u, ones));
    TU_OK(duet_tensor_copy(c, u));
    TU_OK(duet_tensor_copy(h, c)); /* d2h through duet_tensor_copy */
    assert_memory_equal(h->data, ones, sizeof ones);
    TU_OK(duet_tensor_ensure_grad(t));
    TU_OK(duet_tensor_copy_from_host(t, host));
    TU_OK(duet__device_copy(d, t->grad, d, t->data, sizeof host, "test"));
    TU_OK(duet_tensor_own_grad(t));
    TU_OK(duet__device_copy(duet_device_cpu(), back, d, t->grad, sizeof back, "test"));
    assert_memory_equal(back, host, sizeof host);
    TU_OK(duet_tensor_zero_grad(t));
    TU_OK(duet__device_copy(duet_device_cpu(), back, d, t->grad, sizeof back, "test"));
    for (int i = 0; i < 5; i++) assert_true(back[i] == 0.0f);
    /* A view's data is inside its base's block. */
    TU_OK(duet_tensor_slice0(t, 2, 2, &z));
    TU_OK(duet_tensor_copy_to_host(z, back));
    assert_true(back[0] == 3.0f && back[1] == 4.0f);
    TU_OK(duet_sim_stats_get(2, &st));
    assert_int_equal(st.h2d_copies, 3);
    duet_tensor_release(z);
    duet_tensor_release(u);
    duet_tensor_release(c);
    duet_tensor_release(t);
    duet_tensor_release(h);
}

/* ---- streams -------------------------------------------------------------------- */

static void test_streams_async_in_order(void **state) {
    (void)state;
    duet__sim_stream *s = NULL;
    TU_OK(duet__sim_stream_create(3, &s));
    assert_int_equal(duet__sim_stream_index(s), 3);
    gate g = {0};
    int log[8] = {0};
    atomic_int n = 0;
    TU_OK(duet__sim_launch(s, "gate", gate_kernel, &g, NULL));
    for (int i = 1; i <= 5; i++) TU_OK(launch_log(s, log, &n, i));
    /* The host got here with the stream held at the gate: nothing logged. */
    assert_int_equal(atomic_load(&n), 0);
    duet__sim_event *ev = NULL;
    TU_OK(duet__sim_event_create(&ev));
    TU_OK(duet__sim_event_record(ev, s));
    assert_false(duet__sim_event_query(ev));
    atomic_store(&g.open, 1);
    TU_OK(duet__sim_event_synchronize(ev));
    assert_true(duet__sim_event_query(ev));
    assert_int_equal(atomic_load(&n), 5);
    for (int i = 0; i < 5; i++) assert_int_equal(log[i], i + 1);
    duet__sim_event_destroy(ev);
    duet__sim_stream_destroy(s);
}

/* Stream a: gate, then x = 1, event. Stream b: (waits for the event,) then
 * reads x. With the wait b reads 1; without it b runs while a is held at
 * the gate and reads 0: what a missing wait looks like. */
static float two_streams(bool wait) {
    duet__sim_stream *a = NULL, *b = NULL;
    TU_OK(duet__sim_stream_create(3, &a));
    TU_OK(duet__sim_stream_create(3, &b));
    float *x = NULL;
    TU_OK(duet__sim_alloc(3, sizeof(float), true, "x", (void **)&x));
    TU_OK(duet__sim_stream_synchronize(duet__sim_compute_stream(3))); /* x = 0 */
    gate g = {0};
    duet__sim_event *ev = NULL;
    TU_OK(duet__sim_event_create(&ev));
    TU_OK(duet__sim_launch(a, "gate", gate_kernel, &g, NULL));
    TU_OK(launch_poke(a, x, NULL, NULL, 1.0f));
    TU_OK(duet__sim_event_record(ev, a));
    float seen = -1.0f;
    if (wait) TU_OK(duet__sim_stream_wait_event(b, ev));
    TU_OK(launch_poke(b, NULL, x, &seen, 0.0f));
    if (!wait) TU_OK(duet__sim_stream_synchronize(b)); /* b ran while a is gated */
    atomic_store(&g.open, 1);
    TU_OK(duet__sim_stream_synchronize(b));
    TU_OK(duet__sim_stream_synchronize(a));
    duet__sim_event_destroy(ev);
    duet__sim_free(3, x);
    duet__sim_stream_destroy(b);
    duet__sim_stream_destroy(a);
    return seen;
}

static void test_event_orders_streams(void **state) {
    (void)state;
    assert_true(two_streams(true) == 1.0f);
    assert_true(two_streams(false) == 0.0f);
}

typedef struct flag_ctx {
    atomic_int *ran, *freed;
} flag_ctx;

static int flag_kernel(void *arg) {
    flag_ctx *c = arg;
    atomic_fetch_add(c->ran, 1);
    return DUET_OK;
}

static int failing_kernel(void *arg) {
    (void)arg;
    return duet__error(DUET_EINVAL, "the planted failure of tensor q");
}

static void flag_free(void *arg) {
    flag_ctx *c = arg;
    atomic_fetch_add(c->freed, 1);
    free(c);
}

static void test_sticky_kernel_error(void **state) {
    (void)state;
    atomic_int ran = 0, freed = 0;
    duet__sim_stream *comp = duet__sim_compute_stream(4);
    flag_ctx *c1 = malloc(sizeof *c1), *c2 = malloc(sizeof *c2), *c3 = malloc(sizeof *c3);
    *c1 = *c2 = *c3 = (flag_ctx){&ran, &freed};
    TU_OK(duet__sim_launch(comp, "before", flag_kernel, c1, flag_free));
    TU_OK(duet__sim_launch(comp, "my_op", failing_kernel, c2, flag_free));
    TU_OK(duet__sim_launch(comp, "after", flag_kernel, c3, flag_free));
    assert_int_equal(duet_device_synchronize(duet_device_sim(4)), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "my_op"));
    assert_non_null(strstr(duet_last_error(), "the planted failure of tensor q"));
    assert_non_null(strstr(duet_last_error(), "sim:4"));
    assert_int_equal(atomic_load(&ran), 1); /* "after" was skipped */
    assert_int_equal(atomic_load(&freed), 3); /* every ctx freed */
    /* Sticky: a blocking copy reports it too, naming both. */
    float v = 0.0f;
    void *h = NULL;
    TU_OK(duet__sim_alloc(4, sizeof v, false, "h", &h));
    assert_int_equal(duet__device_copy(duet_device_cpu(), &v, duet_device_sim(4), h, sizeof v,
                                       "read back"),
                     DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "read back"));
    assert_non_null(strstr(duet_last_error(), "my_op"));
    duet__sim_device_reset(4);
    TU_OK(duet_device_synchronize(duet_device_sim(4)));
    duet__sim_free(4, h);
}

/* A block a second stream uses is not reused after its free until that
 * stream has passed the free; without duet__sim_record_stream it is reused
 * at once (the compute stream's order), which would race. */
static void test_record_stream(void **state) {
    (void)state;
    const int dev = 5;
    duet__sim_stream *comm = NULL;
    TU_OK(duet__sim_stream_create(dev, &comm));
    for (int recorded = 1; recorded >= 0; recorded--) {
        float *x = NULL, *y = NULL, *z = NULL;
        TU_OK(duet__sim_alloc(dev, 4096, false, "x", (void **)&x));
        gate g = {0};
        TU_OK(duet__sim_launch(comm, "gate", gate_kernel, &g, NULL));
        TU_OK(launch_poke(comm, x, NULL, NULL, 5.0f));
        if (recorded) TU_OK(duet__sim_record_stream(x, comm));
        duet__sim_free(dev, x);
        TU_OK(duet__sim_alloc(dev, 4096, false, "y", (void **)&y));
        if (!recorded) {
            assert_ptr_equal(y, x); /* reused at once: comm still owes its write */
            atomic_store(&g.open, 1);
            TU_OK(duet__sim_stream_synchronize(comm));
            duet__sim_free(dev, y);
            continue;
        }
        assert_ptr_not_equal(y, x);
        atomic_store(&g.open, 1);
        TU_OK(duet__sim_stream_synchronize(comm));
        /* comm passed the free: x's block comes back. */
        TU_OK(duet__sim_alloc(dev, 4096, false, "z", (void **)&z));
        assert_ptr_equal(z, x);
        assert_true(sim_read(z) == 5.0f);
        duet__sim_free(dev, z);
        duet__sim_free(dev, y);
    }
    duet__sim_stream_destroy(comm);
}

static void test_async_copy_and_staging(void **state) {
    (void)state;
    const int dev = 5;
    duet__sim_stream *comm = NULL;
    TU_OK(duet__sim_stream_create(dev, &comm));
    duet_sim_stats_reset(dev);
    float *x = NULL;
    TU_OK(duet__sim_alloc(dev, 4 * sizeof(float), false, "x", (void **)&x));
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    gate g = {0};
    TU_OK(duet__sim_launch(comm, "gate", gate_kernel, &g, NULL));
    TU_OK(duet__sim_copy_async(duet_device_sim(dev), x, duet_device_cpu(), in, sizeof in,
                               "stage in", comm));
    TU_OK(duet__sim_copy_async(duet_device_cpu(), out, duet_device_sim(dev), x, sizeof out,
                               "stage out", comm));
    assert_true(out[3] == 0.0f); /* queued behind the gate */
    atomic_store(&g.open, 1);
    TU_OK(duet__sim_stream_synchronize(comm));
    assert_memory_equal(out, in, sizeof in);
    duet_sim_stats st;
    TU_OK(duet_sim_stats_get(dev, &st));
    assert_int_equal(st.h2d_copies, 1);
    assert_int_equal(st.d2h_copies, 1);
    assert_int_equal(st.syncs, 1);
    duet__sim_free(dev, x);
    duet__sim_stream_destroy(comm);
}

/* ---- the tape's storage on sim ------------------------------------------------ */

/* y = x (a copy on the device); backward: dx += dy. */
static int copy_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *y = node->output;
    return duet__device_add_f32(y->device, gx, gx, y->grad, (size_t)y->numel, "copy backward");
}

static void test_backward_on_sim(void **state) {
    (void)state;
    duet_device d = duet_device_sim(0);
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_create_on(d, 1, (int64_t[]){1}, &x));
    x->requires_grad = true;
    for (int pass = 1; pass <= 2; pass++) {
        TU_OK(duet_tensor_clone(x, &y));
        TU_OK(duet_autograd_record(y, "copy", copy_backward, NULL, NULL, 1, &x));
        TU_OK(duet_backward(y)); /* the seed through copies, dx on the stream */
        duet_tensor_release(y);
        float g = 0.0f;
        TU_OK(duet__device_copy(duet_device_cpu(), &g, d, x->grad, sizeof g, "test"));
        assert_true(g == (float)pass); /* leaves accumulate */
    }
    duet_tensor_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_alloc_free_reuse),
        cmocka_unit_test(test_out_of_arena),
        cmocka_unit_test(test_host_dereference_crashes),
        cmocka_unit_test(test_tensor_copies_counted),
        cmocka_unit_test(test_streams_async_in_order),
        cmocka_unit_test(test_event_orders_streams),
        cmocka_unit_test(test_sticky_kernel_error),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_async_copy_and_staging),
        cmocka_unit_test(test_backward_on_sim),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
