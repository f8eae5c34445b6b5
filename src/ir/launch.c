/* Running a kernel on the GPU through the runtime's public API: emit (cached on the kernel),
 * compile (cached by the context), work out the grid and constants, dispatch. */
#include "ir/ir_internal.h"
#include "ir/mutate.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frees what kf_kernel_dispatch allocated that is not on its stack. */
static void release(uint64_t *lens, const uint64_t *lens_small, kf_constant *constants,
                    kf_binding_kind *kp, const kf_binding_kind *kinds) {
    if (lens != lens_small) {
        free(lens);
    }
    free(constants);
    if (kp != kinds) {
        free(kp);
    }
}

static bool is_stage(const kf_kernel *k) {
    return k->input.scalar != KF_SCALAR_VOID;
}

/* elements of binding i for a buffer of `bytes` */
static uint64_t binding_length(const kf_kernel *k, uint32_t i, uint64_t bytes) {
    kf_binding_info info;
    if (kf_kernel_binding_info(k, i, &info) != KF_OK || info.kind == KF_BINDING_UNIFORM) {
        return 0;
    }
    return bytes / kf__type_stride(info.elem);
}

kf_status kf_kernel_dispatch(kf_context *ctx, kf_kernel *k, const kf_kernel_launch *launch,
                             kf_dispatch *out) {
    if (!k) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_dispatch: k is NULL");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    k->run_error[0] = '\0';
    if (!ctx || !launch || !out) {
        return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                            "kf_kernel_dispatch: ctx, launch and out are required");
    }
    memset(out, 0, sizeof *out);
    if (k->status != KF_OK) {
        return k->status;
    }
    uint32_t nb = kf_kernel_binding_count(k);
    if (launch->buffer_count != nb || (nb && !launch->buffers)) {
        return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                            "kf_kernel_dispatch: the kernel has %u bindings, %u buffers given",
                            (unsigned)nb, (unsigned)launch->buffer_count);
    }
    for (uint32_t i = 0; i < nb; i++) {
        if (!launch->buffers[i]) {
            kf_binding_info info;
            kf_kernel_binding_info(k, i, &info);
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_dispatch: buffer %u ('%s') is NULL", (unsigned)i,
                                info.name);
        }
    }
    /* the element count: given, else the length of "in" (stages) or "out" (producers) */
    uint64_t elements = launch->elements;
    bool stage = is_stage(k);
    bool has_out = k->output.scalar != KF_SCALAR_VOID;
    if (!elements && stage) {
        elements = binding_length(k, 0, kf_buffer_size(launch->buffers[0]));
    } else if (!elements && has_out) {
        elements = binding_length(k, nb - 1, kf_buffer_size(launch->buffers[nb - 1]));
    }
    if (elements > UINT32_MAX) {
        return kf__run_fail(k, KF_ERROR_LIMIT,
                            "kf_kernel_dispatch: %llu elements (kernels index in u32)",
                            (unsigned long long)elements);
    }
    if (stage) {
        /* the GPU would drop out-of-range accesses silently; say so instead */
        uint64_t in_len = binding_length(k, 0, kf_buffer_size(launch->buffers[0]));
        uint64_t out_len =
            has_out ? binding_length(k, nb - 1, kf_buffer_size(launch->buffers[nb - 1])) : elements;
        if (in_len < elements || out_len < elements) {
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_dispatch: %llu elements, but 'in' holds %llu and "
                                "'out' %llu",
                                (unsigned long long)elements, (unsigned long long)in_len,
                                (unsigned long long)out_len);
        }
    }
    /* constants: the launch's, plus kf_elements for a stage */
    uint32_t nc = launch->constant_count;
    kf_constant *constants = calloc((size_t)nc + 1, sizeof *constants);
    if (!constants) {
        return kf__run_fail(k, KF_ERROR_OUT_OF_MEMORY, "kf_kernel_dispatch: out of memory");
    }
    bool elements_given = false;
    for (uint32_t i = 0; i < nc; i++) {
        const char *nm = launch->constants[i].name;
        if (!nm || (!kf__override_find(k, nm) && !(stage && !strcmp(nm, "kf_elements")))) {
            free(constants);
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_dispatch: constant '%s' is not an override of the "
                                "kernel",
                                nm ? nm : "(null)");
        }
        if (stage && !strcmp(nm, "kf_elements") && launch->constants[i].value > (double)elements) {
            free(constants);
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_dispatch: kf_elements = %.0f is more than the %llu "
                                "elements 'in' and 'out' were checked for",
                                launch->constants[i].value, (unsigned long long)elements);
        }
        elements_given = elements_given || !strcmp(nm, "kf_elements");
        constants[i] = launch->constants[i];
    }
    if (stage && !elements_given) {
        constants[nc].name = "kf_elements";
        constants[nc].value = (double)elements;
        nc++;
    }
    kf_binding_kind kinds[64];
    kf_binding_kind *kp = nb <= 64 ? kinds : calloc(nb, sizeof *kp);
    if (!kp) {
        free(constants);
        return kf__run_fail(k, KF_ERROR_OUT_OF_MEMORY, "kf_kernel_dispatch: out of memory");
    }
    kf_kernel_binding_kinds(k, kp, nb);
    /* The proof holds for buffers at least as long as declared; a binding with no declared
     * length is proved for the buffer given. */
    uint64_t lens_small[64];
    uint64_t *lens = nb <= 64 ? lens_small : calloc(nb, sizeof *lens);
    if (!lens) {
        release(lens, lens_small, constants, kp, kinds);
        return kf__run_fail(k, KF_ERROR_OUT_OF_MEMORY, "kf_kernel_dispatch: out of memory");
    }
    for (uint32_t i = 0; i < nb; i++) {
        uint64_t given = binding_length(k, i, kf_buffer_size(launch->buffers[i]));
        uint64_t declared = kf__kernel_binding_length(k, i);
        if (declared > given) {
            kf_binding_info info;
            kf_kernel_binding_info(k, i, &info);
            release(lens, lens_small, constants, kp, kinds);
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_dispatch: buffer %u ('%s') holds %llu elements; the "
                                "kernel is proved in bounds for %llu "
                                "(kf_kernel_set_binding_length)",
                                (unsigned)i, info.name, (unsigned long long)given,
                                (unsigned long long)declared);
        }
        lens[i] = declared ? declared : given;
    }
    bool zero = !launch->groups[0] && !launch->groups[1] && !launch->groups[2];
    uint32_t groups[3];
    if (!zero) {
        memcpy(groups, launch->groups, sizeof groups);
    } else if (k->grid[0] || k->grid[1] || k->grid[2]) {
        memcpy(groups, k->grid, sizeof groups);
    } else {
        uint64_t wg = (uint64_t)k->workgroup[0] * k->workgroup[1] * k->workgroup[2];
        uint64_t g = (elements + wg - 1) / wg;
        groups[0] = g ? (uint32_t)g : 1;
        groups[1] = groups[2] = 1;
    }
    const char *wgsl = kf__kernel_wgsl_for(k, lens, groups);
    if (!wgsl) {
        release(lens, lens_small, constants, kp, kinds);
        return k->status != KF_OK ? k->status : KF_ERROR_OUT_OF_MEMORY;
    }
    kf_pipeline_desc pd = {0};
    /* A context under mutation testing runs its transform's kernel (same bindings) instead. */
    kf_kernel *mutant = kf__context_transform_kernel(ctx, k);
    const char *mutant_text = mutant ? kf__kernel_wgsl_for(mutant, lens, groups) : NULL;
    char *mutant_wgsl = mutant_text ? malloc(strlen(mutant_text) + 1) : NULL;
    if (mutant_wgsl) {
        strcpy(mutant_wgsl, mutant_text);
    }
    bool mutant_failed = mutant && !mutant_wgsl;
    bool mutated = mutant != NULL;
    kf_kernel_destroy(mutant);
    pd.wgsl = mutant_wgsl ? mutant_wgsl : wgsl;
    pd.entry_point = "main";
    pd.constants = constants;
    pd.constant_count = nc;
    pd.bindings = kp;
    pd.binding_count = nb;
    kf_pipeline *pipe = NULL;
    kf_status st = mutant_failed ? KF_ERROR_INTERNAL : kf_pipeline_get(ctx, &pd, &pipe);
    if (st == KF_OK && !mutated) {
        /* a mutant is run unchecked (src/ir/mutate.h) */
        kf__pipeline_attach_kernel(pipe, k, lens, groups);
    }
    if (lens != lens_small) {
        free(lens);
    }
    kf_free(mutant_wgsl);
    if (kp != kinds) {
        free(kp);
    }
    free(constants);
    if (st != KF_OK) {
        return kf__run_fail(k, st, "%s",
                            mutant_failed ? "kf_kernel_dispatch: the context's kernel transform "
                                            "gave a kernel that does not emit"
                                          : kf_context_last_error(ctx));
    }
    out->pipeline = pipe;
    out->buffers = launch->buffers;
    out->buffer_count = nb;
    memcpy(out->groups, groups, sizeof out->groups);
    return KF_OK;
}

kf_status kf_kernel_run(kf_context *ctx, kf_kernel *k, const kf_kernel_launch *launch) {
    kf_dispatch d;
    kf_status st = kf_kernel_dispatch(ctx, k, launch, &d);
    if (st != KF_OK) {
        return st;
    }
    st = kf_context_run(ctx, &d, 1);
    if (st != KF_OK) {
        return kf__run_fail(k, st, "%s", kf_context_last_error(ctx));
    }
    return KF_OK;
}
