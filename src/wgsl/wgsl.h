/* The WGSL emitter's interface (src/wgsl). The emitter reads the kernel IR's data
 * (ir/ir_types.h: types and inline readers only) and calls no function of src/ir; the IR calls
 * into src/wgsl only through this header: it lowers and proves a kernel (kf__kernel_prepare,
 * kf__bounds_prove), then asks for its text here, and spells its types and operators in
 * messages with the names below. */
#ifndef KF_WGSL_H
#define KF_WGSL_H

#include "ir/ir_types.h"

#include <stddef.h>

/* Emits a prepared kernel (kf__kernel_prepare) as WGSL; NULL when out of memory. `title` goes in
 * the header comment. `bounds` (kf__bounds_prove of the same prepared kernel; NULL: none) says
 * which accesses get a guard: a guarded load reads its index clamped into bounds
 * (`x[min(i, arrayLength(&x) - 1u)]`), a guarded store, workgroup store or subgroup-matrix move
 * is skipped when out of bounds (`if (i < arrayLength(&x)) { x[i] = v; }`). */
char *kf__wgsl_emit(const kf_kernel *prepared, const char *title, const kf__bounds *bounds);

/* A WGSL keyword, reserved word, predeclared type or builtin function name. */
bool kf__wgsl_reserved(const char *name);
/* A valid WGSL identifier that is not reserved (what an override's name must be). */
bool kf__wgsl_identifier_ok(const char *name);

/* WGSL's spellings (names.c), for the emitter and for the IR's messages. */
const char *kf__scalar_str(kf_scalar s);
const char *kf__op_str(kf_op op); /* "+", "<", "!" ... */
const char *kf__fn_str(kf_fn fn); /* "exp", "inverseSqrt", "erf" ... */
const char *kf__builtin_str(kf_builtin b);
const char *kf__subgroup_str(kf_subgroup_op op); /* "subgroupAdd" ... */
/* "vec4<f32>", "array<f16, 8>" into buf (kf_type_str's text); returns buf. */
const char *kf__wgsl_type_str(kf_type type, char *buf, size_t size);
/* "subgroup_matrix_result<f32, 16, 16>" into buf; returns buf. */
const char *kf__sgmat_type_str(const kf__var *v, char *buf, size_t size);

#endif
