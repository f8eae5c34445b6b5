/* The named example kernels (kfuse wgsl NAME): each compiles in Dawn, and each gives the same
 * numbers on the GPU, in the interpreter and against a float64 reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/examples.h"
#include "ir_testing.h"

static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* Element counts: one, a prime, a non-multiple of the workgroup, several workgroups. */
static const uint64_t sizes[] = {1, 251, 1000, 4099};

KT_TEST(unit, ir_example_demo_chain_gpu_interp_reference) {
    KT_NEED_GPU(ctx);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        kf_kernel *k = kf__example_build("demo-chain");
        KT_CHECK(k && kf_kernel_status(k) == KF_OK, "demo-chain: %s", kf_kernel_error(k));
        float *x = malloc(n * 4), *ref = malloc(n * 4);
        float *gpu = malloc(n * 4), *cpu = malloc(n * 4);
        kt_fill_f32(x, n, -3.0f, 3.0f);
        for (uint64_t i = 0; i < n; i++) {
            double a = 2.0 * x[i] + 1.0;
            ref[i] = (float)gelu_tanh(a > 0 ? a : 0);
        }
        kt_fill_poison(gpu, n * 4);
        kt_fill_poison(cpu, n * 4);
        kf_host_buffer gb[2] = {{x, n * 4}, {gpu, n * 4}};
        kf_host_buffer cb[2] = {{x, n * 4}, {cpu, n * 4}};
        kt_launch l = {.elements = n};
        bool ok = kt_ir_gpu(ctx, k, gb, 2, &l) && kt_ir_interp(k, cb, 2, &l) &&
                  kt_close_f32(cpu, ref, n, 1e-5, 1e-3, "interpreter vs float64") &&
                  kt_close_f32(gpu, cpu, n, 1e-5, 1e-3, "GPU vs interpreter");
        free(x);
        free(ref);
        free(gpu);
        free(cpu);
        kf_kernel_destroy(k);
        KT_CHECK(ok, "demo-chain, %llu elements", (unsigned long long)n);
    }
}

KT_TEST(unit, ir_every_example_compiles) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    for (uint32_t i = 0; i < kf__example_count(); i++) {
        const kf__example *e = kf__example_at(i);
        if (!strcmp(e->name, "subgroup-sum") && !info.has_subgroups) {
            printf("    note: %s skipped: the device has no subgroups\n", e->name);
            continue;
        }
        kf_kernel *k = e->build();
        KT_CHECK(k && kf_kernel_status(k) == KF_OK, "%s: %s", e->name, kf_kernel_error(k));
        char *wgsl = kf_kernel_emit_wgsl(k);
        KT_CHECK(wgsl, "%s: %s", e->name, kf_kernel_error(k));
        kf_binding_kind kinds[16];
        uint32_t nb = kf_kernel_binding_kinds(k, kinds, 16);
        kf_constant elems = {"kf_elements", 1};
        kf_pipeline_desc pd = {0};
        pd.wgsl = wgsl;
        pd.bindings = kinds;
        pd.binding_count = nb;
        pd.constants = &elems;
        pd.constant_count = kf_kernel_input_type(k).scalar != KF_SCALAR_VOID ? 1 : 0;
        kf_pipeline *p = NULL;
        kf_status st = kf_pipeline_get(ctx, &pd, &p);
        if (st != KF_OK) {
            kt_fail(__FILE__, __LINE__, "%s does not compile: %s\n%s", e->name,
                    kf_context_last_error(ctx), wgsl);
        }
        kf_free(wgsl);
        kf_kernel_destroy(k);
    }
}

/* reduce-sum: one sum per workgroup of 256, the last workgroup partial. */
KT_TEST(unit, ir_example_reduce_sum_gpu_interp_reference) {
    KT_NEED_GPU(ctx);
    static const uint64_t ns[] = {1, 255, 256, 257, 3001};
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        uint64_t n = ns[s];
        uint32_t groups = (uint32_t)((n + 255) / 256);
        kf_kernel *k = kf__example_build("reduce-sum");
        float *x = malloc(n * 4);
        float *gpu = malloc(groups * 4), *cpu = malloc(groups * 4), *ref = malloc(groups * 4);
        kt_fill_f32(x, n, -1.0f, 1.0f);
        for (uint32_t g = 0; g < groups; g++) {
            double sum = 0;
            for (uint64_t i = (uint64_t)g * 256; i < n && i < (uint64_t)g * 256 + 256; i++) {
                sum += x[i];
            }
            ref[g] = (float)sum;
        }
        kt_fill_poison(gpu, groups * 4);
        kt_fill_poison(cpu, groups * 4);
        kf_host_buffer gb[2] = {{x, n * 4}, {gpu, groups * 4}};
        kf_host_buffer cb[2] = {{x, n * 4}, {cpu, groups * 4}};
        kt_launch l = {.groups = {groups, 1, 1}};
        bool ok = kt_ir_gpu(ctx, k, gb, 2, &l) && kt_ir_interp(k, cb, 2, &l) &&
                  kt_close_f32(cpu, ref, groups, 1e-5, 1.0, "interpreter vs float64") &&
                  kt_close_f32(gpu, cpu, groups, 1e-6, 1.0, "GPU vs interpreter");
        free(x);
        free(gpu);
        free(cpu);
        free(ref);
        kf_kernel_destroy(k);
        KT_CHECK(ok, "reduce-sum of %llu", (unsigned long long)n);
    }
}
