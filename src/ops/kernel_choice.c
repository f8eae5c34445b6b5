/* Which forward kernel an operator runs: its own choice (kernel_choose) where it has several. */
#include "ops/ops_internal.h"

kf_kernel *kf__op_kernel_for(kf_context *ctx, const kf_operator *op, const kf_shape *in,
                             const kf_op_params *p, kf_dtype dtype) {
    if (op->kernel_choose) {
        return op->kernel_choose(ctx, in, p, dtype);
    }
    return op->kernel_forward(in, p, dtype);
}
