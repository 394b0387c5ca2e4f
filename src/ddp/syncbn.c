/* SyncBatchNorm: every BatchNorm2d of a tree sums its per-channel batch
 * statistics over the ranks of a comm (duet_batch_norm2d calls the reduce
 * callback in forward and in backward), in forwards with grad mode on. */
#include "duet/autograd.h"
#include "duet/ddp.h"

static int allreduce_sum(void *ctx, float *buf, int64_t count) {
    if (count < 0) return duet__error(DUET_EINVAL, "SyncBatchNorm: negative count %lld", (long long)count);
    /* Without grad mode a training-mode forward is evaluation (test-time
     * batch statistics), which ranks run on different numbers of images:
     * this rank's sums alone, as one process would (duet/ddp.h). */
    if (!duet_grad_enabled()) return DUET_OK;
    int rc = duet_comm_allreduce(ctx, buf, (size_t)count, DUET_DTYPE_F32, DUET_REDUCE_SUM);
    if (rc != DUET_OK) duet__error_context(rc, "SyncBatchNorm");
    return rc;
}

int duet_convert_sync_batchnorm(duet_module *module, duet_comm *comm) {
    if (module == NULL || comm == NULL)
        return duet__error(DUET_EINVAL, "duet_convert_sync_batchnorm: NULL module or comm");
    if (duet_module_is(module, "BatchNorm2d"))
        DUET_TRY(duet_batch_norm2d_set_reduce(module, allreduce_sum, comm));
    for (size_t i = 0; i < duet_module_child_count(module); i++)
        DUET_TRY(duet_convert_sync_batchnorm(duet_module_child_at(module, i), comm));
    return DUET_OK;
}
