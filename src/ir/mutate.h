/* Mutation testing: wrong kernels made on purpose, in the IR, to see that verification catches
 * them (docs/fusion.md, "Mutation testing").
 *
 * A mutant is one small change (a literal off by 1% or 10%, + for -, min for max, a load's index
 * off by one, a loop ending one step early, a barrier removed, the store phase's epilogue applied
 * twice) at one site of the kernels of one name. A context given a kernel transform
 * (kf__context_set_kernel_transform) hands it every kernel before emitting the WGSL its pipeline
 * is made from, so a mutant runs wherever that kernel runs (plans, kf_op_verify, kf_kernel_run)
 * and no source is edited. */
#ifndef KF_IR_MUTATE_H
#define KF_IR_MUTATE_H

#include "kfuse.h"
#include "runtime/runtime.h"

typedef enum kf__mutant_kind {
    KF__MUTANT_LITERAL_1 = 0, /* a nonzero float literal times 1.01 */
    KF__MUTANT_LITERAL_10,    /* ... times 1.1 */
    KF__MUTANT_ADD_SUB,       /* a + becomes -, or a - becomes + */
    KF__MUTANT_MIN_MAX,       /* min becomes max, or max min */
    KF__MUTANT_INDEX,         /* a load from storage or workgroup memory reads index + 1 */
    KF__MUTANT_LOOP_BOUND,    /* a for loop's last iteration dropped (end - step) */
    KF__MUTANT_BARRIER,       /* a workgroup barrier removed */
    KF__MUTANT_EPILOGUE,      /* the yielded value's expression applied again to its result */
    KF__MUTANT_KIND_COUNT
} kf__mutant_kind;

const char *kf__mutant_kind_str(kf__mutant_kind kind);

/* Sites of each kind in k (counts[KF__MUTANT_KIND_COUNT]). */
void kf__mutant_sites(const kf_kernel *k, uint32_t *counts);
/* A copy of k with site `site` of `kind` changed; NULL when k has no such site or out of memory.
 * The caller destroys it. */
kf_kernel *kf__mutant_apply(const kf_kernel *k, kf__mutant_kind kind, uint32_t site);

/* The per-context hook that hands kernels to a transform is the runtime's
 * (kf__context_set_kernel_transform, runtime/runtime.h). */
/* k's WGSL as ctx will run it (the transform's kernel where it gives one); caller kf_free()s. */
char *kf__kernel_emit_for(kf_context *ctx, kf_kernel *k);

#endif
