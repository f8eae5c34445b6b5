/* The binding lengths of an operator's forward kernel, from its input shapes: what the kernel's
 * in-bounds proof (src/ir/bounds.c) is made against where no launch gives buffers (kfuse wgsl,
 * the bounds tests). */
#include "ops/ops_internal.h"
#include "ops/operator.h"

kf_status kf__op_kernel_lengths(kf_kernel *k, const kf_operator *op, const kf_shape *in,
                                const kf_op_params *p, kf_dtype dtype) {
    uint32_t arity = kf_op_arity(op, p);
    kf_shape out;
    if (!k || arity > 4 || kf_kernel_binding_count(k) != arity + 1 ||
        kf_op_shape(op, in, p, &out, NULL, 0) != KF_OK) {
        return KF_ERROR_INVALID_ARGUMENT; /* not the forward convention: inputs, then out */
    }
    for (uint32_t i = 0; i <= arity; i++) {
        kf_binding_info info;
        if (kf_kernel_binding_info(k, i, &info) != KF_OK || info.kind == KF_BINDING_UNIFORM) {
            continue;
        }
        kf_dtype stored =
            i < arity ? kf__op_input_dtype(op, i, dtype) : kf__op_output_dtype(op, dtype);
        uint64_t elements = kf_shape_elements(i < arity ? &in[i] : &out);
        uint64_t bytes = elements * kf_dtype_size(stored);
        uint64_t stride = (info.elem.scalar == KF_SCALAR_F16 ? 2u : 4u) *
                          (info.elem.lanes == 3 ? 4u : (info.elem.lanes ? info.elem.lanes : 1u));
        kf_status st = kf_kernel_set_binding_length(k, i, bytes / stride);
        if (st != KF_OK) {
            return st;
        }
    }
    return KF_OK;
}
