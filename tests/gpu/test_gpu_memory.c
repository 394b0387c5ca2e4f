/* Tensors on a GPU: copies both ways, views, fills, checkpoints from the
 * device, the caching allocator on the device (no cudaMalloc in a step
 * after the first, live and peak bytes), streams, mixed-device errors, and
 * CUDA failures as duet statuses. Needs a GPU; exits 77 (skipped) without. */
#include "testutil.h"

#include "cuda/cuda.h"
#include "gpu/gpu_skip.h"

#include <string.h>

static const duet_device GPU = {DUET_DEVICE_CUDA, 0};

static void test_round_trips(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_tensor *h = tu_randn(&rng, 4, (int64_t[]){2, 3, 5, 7}, 1.0f), *d = NULL, *back = NULL;
    TU_OK(duet_tensor_to(h, GPU, &d));
    assert_int_equal(duet_tensor_device(d).type, DUET_DEVICE_CUDA);
    assert_null(duet_tensor_host_data(d));
    assert_ptr_equal(duet_tensor_data_on(d, GPU), d->data);
    TU_OK(duet_tensor_to(d, duet_device_cpu(), &back));
    assert_memory_equal(back->data, h->data, (size_t)h->numel * sizeof(float));
    /* A view of samples [1, 2) on the GPU reads the right floats. */
    duet_tensor *s = NULL;
    TU_OK(duet_tensor_slice0(d, 1, 1, &s));
    assert_int_equal(duet_tensor_device(s).type, DUET_DEVICE_CUDA);
    float part[105];
    TU_OK(duet_tensor_copy_to_host(s, part));
    assert_memory_equal(part, h->data + 105, sizeof part);
    /* Writing through the view changes the base. */
    for (int i = 0; i < 105; i++) part[i] = (float)i;
    TU_OK(duet_tensor_copy_from_host(s, part));
    TU_OK(duet_tensor_copy(back, d));
    assert_true(back->data[105 + 7] == 7.0f && back->data[0] == h->data[0]);
    /* Device to device, and a clone stays on the device. */
    duet_tensor *c = NULL;
    TU_OK(duet_tensor_clone(d, &c));
    assert_int_equal(duet_tensor_device(c).type, DUET_DEVICE_CUDA);
    assert_ptr_not_equal(c->data, d->data);
    TU_OK(duet_tensor_fill(d, 2.5f));
    TU_OK(duet_tensor_copy_to_host(c, back->data));
    assert_true(back->data[105 + 7] == 7.0f);
    TU_OK(duet_tensor_copy_to_host(d, back->data));
    for (int64_t i = 0; i < d->numel; i++) assert_true(back->data[i] == 2.5f);
    /* Zero-filled creation, gradients on the device. */
    duet_tensor *z = NULL;
    TU_OK(duet_tensor_create_on(GPU, 1, (int64_t[]){1000}, &z));
    TU_OK(duet_tensor_ensure_grad(z));
    float zz[1000];
    memset(zz, 0xff, sizeof zz);
    duet_tensor gview = *z;
    gview.data = z->grad;
    TU_OK(duet_tensor_copy_to_host(&gview, zz));
    for (int i = 0; i < 1000; i++) assert_true(zz[i] == 0.0f);
    TU_OK(duet_tensor_copy_to_host(z, zz));
    for (int i = 0; i < 1000; i++) assert_true(zz[i] == 0.0f);
    TU_OK(duet_tensor_zero_grad(z));
    duet_tensor_release(z);
    duet_tensor_release(c);
    duet_tensor_release(s);
    duet_tensor_release(back);
    duet_tensor_release(d);
    duet_tensor_release(h);
}

/* A checkpoint written from the device and read back into the device. */
static void test_safetensors_from_and_to_the_device(void **state) {
    const tu_tmpdir *fx = *state;
    const char *dir = fx->dir;
    duet_rng rng = duet_rng_make(2, 0);
    duet_tensor *h = tu_randn(&rng, 2, (int64_t[]){17, 33}, 1.0f), *d = NULL, *d2 = NULL;
    TU_OK(duet_tensor_to(h, GPU, &d));
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_add(w, "w", d));
    char path[512];
    TU_OK(duet_st_writer_save(w, tu_path(path, sizeof path, dir, "gpu.safetensors")));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    duet_tensor *r = NULL;
    TU_OK(duet_st_get(st, "w", &r));
    assert_memory_equal(r->data, h->data, (size_t)h->numel * sizeof(float));
    TU_OK(duet_tensor_create_on(GPU, 2, (int64_t[]){17, 33}, &d2));
    TU_OK(duet_st_copy_into(st, "w", d2));
    TU_OK(duet_tensor_copy_to_host(d2, r->data));
    assert_memory_equal(r->data, h->data, (size_t)h->numel * sizeof(float));
    duet_st_destroy(st);
    duet_tensor_release(r);
    duet_tensor_release(d2);
    duet_tensor_release(d);
    duet_tensor_release(h);
}

/* One "training step" of allocations: activations of several sizes made
 * and released in a network's order. */
static void one_step(void) {
    const int64_t sizes[] = {16 * 64 * 128 * 128, 16 * 64 * 32 * 32, 64 * 64 * 9, 64, 1,
                             16 * 256 * 64 * 64, 3 * 1024 * 1024 + 7, 100};
    enum { N = sizeof sizes / sizeof sizes[0] };
    duet_tensor *t[N];
    for (int i = 0; i < N; i++) TU_OK(duet_tensor_create_on(GPU, 1, &sizes[i], &t[i]));
    for (int i = 0; i < N; i += 2) duet_tensor_release(t[i]);
    duet_tensor *again = NULL;
    TU_OK(duet_tensor_create_on(GPU, 1, &sizes[0], &again));
    duet_tensor_release(again);
    for (int i = 1; i < N; i += 2) duet_tensor_release(t[i]);
}

static void test_no_cudamalloc_after_the_first_step(void **state) {
    (void)state;
    size_t live0, peak0, reserved0;
    duet_device_alloc_stats(GPU, &live0, &peak0, &reserved0);
    duet_device_alloc_reset_peak(GPU);
    one_step();
    uint64_t m1, f1;
    duet__cuda_alloc_counts(0, &m1, &f1);
    size_t live, peak, reserved;
    duet_device_alloc_stats(GPU, &live, &peak, &reserved);
    assert_int_equal(live, live0);
    /* At least every tensor of the step at once, as floats. */
    assert_true(peak - live0 >= (size_t)(16 * 64 * 128 * 128 + 16 * 64 * 32 * 32) * 4);
    assert_true(reserved >= peak);
    for (int s = 0; s < 3; s++) one_step();
    uint64_t m2, f2;
    duet__cuda_alloc_counts(0, &m2, &f2);
    assert_int_equal(m2, m1);
    assert_int_equal(f2, f1);
    /* Emptying the cache returns what is not live. */
    TU_OK(duet__cuda_empty_cache(0));
    duet_device_alloc_stats(GPU, &live, &peak, &reserved);
    assert_true(reserved < peak);
}

/* A block also used on a second stream is not reused before that stream
 * has run past its use. */
static void test_record_stream_on_the_device(void **state) {
    (void)state;
    cudaStream_t other;
    assert_int_equal(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    void *a = NULL, *b = NULL;
    TU_OK(duet__cuda_alloc(0, 8 << 20, false, "test", &a));
    /* Keep `other` busy: a large copy queued on it reads a. */
    void *big = NULL;
    TU_OK(duet__cuda_alloc(0, (size_t)1 << 30, false, "test", &big));
    assert_int_equal(cudaMemcpyAsync(big, a, 8 << 20, cudaMemcpyDeviceToDevice, other),
                     cudaSuccess);
    TU_OK(duet__cuda_record_stream(0, a, other));
    duet__cuda_free(0, a);
    TU_OK(duet__cuda_alloc(0, 8 << 20, false, "test", &b));
    if (cudaStreamQuery(other) == cudaErrorNotReady) assert_ptr_not_equal(a, b);
    (void)cudaGetLastError();
    duet__cuda_free(0, b);
    assert_int_equal(cudaStreamSynchronize(other), cudaSuccess);
    duet__cuda_free(0, big);
    assert_int_equal(cudaStreamDestroy(other), cudaSuccess);
}

static void test_errors_name_the_call_and_op(void **state) {
    (void)state;
    duet_tensor *huge = NULL;
    /* 2^40 floats: no GPU has 4 TiB. */
    assert_int_equal(duet_tensor_create_on(GPU, 2, (int64_t[]){1 << 20, 1 << 20}, &huge),
                     DUET_ENOMEM);
    assert_null(huge);
    const char *m = duet_last_error();
    if (strstr(m, "tensor: ") == NULL || strstr(m, "cudaMalloc") == NULL ||
        strstr(m, "cudaErrorMemoryAllocation") == NULL)
        fail_msg("unexpected message: %s", m);
    /* After the failure the device still works. */
    duet_tensor *t = NULL, *c = NULL, *out = NULL;
    TU_OK(duet_tensor_create_on(GPU, 1, (int64_t[]){8}, &t));
    TU_OK(duet_tensor_create(1, (int64_t[]){8}, &c));
    /* Mixed devices, with a real device tensor. */
    assert_int_equal(duet_add(c, t, &out), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "add: inputs on different devices: a on cpu, b on "
                                              "cuda:0"));
    /* A device past the visible ones. */
    int n = duet_cuda_device_count();
    assert_int_equal(duet_tensor_create_on(duet_device_cuda(n), 1, (int64_t[]){8}, &out),
                     DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "asked for"));
    /* A CUDA call that fails: making a device past the visible ones current. */
    assert_int_equal(duet__cuda_sync(n, "bogus device"), DUET_EDEVICE);
    m = duet_last_error();
    if (strstr(m, "bogus device: cudaSetDevice(dev) failed: cudaErrorInvalidDevice") == NULL ||
        strstr(m, "src/cuda/runtime.c:") == NULL)
        fail_msg("unexpected message: %s", m);
    /* Not sticky: the device still works. */
    float host[8];
    TU_OK(duet_tensor_copy_to_host(t, host));
    duet_tensor_release(c);
    duet_tensor_release(t);
}

int main(void) {
    gpu_or_skip("test_gpu_memory");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        TU_TMPDIR_TEST(test_safetensors_from_and_to_the_device),
        cmocka_unit_test(test_no_cudamalloc_after_the_first_step),
        cmocka_unit_test(test_record_stream_on_the_device),
        cmocka_unit_test(test_errors_name_the_call_and_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
