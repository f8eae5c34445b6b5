/* The WGSL emitter's interface (src/wgsl). The emitter reads the kernel IR's types
 * (ir/ir_internal.h) and nothing of the IR calls into src/wgsl except through this header:
 * the IR lowers and proves a kernel (kf__kernel_prepare, kf__bounds_prove), then asks for its
 * text here. */
#ifndef KF_WGSL_H
#define KF_WGSL_H

#include "ir/ir_internal.h"

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

#endif
