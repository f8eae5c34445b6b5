/* Mutants in the IR (ir/mutate.h), without a GPU: every kind has sites in kfuse's own kernels,
 * each site gives a kernel whose WGSL differs, and the original is left as it was. */
#include "harness.h"

#include <string.h>

#include "ir/mutate.h"

static kf_kernel *op_kernel(const char *name, kf_shape a, kf_shape b) {
    kf_shape in[2] = {a, b};
    return kf_op_kernel_forward(kf_op_find(name), in, NULL, KF_DTYPE_F32);
}

KT_CPU_TEST(unit, mutants_change_the_kernel_and_only_the_copy) {
    kf_shape rows = {2, {5, 300}}, small = {2, {7, 13}};
    kf_shape a = {2, {33, 17}}, b = {2, {17, 9}};
    kf_kernel *kernels[] = {op_kernel("softmax", rows, rows), op_kernel("gelu", small, small),
                            op_kernel("matmul", a, b), op_kernel("max", rows, rows),
                            op_kernel("layernorm", rows, rows)};
    uint32_t count = sizeof kernels / sizeof kernels[0];
    uint32_t kinds_seen[KF__MUTANT_KIND_COUNT] = {0};
    bool ok = true;
    for (uint32_t i = 0; i < count && ok; i++) {
        ok = kernels[i] && kf_kernel_status(kernels[i]) == KF_OK;
        KT_CHECK(ok, "kernel %u builds", i);
        char *before = kf_kernel_emit_wgsl(kernels[i]);
        uint32_t sites[KF__MUTANT_KIND_COUNT];
        kf__mutant_sites(kernels[i], sites);
        for (uint32_t kind = 0; kind < KF__MUTANT_KIND_COUNT && ok; kind++) {
            kinds_seen[kind] += sites[kind];
            for (uint32_t s = 0; s < sites[kind] && s < 24 && ok; s++) {
                kf_kernel *m = kf__mutant_apply(kernels[i], (kf__mutant_kind)kind, s);
                char *text = m ? kf_kernel_emit_wgsl(m) : NULL;
                ok = text && before && strcmp(text, before) != 0;
                if (!ok) {
                    kt_fail(__FILE__, __LINE__, "%s: %s site %u: %s", kf_kernel_name(kernels[i]),
                            kf__mutant_kind_str((kf__mutant_kind)kind), s,
                            !m      ? "no mutant"
                            : !text ? kf_kernel_error(m)
                                    : "the WGSL did not change");
                }
                kf_free(text);
                kf_kernel_destroy(m);
            }
            ok = ok && kf__mutant_apply(kernels[i], (kf__mutant_kind)kind, sites[kind]) == NULL;
            if (!ok) {
                kt_fail(__FILE__, __LINE__, "a site past the last gives no mutant");
            }
        }
        char *after = kf_kernel_emit_wgsl(kernels[i]);
        ok = ok && before && after && !strcmp(before, after);
        if (!ok && before && after) {
            kt_fail(__FILE__, __LINE__, "%s changed under its mutants", kf_kernel_name(kernels[i]));
        }
        kf_free(before);
        kf_free(after);
    }
    for (uint32_t i = 0; i < count; i++) {
        kf_kernel_destroy(kernels[i]);
    }
    for (uint32_t kind = 0; ok && kind < KF__MUTANT_KIND_COUNT; kind++) {
        KT_CHECK(kinds_seen[kind] > 0, "some kernel has a %s site",
                 kf__mutant_kind_str((kf__mutant_kind)kind));
    }
}
