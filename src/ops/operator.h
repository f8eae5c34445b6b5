/* The operator object (internal: the public header sees kf_operator as opaque and reads it
 * through kf_op_name, kf_op_class_of, kf_op_case_at, ...). Each operator file defines one
 * `const kf_operator kf__op_NAME` and registry.c lists it; a new field here (with zero meaning
 * "not provided") needs no edit in operators that do not use it.
 */
#ifndef KF_OPS_OPERATOR_H
#define KF_OPS_OPERATOR_H

#include "kfuse.h"

#include <stddef.h>

/* One parameter, declared once next to its operator: the language, kf_op_param_set, validation,
 * messages and kf_graph_format read it (registry.c). Position in the op's array is the position
 * the language takes it in. */
/* An input read in place through a strided view of the tensor bound for it (a view chain the
 * planner folds into the reader's index math instead of copying it: src/fuse/rules/strided.c).
 * Element (i_0, ..., i_{rank-1}) of the input, whose shape is dims, is element
 * offset + sum_k i_k strides[k] of the bound tensor. rank 0: the input is the bound tensor. */
typedef struct kf__strided {
    uint32_t rank;
    uint32_t dims[KF_MAX_DIMS];
    uint64_t strides[KF_MAX_DIMS];
    uint64_t offset;
} kf__strided;

typedef struct kf__param {
    const char *name; /* the keyword */
    const char *about;
    kf_param_type type;
    size_t offset;  /* the kf_op_params field it sets: float, bool (or int32_t for INT) */
    uint32_t given; /* its KF_PARAM_* bit */
    double default_value;
    double min, max; /* valid range, inclusive */
    bool min_exclusive;
} kf__param;

/* The field of kf_op_params a parameter sets and its given bit: KF__FIELD(alpha, ALPHA). */
#define KF__FIELD(FIELD, BIT) .offset = offsetof(kf_op_params, FIELD), .given = KF_PARAM_##BIT
/* The range of a float that may be any finite f32. */
#define KF__ANY_FLOAT .min = -3.4028234663852886e38, .max = 3.4028234663852886e38
/* A bool parameter (range 0..1, default false). */
#define KF__BOOL .type = KF_PARAM_TYPE_BOOL, .min = 0, .max = 1

/* One tensor input. An optional input is there when its bool field of kf_op_params is true. */
typedef struct kf__input {
    const char *name;
    bool optional;
    size_t present; /* optional: offset of the kf_op_params bool that says it is there */
} kf__input;

#define KF__OPTIONAL(FIELD) .optional = true, .present = offsetof(kf_op_params, FIELD)

/* .params / .param_count (and .inputs / .input_count) of an operator record from an array. */
#define KF__PARAMS(ARRAY)                                                                          \
    .params = (ARRAY), .param_count = (uint32_t)(sizeof(ARRAY) / sizeof(ARRAY)[0])
#define KF__INPUTS(ARRAY)                                                                          \
    .inputs = (ARRAY), .input_count = (uint32_t)(sizeof(ARRAY) / sizeof(ARRAY)[0])

/* The value of parameter d under p: the field when given or nonzero, else the default. */
double kf__param_value(const kf_op_params *p, const kf__param *d);
/* The description of op's parameter `name`, or NULL. */
const kf__param *kf__param_find(const kf_operator *op, const char *name);
/* Whether op under p is a view that swaps the last two of `rank` axes and keeps the others (a
 * permute [0, .., r-1, r-2]): what a matmul's transpose flag reads in place (view.c). */
bool kf__op_swaps_last_two(const kf_operator *op, const kf_op_params *p, uint32_t rank);
/* The row-major layout of a tensor of shape s (kf__strided). */
void kf__strided_contiguous(const kf_shape *s, kf__strided *l);
/* A view operator's output read through its input's layout *l (in[0]'s shape): *l becomes the
 * output's layout. False, *l unchanged, where the view is not a strided view of its input
 * (concat, slice_grad, a reshape of a layout it cannot split without a copy). view.c. */
bool kf__view_strided(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                      kf__strided *l);
/* The classes op's index inputs address for input shapes `in` (kf_operator.index_classes). */
uint32_t kf__op_index_classes(const kf_operator *op, const kf_shape *in);
/* How input i and the output of op are stored when its kernels take `dtype` (the storage type of
 * its other inputs): index inputs i32, f32_inputs and an f32_output f32, the rest the dtype. */
kf_dtype kf__op_input_dtype(const kf_operator *op, uint32_t i, kf_dtype dtype);
kf_dtype kf__op_output_dtype(const kf_operator *op, kf_dtype dtype);
/* Whether input `index` of op's described inputs is there under p; marks it there. */
bool kf__input_present(const kf_operator *op, uint32_t index, const kf_op_params *p);
void kf__input_set_present(const kf_operator *op, uint32_t index, kf_op_params *p);

/* Element-wise ops express themselves as IR so any fused kernel can inline them:
 * inputs[i] is the value of input i at this element; returns the output value. */
typedef kf_val (*kf_op_expr_fn)(kf_kernel *k, const kf_val *inputs, const kf_op_params *p);
/* The gradient of the output w.r.t. input `which`, times grad_out, at this element. */
typedef kf_val (*kf_op_expr_backward_fn)(kf_kernel *k, const kf_val *inputs, kf_val out,
                                         kf_val grad_out, uint32_t which, const kf_op_params *p);

struct kf_operator {
    const char *name;  /* "matmul", "gelu", ... */
    const char *about; /* one line for --help and tables */
    kf_op_class op_class;
    uint32_t arity; /* tensor inputs, when `inputs` does not describe them */
    /* The tensor inputs (NULL: `arity` required inputs named a, b, c, d). */
    const kf__input *inputs;
    uint32_t input_count;
    /* The parameters, in positional order (NULL: none). */
    const kf__param *params;
    uint32_t param_count;
    /* Output shape from input shapes; KF_ERROR_SHAPE with a message naming the shapes. */
    kf_status (*shape)(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                       size_t msg_size);
    /* The specification: plain loops, float64 accumulation, readable first. */
    kf_status (*spec_forward)(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out);
    /* grad_in[i] (shaped as in[i], allocated by the caller) from inputs, output and grad_out. */
    kf_status (*spec_backward)(const kf_tensor *const *in, const kf_tensor *out,
                               const kf_tensor *grad_out, const kf_op_params *p,
                               kf_tensor *const *grad_in);
    /* Forward kernel for these shapes; bindings: the inputs in order, then "out". Every op hands
     * each output element to kf_kernel_yield (its store phase), and records its grid on the
     * kernel. NULL when the shapes do not fit (check them with `shape` first) or out of memory. */
    kf_kernel *(*kernel_forward)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype);
    /* The kernel the op runs for these shapes on ctx, where it has several (matmul: tiled,
     * register-blocked, a tile kf_matmul_tune measured, subgroup matrices): the one place that
     * choice is made, for plans, kf_op_run_forward and kf_op_verify alike (kf__op_kernel_for).
     * Same bindings, store phase and grid convention as kernel_forward. NULL: kernel_forward is
     * the only kernel. */
    kf_kernel *(*kernel_choose)(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype);
    /* Backward kernel producing grad of input `which`; bindings: the inputs in order, "out"
     * (the forward output), "grad_out", then "grad_in". */
    kf_kernel *(*kernel_backward)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                  uint32_t which);
    /* The op's kernel that also writes, as a second output, the column sums of input `which`
     * (its sum over every axis but the last: sum_leading), where the kernel reads that input
     * over all of its rows anyway (dW = X^T dY reads every row of dY: cuBLASLt's BGRADB; a
     * norm's weight gradient walks the rows of dy). Bindings: the inputs in order, then the sums
     * (read_write), then "out"; the op's output goes through kf_kernel_yield as in
     * kernel_forward, and the grid is recorded. NULL where it cannot for these shapes and params
     * (the planner then keeps sum_leading a kernel of its own). NULL hook: never. */
    kf_kernel *(*kernel_column_sums)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                     uint32_t which);
    /* Forward and backward in one kernel (llm.c's fused classifier): this op's output, yielded as
     * in kernel_forward, and, as a second output, its backward operator's result for input
     * `which` (kf_operator.grad_of) when dy, the gradient of the output, is the constant `dy`
     * (autodiff's seed). Bindings: the inputs in order, the gradient (read_write), then "out".
     * NULL where the op declines for these shapes. NULL hook: never. */
    kf_kernel *(*kernel_with_grad)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                   uint32_t which, float dy);
    /* An operator of the same inputs and params whose result this op's kernel computes on the
     * way (attention's row statistics: attention_lse), and the op's kernel that writes that
     * result too, as a second output: bindings the inputs in order, the companion's result
     * (read_write), then "out"; the op's own output goes through kf_kernel_yield as in
     * kernel_forward, and the grid is recorded. The planner makes a lone group of the companion
     * a side of this op's group (src/fuse/rules/companion.c). NULL (either): never. */
    const kf_operator *companion;
    kf_kernel *(*kernel_with_companion)(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype);
    /* The kernel kernel_choose (with_companion: kernel_with_companion) would run, reading each
     * input i in strided_inputs through layouts[i] (rank 0: contiguous) from the tensor bound
     * there, a view's source: the GPT's q = slice |> reshape |> permute of the qkv product,
     * read in place (src/fuse/rules/strided.c). NULL where that kernel cannot read them (it
     * loads straight into subgroup matrices) or out of memory: the planner then copies the
     * view. NULL hook: never. */
    kf_kernel *(*kernel_strided)(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                 kf_dtype dtype, const kf__strided *layouts, bool with_companion);
    uint32_t strided_inputs; /* bit i: kernel_strided may read input i strided */
    /* Bit i set: input i is read for its shape only, never its values (broadcast_to's and
     * sum_to's `like`), so a value computed from nothing else is a constant. */
    uint32_t shape_inputs;
    kf_op_expr_fn expr;                   /* element-wise ops only */
    kf_op_expr_backward_fn expr_backward; /* element-wise ops only */
    double tolerance_f32;                 /* max relative error accepted, documented at the op */
    double tolerance_f16;
    float input_lo, input_hi; /* the range verification draws inputs from (log: positive) */
    /* Workgroups to dispatch kernel_forward (which < 0) or kernel_backward(which) with. */
    void (*grid)(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]);
    /* Bit i set: input i holds integer class indices (cross_entropy labels): KF_DTYPE_I32 on the
     * GPU whatever the dtype, drawn in [0, last dim of input 0) by verification, no gradient. */
    uint32_t index_inputs;
    /* The number of classes the index inputs address (verification draws them below it): NULL,
     * the last dim of input 0 (cross_entropy's logits); embedding's: its table's rows. */
    uint32_t (*index_classes)(const kf_shape *in);
    /* Bit i set: input i is stored as f32 whatever the dtype the kernels take (attention's
     * packed row statistics, which f16 would round to 2^-11 of lse: a relative error of P of
     * that size); the dtype is the other inputs'. */
    uint32_t f32_inputs;
    /* The output is stored as f32 whatever the dtype of the inputs (attention_lse,
     * attention_grad_pack, attention_grad_prep: the statistics above). */
    bool f32_output;
    /* View operators (reshape, permute, slice, concat, slice_grad): output element `index` (a u32
     * value) is element `return value` of input `which`, an index always in bounds, where *take
     * (a bool value; {0}: always) says input `which` supplies it; an element no input takes is 0
     * (slice_grad outside the slice), and an input that supplies none returns {0} (slice_grad's
     * x, read for its shape). The planner reads views through their consumers' loads with it
     * (src/fuse/emit.c) and their kernels gather with it. */
    kf_val (*view_index)(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val index,
                         uint32_t which, kf_val *take);
    /* A view that keeps the linear order (reshape): output element i is input element i, so it
     * can alias its input's buffer and join any element-wise group. */
    bool view_linear;
    /* Bit i set: input i is drawn away from zero (div's denominator): |x| in [m/4, m) with a
     * random sign, m = max(|input_lo|, |input_hi|), instead of uniformly in [input_lo, input_hi).
     */
    uint32_t nonzero_inputs;
    const kf_op_case *cases; /* the verification table: edge shapes, primes, a large case */
    uint32_t case_count;
    /* Backward operators (gelu_grad, softmax_grad, rmsnorm_grad_x, ...; docs/training.md): the
     * forward operator whose gradient this one computes, and the input it is taken for. Their
     * inputs are grad_of's inputs (for the same params) followed by dy, the gradient of grad_of's
     * output; they yield d(sum(dy * grad_of(inputs))) / d(input grad_input), shaped as that input
     * (element-wise ones: as the forward output, before any broadcast is summed away). They have
     * no kernel_backward; kf_op_check_gradient checks their spec against central differences of
     * grad_of's spec. NULL for forward operators. */
    const kf_operator *grad_of;
    uint32_t grad_input;
};

#endif
