/* Internals of the kernel IR (src/ir): the functions of the builder, the composer, the
 * interpreter and the in-bounds proof, over the IR's data (ir/ir_types.h, which the WGSL emitter
 * reads too). The IR calls the emitter through wgsl/wgsl.h.
 */
#ifndef KF_IR_INTERNAL_H
#define KF_IR_INTERNAL_H

#include "ir/ir_types.h"
#include "wgsl/wgsl.h"

#include <stdarg.h>

/* ---- kernel.c: storage, errors ---- */

/* Records the kernel's first error ("kernel 'name': " + message); later ones are ignored. */
void kf__fail(kf_kernel *k, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kf__failv(kf_kernel *k, kf_status status, const char *fmt, va_list ap);
/* Records a run-time (interpreter, launch) error message; returns status. */
kf_status kf__run_fail(kf_kernel *k, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool kf__ok(const kf_kernel *k);
/* A kernel with no error and an empty body; NULL when out of memory. Validates the desc. */
kf_kernel *kf__kernel_new(const kf_kernel_desc *desc);
uint32_t kf__string_add(kf_kernel *k, const char *s); /* 0 when out of memory (error set) */
uint32_t kf__node_new(kf_kernel *k, kf__ir_node_kind kind, kf_type type); /* 0 on failure */
uint32_t kf__stmt_new(kf_kernel *k, kf__stmt_kind kind);                  /* appended */
uint32_t kf__block_new(kf_kernel *k, uint32_t parent, uint32_t owner);
uint32_t kf__binding_new(kf_kernel *k, const char *name, kf_binding_kind kind, kf_type type,
                         kf__binding_role role);
uint32_t kf__var_new(kf_kernel *k, const char *name, kf_type type);
/* A subgroup-matrix variable (kf_sgmat_declare's storage); 0 on failure. */
uint32_t kf__sgmat_var_new(kf_kernel *k, const char *name, kf_sgmat_kind kind, kf_scalar component,
                           uint32_t cols, uint32_t rows);
uint32_t kf__shared_new(kf_kernel *k, const char *name, kf_type elem, uint32_t count);
uint32_t kf__override_new(kf_kernel *k, const char *name, kf_type type, bool has_default,
                          double value);
uint32_t kf__override_find(const kf_kernel *k, const char *name);
uint32_t kf__binding_find(const kf_kernel *k, const char *name);
/* Is block `inner` the same as or nested in `outer`? */
bool kf__block_within(const kf_kernel *k, uint32_t inner, uint32_t outer);
/* The deepest of two blocks on one chain. */
uint32_t kf__block_deeper(const kf_kernel *k, uint32_t a, uint32_t b);
/* A readable description of an unclosed block for messages ("if", "for 'i'", "while"). */
const char *kf__open_block_str(const kf_kernel *k, char *buf, size_t size);

/* ---- builder.c: internal constructors that skip the user-facing checks (the copier's) ---- */

/* A pure node with args; scope/depth/creation point computed. 0 on failure. */
uint32_t kf__pure(kf_kernel *k, kf__ir_node_kind kind, uint8_t op, kf_type type,
                  const uint32_t *args, uint32_t nargs);
/* A materialized node and its let in the current block. 0 on failure. */
uint32_t kf__materialize(kf_kernel *k, kf__ir_node_kind kind, uint8_t op, kf_type type,
                         const uint32_t *args, uint32_t nargs, uint32_t ref, const char *hint);
/* Statements in the current block; compound ones open their body (kf__open_*). */
uint32_t kf__emit_stmt(kf_kernel *k, kf__stmt_kind kind, uint32_t ref, uint32_t a, uint32_t b,
                       uint32_t c);
uint32_t kf__open_if(kf_kernel *k, uint32_t cond);
void kf__open_else(kf_kernel *k, uint32_t if_stmt);
uint32_t kf__open_for(kf_kernel *k, const char *name, uint32_t start, uint32_t end, uint32_t step);
uint32_t kf__open_loop(kf_kernel *k);
void kf__close(kf_kernel *k);
uint32_t kf__lit_bits(kf_kernel *k, kf_scalar s, uint32_t bits);
uint32_t kf__global_linear_node(kf_kernel *k);

/* ---- compose.c: copying bodies between kernels; lowering ---- */

/* The kernel as it is emitted and interpreted: a stage wrapped in its bounds-checked 1-D loop
 * over "in", every yield turned into a store to "out", and every pure value used more than once
 * named by a let placed where it is first available. The result is a producer without store
 * phase, its bindings in emission order. NULL when out of memory; otherwise check its status
 * (k's error is copied there, and an unclosed block is reported). */
kf_kernel *kf__kernel_prepare(const kf_kernel *k);

/* ---- types (type.c) ---- */
bool kf__type_valid(kf_type t);
bool kf__is_float(kf_scalar s);
bool kf__is_int(kf_scalar s);
uint32_t kf__type_words(kf_type t); /* 32-bit words the interpreter keeps per value */
bool kf__type_is_vec(kf_type t);
bool kf__type_is_array(kf_type t);
kf_type kf__type_elem(kf_type t); /* element of an array, lane type of a vector */
kf_type kf__type_with_scalar(kf_type t, kf_scalar s);
/* Bytes of one array element in a storage buffer (WGSL layout: vec3 is padded to vec4). */
uint32_t kf__type_stride(kf_type t);
uint32_t kf__type_size(kf_type t);  /* WGSL SizeOf */
uint32_t kf__type_align(kf_type t); /* WGSL AlignOf */

/* ---- interp.c: constant folding with the interpreter's semantics ---- */
typedef struct kf__folder kf__folder;
/* Evaluates pure nodes built only from literals (no inputs, builtins or overrides) of w. */
kf__folder *kf__folder_new(const kf_kernel *w);
/* The value of node id into out (kf__type_words(type) words); false if it cannot be folded. */
bool kf__folder_eval(kf__folder *f, uint32_t id, uint32_t *out);
void kf__folder_free(kf__folder *f);

/* ---- interp.c: the bounds check of a dispatch (KF_CHECK_BOUNDS, docs/runtime.md) ---- */
typedef struct kf__checker kf__checker;
typedef struct kf__check_result {
    uint64_t workgroups;   /* of the dispatch */
    uint64_t checked;      /* of them, run through the interpreter */
    uint64_t work;         /* statements run x invocations running them */
    uint64_t guards_fired; /* out-of-bounds accesses the emitted guards clamp or skip */
    uint64_t address_hash; /* of every access's memory and index, in order */
    bool repeat;           /* a data-independent launch checked before: not run again */
} kf__check_result;
/* A checker for the dispatches of kernel k (copied: k may die first) whose WGSL was emitted for
 * these lengths and grid (as kf__kernel_wgsl_for takes them), so it knows which accesses the
 * GPU guards; NULL when k has an error or memory runs out. */
kf__checker *kf__checker_new(const kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3]);
void kf__checker_free(kf__checker *c);
/* Does any index, subgroup lane or condition depend on data loaded from storage? If not, the
 * check may run on buffers of zeros (only sizes and uniforms matter). */
bool kf__checker_needs_data(const kf__checker *c);
/* Whether buffers of these sizes (bytes, one per binding in binding order) are at least as long
 * as the lengths c's kernel was proved for. */
bool kf__checker_fits(const kf__checker *c, const uint64_t *sizes, uint32_t count);
/* For tests: compute every value (true) or only what addresses depend on (false, the default
 * for a kernel whose addresses do not depend on data); forgets the launches already checked. */
void kf__checker_compute_all(kf__checker *c, bool all);
const char *kf__checker_kernel_name(const kf__checker *c);
/* What the last failed kf__checker_run found ("store to 'out' at index 96 is out of bounds (it
 * holds 96 elements of f32) (workgroup 1,0,0)"). */
const char *kf__checker_message(const kf__checker *c);
/* Interprets one dispatch (desc->groups as the GPU runs it, the pipeline's constants exactly:
 * an override with none takes its default) on host copies of its buffers, failing on any
 * out-of-bounds access. Runs the grid's first and last workgroups, then its other edge ones,
 * then the others spread over the grid, until `budget` work (0: no limit) is spent; res says
 * how many ran. */
kf_status kf__checker_run(kf__checker *c, const kf_interp_desc *desc, uint64_t budget,
                          kf__check_result *res);

/* ---- check.c: the pipelines of IR kernels get the bounds check ---- */
/* Pipeline p runs the WGSL of kernel k emitted for `lengths` and `grid` (as kf__kernel_wgsl_for
 * takes them): when p's context checks bounds, its dispatches are interpreted first (a copy of k
 * is kept). Kernels of one WGSL proved for other lengths or grids each add their checker (up to
 * 16), and a dispatch is checked by the latest whose lengths its buffers meet. A no-op when the
 * context does not check, has a kernel transform (mutation testing: its pipelines run mutants),
 * or p has a check of another kind. */
void kf__pipeline_attach_kernel(kf_pipeline *p, const kf_kernel *k, const uint64_t *lengths,
                                const uint32_t grid[3]);

/* ---- erf.c: the one erf approximation, as the WGSL helper computes it ---- */
float kf__erf_f32(float x);

/* ---- bounds.c: the in-bounds proof ---- */

/* Proves each storage, uniform-array and workgroup index of a prepared kernel in range, by
 * interval analysis (literals, builtins over the grid, loop bounds, min/max/clamp, guards such as
 * `if (i < n)` or `if (i < arrayLength(&x))`, variables as the join of what they are assigned).
 * `lengths` (indexed by the prepared kernel's binding id; NULL: each binding's declared length)
 * are the elements each binding holds at least, 0 where unknown; `grid` the workgroups the
 * kernel is dispatched with (NULL or zeros: the kernel's recorded grid, else unknown). Accesses
 * it cannot prove are GUARDED: the emitter clamps such a load into bounds and skips such a store.
 * NULL when out of memory. */
kf__bounds *kf__bounds_prove(const kf_kernel *prepared, const uint64_t *lengths,
                             const uint32_t grid[3], bool report);
void kf__bounds_free(kf__bounds *b);

/* ---- lower.c: prepare, prove, emit ---- */

/* The WGSL of k proved for these binding lengths (per binding in binding order; NULL: the
 * declared ones) and grid (NULL: the recorded one), cached on k by what it was proved for.
 * Sets k's error and returns NULL on failure. The result is owned by k. */
const char *kf__kernel_wgsl_for(kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3]);
/* k's prepared form and its proof, exactly as kf__kernel_wgsl_for(k, lengths, grid) emits it
 * (the bounds check runs it, so it knows which accesses the GPU guards); NULL (and *proof NULL)
 * on failure. The caller frees both. */
kf_kernel *kf__kernel_proved(kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3],
                             kf__bounds **proof);
/* The length declared for binding `index` (binding order) with kf_kernel_set_binding_length;
 * 0: none. */
uint64_t kf__kernel_binding_length(const kf_kernel *k, uint32_t index);

#endif
