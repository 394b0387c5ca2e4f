/* CUDA, cuBLAS, cuDNN and NCCL statuses as duet statuses whose messages
 * name the op, the call and the place (src/cuda/status.c). The libraries'
 * status names and texts need no GPU: this runs in every CUDA build. */
#include "testutil.h"

#include "cuda/cuda_internal.h"

#include <string.h>

static void expect_msg(const char *want) {
    if (strstr(duet_last_error(), want) == NULL)
        fail_msg("expected \"%s\" in \"%s\"", want, duet_last_error());
}

static int failing_cuda_call(void) {
    DUET_CUDA_TRY("relu", cudaErrorInvalidConfiguration);
    return DUET_OK;
}

static int failing_cublas_call(void) {
    DUET_CUBLAS_TRY("linear", CUBLAS_STATUS_NOT_SUPPORTED);
    return DUET_OK;
}

static int failing_cudnn_call(void) {
    DUET_CUDNN_TRY("conv2d", CUDNN_STATUS_NOT_SUPPORTED_SHAPE);
    return DUET_OK;
}

static int failing_nccl_call(void) {
    DUET_NCCL_TRY("ddp generator", ncclInvalidUsage);
    return DUET_OK;
}

static int succeeding_calls(void) {
    DUET_CUDA_TRY("x", cudaSuccess);
    DUET_CUBLAS_TRY("x", CUBLAS_STATUS_SUCCESS);
    DUET_CUDNN_TRY("x", CUDNN_STATUS_SUCCESS);
    DUET_NCCL_TRY("x", ncclSuccess);
    return DUET_OK;
}

static void test_messages_name_op_call_and_place(void **state) {
    (void)state;
    assert_int_equal(failing_cuda_call(), DUET_EDEVICE);
    expect_msg("relu: cudaErrorInvalidConfiguration failed: cudaErrorInvalidConfiguration (");
    expect_msg("tests/cuda/test_cuda_status.c:");
    assert_int_equal(failing_cublas_call(), DUET_EUNSUPPORTED);
    expect_msg("linear: CUBLAS_STATUS_NOT_SUPPORTED failed: CUBLAS_STATUS_NOT_SUPPORTED");
    assert_int_equal(failing_cudnn_call(), DUET_EUNSUPPORTED);
    expect_msg("conv2d: CUDNN_STATUS_NOT_SUPPORTED_SHAPE failed: cuDNN status 3002");
    assert_int_equal(failing_nccl_call(), DUET_EINVAL);
    expect_msg("ddp generator: ncclInvalidUsage failed: NCCL result 5");
    duet_clear_error();
    TU_OK(succeeding_calls());
    assert_string_equal(duet_last_error(), "");
    /* The call's own text, as the macro writes it at a real call site. */
    assert_int_equal(duet__cuda_status(cudaErrorMemoryAllocation, "conv2d", "cudaMalloc(&p, n)",
                                       "/x/src/ops/cuda/conv.cu", 12), DUET_ENOMEM);
    expect_msg("conv2d: cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory) at "
               "src/ops/cuda/conv.cu:12");
}

static void test_status_classes(void **state) {
    (void)state;
    assert_int_equal(duet__cuda_status_code(cudaSuccess), DUET_OK);
    assert_int_equal(duet__cuda_status_code(cudaErrorMemoryAllocation), DUET_ENOMEM);
    assert_int_equal(duet__cuda_status_code(cudaErrorNotSupported), DUET_EUNSUPPORTED);
    assert_int_equal(duet__cuda_status_code(cudaErrorNoDevice), DUET_EDEVICE);
    assert_int_equal(duet__cuda_status_code(cudaErrorIllegalAddress), DUET_EDEVICE);
    assert_int_equal(duet__cublas_status_code(CUBLAS_STATUS_ALLOC_FAILED), DUET_ENOMEM);
    assert_int_equal(duet__cublas_status_code(CUBLAS_STATUS_EXECUTION_FAILED), DUET_EDEVICE);
    assert_int_equal(duet__cudnn_status_code(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
                     DUET_ENOMEM);
    assert_int_equal(duet__cudnn_status_code(CUDNN_STATUS_NOT_SUPPORTED), DUET_EUNSUPPORTED);
    assert_int_equal(duet__cudnn_status_code(CUDNN_STATUS_BAD_PARAM), DUET_EDEVICE);
    assert_int_equal(duet__cudnn_status_code(CUDNN_STATUS_EXECUTION_FAILED), DUET_EDEVICE);
    assert_int_equal(duet__nccl_status_code(ncclInvalidArgument), DUET_EINVAL);
    assert_int_equal(duet__nccl_status_code(ncclUnhandledCudaError), DUET_EDEVICE);
    assert_int_equal(duet__nccl_status_code(ncclRemoteError), DUET_EDEVICE);
}

/* duet info's GPU lines: versions, then the GPUs or "no GPU visible". */
static void test_info_lines(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    TU_OK(duet_cuda_info_print(f));
    fclose(f);
    assert_non_null(strstr(text, "  CUDA:       runtime "));
    assert_non_null(strstr(text, "  cuDNN:      "));
    assert_non_null(strstr(text, "  NCCL:       "));
    if (duet_cuda_device_count() == 0)
        assert_non_null(strstr(text, "  GPUs:       no GPU visible\n"));
    else
        assert_non_null(strstr(text, "  GPU 0:      cuda:0 "));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_name_op_call_and_place),
        cmocka_unit_test(test_status_classes),
        cmocka_unit_test(test_info_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
