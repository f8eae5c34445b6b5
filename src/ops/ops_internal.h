/* Shared internals of the verified operators (src/ops): the operator objects the registry lists,
 * shape and broadcast helpers, dtype-aware loads and stores for kernels, the generic element-wise
 * kernel and spec builders, and small tensor helpers for specs.
 *
 * Conventions every operator follows (the registry and kf_op_verify rely on them):
 *   - kernel_forward: bindings are the inputs in order (read), then "out", which the IR appends for
 *     a kernel with an output type; the kernel hands each output element to kf_kernel_yield.
 *     Inputs and out are stored as the dtype (f32 or f16; index inputs as i32); compute is f32.
 *   - kernel_backward(which): output type void; bindings are the inputs in order (read), "out"
 *     (the forward output, read), "grad_out" (read), then "grad_in" (read_write), written with
 *     kf_store. Every binding is declared even when the kernel does not read it, so one buffer
 *     list fits every backward kernel of an op.
 *   - grid(in, p, which, groups): the workgroups kernel_forward (which < 0) or kernel_backward
 *     (which) is dispatched with, for exactly the kernel the builder returns for these shapes.
 *   - Shapes are baked into kernels as literals: kernels are specialized to shapes.
 *   - A "row reduction" views a tensor as rows x cols, cols = the last dim.
 */
#ifndef KF_OPS_INTERNAL_H
#define KF_OPS_INTERNAL_H

#include "core/core.h"
#include "kfuse.h"
#include "ops/operator.h"

#include <stdarg.h>

/* ---------------------------------------------------------------------------------------- */
/* The operator objects (one per registry entry)                                            */
/* ---------------------------------------------------------------------------------------- */

/* every kf__op_NAME of the registry (ops/op_list.h: one line per operator) */
#define KF__OP(NAME) extern const kf_operator kf__op_##NAME;
#include "ops/op_list.h"
#undef KF__OP

/* ---------------------------------------------------------------------------------------- */
/* Messages and shapes                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* The shape and broadcast helpers are core's (core/core.h). */

/* ---------------------------------------------------------------------------------------- */
/* Kernel helpers: dtypes, grids                                                            */
/* ---------------------------------------------------------------------------------------- */

#define KF__WORKGROUP 256u /* the 1-D workgroup size of element-wise and helper kernels */

/* The storage element type of a dtype: f32, f16 or i32. */
kf_type kf__dtype_type(kf_dtype dtype);
/* Declares a storage binding of the dtype's element type. */
kf_binding kf__bind(kf_kernel *k, const char *name, kf_dtype dtype, kf_access access);
/* b[index] as f32 (f16 is widened; i32 is converted). */
kf_val kf__load_f32(kf_kernel *k, kf_binding b, kf_val index, kf_dtype dtype);
/* b[index] = value (an f32), narrowed to the dtype. */
void kf__store_f32(kf_kernel *k, kf_binding b, kf_val index, kf_val value, kf_dtype dtype);
/* kf_kernel_yield of an f32 value, narrowed to the dtype (the kernel's output type). */
void kf__yield_f32(kf_kernel *k, kf_val value, kf_val index, kf_dtype dtype);
/* A backward kernel's result: kf__store_f32 into grad_in (the kernel_backward convention), or,
 * when grad_in is the invalid handle (a backward operator's kernel), kf__yield_f32: its store
 * phase, so epilogues fuse into it. */
void kf__store_or_yield(kf_kernel *k, kf_binding grad_in, kf_val index, kf_val value,
                        kf_dtype dtype);
/* The index in the bound tensor of element (row, col) of an input read through l (rank >= 1),
 * row counting over all of its dims but the last (row-major), col along the last. */
kf_val kf__strided_at(kf_kernel *k, const kf__strided *l, kf_val row, kf_val col);
/* Whether some layouts[i] (of count) is a strided view: rank > 0. */
bool kf__strided_any(const kf__strided *layouts, uint32_t count);
/* A u32 literal. */
kf_val kf__u32(kf_kernel *k, uint64_t v);
/* groups for `invocations` threads in workgroups of `workgroup` (1-D; the runtime folds > 65535).
 */
void kf__grid_1d(uint64_t invocations, uint32_t workgroup, uint32_t groups[3]);
/* A kernel of `invocations` threads in 1-D workgroups of KF__WORKGROUP, its grid set: named
 * `name`, yielding `output` (void: no store phase, it writes with kf_store). NULL when out of
 * memory. Bindings and the body are the caller's (kf__each_element opens the usual body). */
kf_kernel *kf__kernel_1d(const char *name, kf_type output, uint64_t invocations);
/* Opens the body of a kernel of one invocation per element of n: `let NAME = <global linear
 * index>; if (NAME < n) {`, returning NAME's value; the caller closes the if with kf_end. */
kf_val kf__each_element(kf_kernel *k, const char *name, uint64_t n);

/* The forward kernel op runs for these shapes on ctx: op->kernel_choose where the op has one,
 * else op->kernel_forward (kernel_choice.c). Plans and verification both build through it. */
kf_kernel *kf__op_kernel_for(kf_context *ctx, const kf_operator *op, const kf_shape *in,
                             const kf_op_params *p, kf_dtype dtype);
/* Declares the binding lengths of op's forward kernel k (inputs of shapes `in`, then out) with
 * kf_kernel_set_binding_length, for its in-bounds proof (kernel_lengths.c).
 * KF_ERROR_INVALID_ARGUMENT when k's bindings are not the inputs then out. */
kf_status kf__op_kernel_lengths(kf_kernel *k, const kf_operator *op, const kf_shape *in,
                                const kf_op_params *p, kf_dtype dtype);

/* ---------------------------------------------------------------------------------------- */
/* Generic element-wise operators                                                           */
/* ---------------------------------------------------------------------------------------- */

/* The element-wise forward kernel of op (a producer: loads each input at its broadcast index,
 * op->expr in f32, yields). Bindings "a", "b", ... then "out". NULL only when out of memory. */
kf_kernel *kf__ew_kernel_forward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                 kf_dtype dtype);
/* The element-wise backward kernel for input `which`: grad_in = op->expr_backward(...) per
 * element; for a broadcast input, summed over the broadcast axes (a bias gets column sums), one
 * workgroup per grad_in element with a tree reduction in workgroup memory. */
kf_kernel *kf__ew_kernel_backward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                  kf_dtype dtype, uint32_t which);
/* The grid for either of the two kernels above (which < 0: forward), for `arity` inputs. */
void kf__ew_grid(const kf_shape *in, uint32_t arity, int32_t which, uint32_t groups[3]);

/* Scalar specification of an element-wise op, in float64: y = f(x[0], x[1], ...). */
typedef double (*kf__ew_scalar_fn)(const double *x, const kf_op_params *p);
/* d y / d x[which] at x (y is f(x), given for ops whose derivative reads it). */
typedef double (*kf__ew_scalar_grad_fn)(const double *x, double y, uint32_t which,
                                        const kf_op_params *p);
/* spec_forward / spec_backward of an element-wise op from its scalar functions, with the same
 * broadcasting as the kernels; a broadcast input's gradient is summed in float64. */
kf_status kf__ew_spec_forward(kf__ew_scalar_fn f, uint32_t arity, const kf_tensor *const *in,
                              const kf_op_params *p, kf_tensor *out);
kf_status kf__ew_spec_backward(kf__ew_scalar_grad_fn df, uint32_t arity, const kf_tensor *const *in,
                               const kf_tensor *out, const kf_tensor *grad_out,
                               const kf_op_params *p, kf_tensor *const *grad_in);

/* The glue of an element-wise op NAME of ARITY inputs, from its four functions NAME##_f (double
 * spec), NAME##_df (its derivative), NAME##_expr and NAME##_expr_backward (f32 IR): shape rule,
 * spec_forward/backward and kernel_forward/backward wrappers, for KF__EW_FIELDS(NAME) to list in
 * the operator object `kf__op_##NAME`. */
#define KF__EW_GLUE(NAME, ARITY)                                                                   \
    static kf_status NAME##_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,        \
                                  char *msg, size_t msg_size) {                                    \
        (void)p;                                                                                   \
        return kf__broadcast_shape(in, ARITY, #NAME, out, msg, msg_size);                          \
    }                                                                                              \
    static kf_status NAME##_spec_forward(const kf_tensor *const *in, const kf_op_params *p,        \
                                         kf_tensor *out) {                                         \
        return kf__ew_spec_forward(NAME##_f, ARITY, in, p, out);                                   \
    }                                                                                              \
    static kf_status NAME##_spec_backward(const kf_tensor *const *in, const kf_tensor *out,        \
                                          const kf_tensor *grad_out, const kf_op_params *p,        \
                                          kf_tensor *const *grad_in) {                             \
        return kf__ew_spec_backward(NAME##_df, ARITY, in, out, grad_out, p, grad_in);              \
    }                                                                                              \
    static kf_kernel *NAME##_kernel_forward(const kf_shape *in, const kf_op_params *p,             \
                                            kf_dtype dtype) {                                      \
        return kf__ew_kernel_forward(&kf__op_##NAME, in, p, dtype);                                \
    }                                                                                              \
    static kf_kernel *NAME##_kernel_backward(const kf_shape *in, const kf_op_params *p,            \
                                             kf_dtype dtype, uint32_t which) {                     \
        return kf__ew_kernel_backward(&kf__op_##NAME, in, p, dtype, which);                        \
    }                                                                                              \
    static void NAME##_grid(const kf_shape *in, const kf_op_params *p, int32_t which,              \
                            uint32_t groups[3]) {                                                  \
        (void)p;                                                                                   \
        kf__ew_grid(in, ARITY, which, groups);                                                     \
    }

#define KF__EW_FIELDS(NAME)                                                                        \
    .op_class = KF_OP_CLASS_ELEMENTWISE, .shape = NAME##_shape,                                    \
    .spec_forward = NAME##_spec_forward, .spec_backward = NAME##_spec_backward,                    \
    .kernel_forward = NAME##_kernel_forward, .kernel_backward = NAME##_kernel_backward,            \
    .expr = NAME##_expr, .expr_backward = NAME##_expr_backward, .grid = NAME##_grid

/* NAME##_shape and NAME##_spec of the backward operator kf__op_##NAME: the rule and the spec
 * every backward operator shares (kf__grad_shape, kf__grad_spec_forward, declared below). */
#define KF__GRAD_GLUE(NAME)                                                                        \
    static kf_status NAME##_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,        \
                                  char *msg, size_t msg_size) {                                    \
        return kf__grad_shape(&kf__op_##NAME, in, p, out, msg, msg_size);                          \
    }                                                                                              \
    static kf_status NAME##_spec(const kf_tensor *const *in, const kf_op_params *p,                \
                                 kf_tensor *out) {                                                 \
        return kf__grad_spec_forward(&kf__op_##NAME, in, p, out);                                  \
    }

/* The glue of NAME, the element-wise backward operator of FWD (an element-wise operator of ARITY
 * inputs) for input WHICH: NAME##_expr (FWD's expr_backward at the element, dy its last input),
 * shape rule, spec, kernel and grid, for the record kf__op_##NAME to list. NEEDS_Y: FWD's
 * expr_backward reads the forward value (sigmoid, tanh, exp, sqrt, reciprocal), recomputed here.
 * Used by elementwise_backward.c and by operator files with their own (swiglu.c). */
#define KF__EW_GRAD_GLUE(NAME, FWD, WHICH, ARITY, NEEDS_Y)                                         \
    static kf_val NAME##_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {              \
        const kf_operator *f = &kf__op_##FWD;                                                      \
        kf_val y = NEEDS_Y ? f->expr(k, x, p) : x[0]; /* unread unless NEEDS_Y */                  \
        return f->expr_backward(k, x, y, x[ARITY], WHICH, p);                                      \
    }                                                                                              \
    KF__GRAD_GLUE(NAME)                                                                            \
    static kf_kernel *NAME##_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {   \
        return kf__ew_kernel_forward(&kf__op_##NAME, in, p, dtype);                                \
    }                                                                                              \
    static void NAME##_grid(const kf_shape *in, const kf_op_params *p, int32_t which,              \
                            uint32_t groups[3]) {                                                  \
        (void)p, (void)which;                                                                      \
        kf__ew_grid(in, ARITY + 1, -1, groups);                                                    \
    }

/* ---------------------------------------------------------------------------------------- */
/* Backward operators (backward.c and the *_backward.c files)                               */
/* ---------------------------------------------------------------------------------------- */

/* The backward kernels of the forward operators, built as backward operators' forward kernels:
 * the forward op's inputs, then "dy"; the gradient is yielded. */
enum { KF__REDUCE_SUM = 0, KF__REDUCE_MEAN, KF__REDUCE_MAX };
kf_kernel *kf__reduce_grad_kernel(const char *name, uint32_t kind, const kf_shape *x,
                                  kf_dtype dtype);
kf_kernel *kf__softmax_grad_kernel(const char *name, bool log_form, const kf_shape *x,
                                   kf_dtype dtype);
/* rmsnorm (center false) or layernorm: dx, or with `weight` dweight; in: x, [w], [b], dy. */
kf_kernel *kf__norm_grad_kernel(bool center, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype, bool weight);
kf_kernel *kf__cross_entropy_grad_kernel(const kf_shape *in, kf_dtype dtype);
/* The most logits cross_entropy's loss-and-gradient kernel (one workgroup: kernel_with_grad)
 * takes; past it the planner keeps the parallel gradient kernel. */
#define KF__CLASSIFIER_MAX_LOGITS (1u << 16)
/* The NAME_grad_w kernel (in: x, w, [b], dy) that also stores the column sums of dy into a
 * binding "dy_sums" declared after the inputs: the bias's gradient from the same loads. */
kf_kernel *kf__norm_grad_w_with_dy_sums(bool center, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype);
/* A rank-2 matmul that also stores the column sums of input `which` where that input's rows are
 * the product's K axis (b read plainly, or a read transposed): the bias's gradient when it is
 * dY, from the tiles it loads (src/ops/column_sums.c). Bindings a, b, the sums, then what
 * composition adds and "out". NULL for other params or shapes. */
kf_kernel *kf__matmul_column_sums_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                         uint32_t which);

/* The shape rule every backward operator shares: in[0..n) must fit grad_of (n its arity for p),
 * in[n] (dy) must have grad_of's output shape; out is in[grad_input]'s shape (element-wise
 * grad_of: the output's shape). Messages name op. */
kf_status kf__grad_shape(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                         kf_shape *out, char *msg, size_t msg_size);
/* The spec every backward operator shares: grad_of's spec_forward and spec_backward on the same
 * inputs (float64 inside), keeping the gradient of input grad_input. An element-wise grad_of
 * sees its inputs broadcast to the output's shape first, so nothing is summed. */
kf_status kf__grad_spec_forward(const kf_operator *op, const kf_tensor *const *in,
                                const kf_op_params *p, kf_tensor *out);
/* grad_of's arity for p, plus one (dy). */
uint32_t kf__grad_arity(const kf_operator *op, const kf_op_params *p);

/* ---------------------------------------------------------------------------------------- */
/* Tensors                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* f16 conversion, kf__rel_error and the random stream are core's (core/core.h, core/half.h). */
/* The floor verification divides by: 1% of the rms of the finite expected values (1e-6 when
 * that is zero), so elements near zero are judged against the tensor's scale. */
double kf__verify_floor(const float *expected, uint64_t n);
/* Makes a CPU copy of an input see what ctx's device will see: when t (held as dtype) has
 * subnormal values and the device reads subnormal operands of that dtype as zero
 * (kf_context_float_behaviour, measured only then), they become signed zeros. So a spec is not
 * held to numbers the device never had (src/ops/float_probe.c). */
kf_status kf__match_device_subnormals(kf_context *ctx, kf_dtype dtype, kf_tensor *t);

/* Shape literals for the operators' verification tables (kf_op_case.shapes). */
#define SHAPE0                                                                                     \
    {                                                                                              \
        0, {                                                                                       \
            0, 0, 0, 0                                                                             \
        }                                                                                          \
    }
#define SHAPE1(a)                                                                                  \
    {                                                                                              \
        1, {                                                                                       \
            (a), 0, 0, 0                                                                           \
        }                                                                                          \
    }
#define SHAPE2(a, b)                                                                               \
    {                                                                                              \
        2, {                                                                                       \
            (a), (b), 0, 0                                                                         \
        }                                                                                          \
    }
#define SHAPE3(a, b, c)                                                                            \
    {                                                                                              \
        3, {                                                                                       \
            (a), (b), (c), 0                                                                       \
        }                                                                                          \
    }

#define SHAPE4(a, b, c, d)                                                                         \
    {                                                                                              \
        4, {                                                                                       \
            (a), (b), (c), (d)                                                                     \
        }                                                                                          \
    }

#endif
