/* Fuzzing the in-bounds proof (src/ir/bounds.c): random kernels whose one access (a load or store
 * of a storage binding, or of a workgroup array) is at a random index expression: builtins over
 * a random grid and workgroup, literals, loop variables, variables, + - * / % << >> & | ^, min,
 * max, clamp, select, casts between u32 and i32, under random guards (`if (e < n)`, `if (e <
 * arrayLength(&x))`, loop bounds). Where the proof says the access is in bounds, the interpreter,
 * which checks every access, must run the kernel without an out-of-bounds one, for the lengths and
 * grid the proof was made for. A failing kernel is printed as WGSL with its report. The stream
 * is the run's printed seed (--seed S reruns it); the time is a share of KFUSE_FUZZ_SECONDS. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define BOUNDS_SHARE 0.1

typedef struct gen {
    kf_kernel *k;
    kf_val leaves[16];
    uint32_t leaf_count;
    kf_binding x;
    bool i32; /* build this index in i32 */
} gen;

static uint32_t pick(uint32_t n) {
    return n ? (uint32_t)(kt_rand_u64() % n) : 0;
}

static kf_type u32t(void) {
    return kf_type_scalar(KF_SCALAR_U32);
}

static kf_val lit(gen *g) {
    uint32_t v = pick(4) == 0 ? pick(1000) : pick(40);
    return g->i32 ? kf_lit_i32(g->k, pick(6) == 0 ? -(int32_t)pick(10) : (int32_t)v)
                  : kf_lit_u32(g->k, v);
}

static kf_val as_type(gen *g, kf_val v) {
    kf_type t = kf_val_type(g->k, v);
    kf_scalar want = g->i32 ? KF_SCALAR_I32 : KF_SCALAR_U32;
    return t.scalar == want ? v : kf_cast(g->k, kf_type_scalar(want), v);
}

static kf_val expr(gen *g, int depth) {
    kf_kernel *k = g->k;
    if (depth <= 0 || pick(4) == 0) {
        return pick(3) == 0 ? lit(g) : as_type(g, g->leaves[pick(g->leaf_count)]);
    }
    kf_val a = expr(g, depth - 1), b = expr(g, depth - 1);
    switch (pick(13)) {
    case 0:
    case 1:
        return kf_add(k, a, b);
    case 2:
        return kf_sub(k, a, b);
    case 3:
        return kf_mul(k, a, lit(g));
    case 4:
        return kf_mul(k, a, b);
    case 5:
        return kf_div(k, a, lit(g));
    case 6:
        return kf_binary(k, KF_OP_MOD, a, pick(2) ? lit(g) : b);
    case 7:
        return kf_call2(k, KF_FN_MIN, a, b);
    case 8:
        return kf_call2(k, KF_FN_MAX, a, b);
    case 9:
        return kf_call3(k, KF_FN_CLAMP, a, lit(g), lit(g));
    case 10:
        return kf_select(k, a, b, kf_binary(k, KF_OP_LT, a, b));
    case 11:
        return g->i32 ? kf_add(k, a, b)
                      : kf_binary(k, pick(2) ? KF_OP_SHR : KF_OP_SHL, a, kf_lit_u32(k, pick(6)));
    default:
        return g->i32
                   ? kf_sub(k, a, b)
                   : kf_binary(
                         k, pick(3) == 0 ? KF_OP_BIT_AND : (pick(2) ? KF_OP_BIT_XOR : KF_OP_BIT_OR),
                         a, pick(2) ? lit(g) : b);
    }
}

/* One random kernel, its proof, and (where proved) an interpreted run; false on a failure. */
static bool one_kernel(uint64_t n, bool *all_proved) {
    uint32_t wg[3] = {1u << (2 + pick(4)), 1u + pick(2), 1};
    uint32_t grid[3] = {1 + pick(3), 1 + pick(2), 1};
    uint32_t length = 1 + pick(pick(2) ? 64 : 600), shared_count = 1 + pick(300);
    int kind = (int)pick(4); /* load, store, workgroup load, workgroup store */
    char name[32];
    snprintf(name, sizeof name, "fuzz%llu", (unsigned long long)n);
    kf_kernel_desc desc = {0};
    desc.name = name;
    memcpy(desc.workgroup_size, wg, sizeof wg);
    kf_kernel *k = kf_kernel_create(&desc);
    gen g = {0};
    g.k = k;
    g.x = kf_kernel_storage(k, "x", u32t(), KF_ACCESS_READ_WRITE);
    kf_binding out = kf_kernel_storage(k, "out", u32t(), KF_ACCESS_READ_WRITE);
    kf_shared sh = kf_kernel_workgroup(k, "tile", u32t(), shared_count);
    kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val gl = kf_let(k, "gl", kf_global_linear(k));
    g.leaves[g.leaf_count++] = li;
    g.leaves[g.leaf_count++] = gl;
    g.leaves[g.leaf_count++] = kf_extract(k, kf_builtin_get(k, KF_BUILTIN_LOCAL_ID), 0);
    g.leaves[g.leaf_count++] = kf_extract(k, kf_builtin_get(k, KF_BUILTIN_WORKGROUP_ID), pick(2));
    g.leaves[g.leaf_count++] = kf_extract(k, kf_builtin_get(k, KF_BUILTIN_NUM_WORKGROUPS), 0);
    g.i32 = pick(4) == 0;
    /* a variable counting up or halving */
    kf_var v = kf_declare(k, "v", u32t(), kf_lit_u32(k, pick(64)));
    uint32_t opened = 0;
    if (pick(2)) {
        uint32_t start = pick(8), step = 1 + pick(8);
        kf_val j = kf_for(k, "j", kf_lit_u32(k, start), kf_lit_u32(k, start + pick(40)),
                          kf_lit_u32(k, step));
        opened++;
        g.leaves[g.leaf_count++] = j;
        kf_assign(k, v,
                  pick(2) ? kf_add(k, kf_read(k, v), kf_lit_u32(k, 1))
                          : kf_binary(k, KF_OP_SHR, kf_read(k, v), kf_lit_u32(k, 1)));
    }
    g.leaves[g.leaf_count++] = kf_let(k, "v_now", kf_read(k, v));
    for (uint32_t guards = pick(3); guards; guards--) {
        kf_val e = expr(&g, 2);
        kf_val bound = pick(3) == 0 && !g.i32 ? kf_binding_length(k, g.x) : lit(&g);
        kf_if(k, kf_binary(k, pick(4) == 0 ? KF_OP_LE : KF_OP_LT, e, as_type(&g, bound)));
        opened++;
        g.leaves[g.leaf_count++] = e;
    }
    kf_val index = kf_let(k, "index", expr(&g, 3));
    kf_val value = kf_lit_u32(k, 7);
    if (kind == 0) {
        value = kf_load(k, g.x, index);
    } else if (kind == 1) {
        kf_store(k, g.x, index, value);
    } else if (kind == 2) {
        value = kf_shared_load(k, sh, index);
    } else {
        kf_shared_store(k, sh, index, value);
    }
    kf_store(k, out, gl, value); /* one element per invocation: proved from the grid */
    for (; opened; opened--) {
        kf_end(k);
    }
    uint32_t invocations = wg[0] * wg[1] * grid[0] * grid[1];
    kf_kernel_set_grid(k, grid);
    kf_kernel_set_binding_length(k, 0, length);
    kf_kernel_set_binding_length(k, 1, invocations);
    kf_bounds_report r;
    char *text = NULL;
    if (kf_kernel_status(k) != KF_OK || kf_kernel_bounds(k, &r, &text) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "kernel %s: %s", name, kf_kernel_error(k));
        kf_free(text);
        kf_kernel_destroy(k);
        return false;
    }
    bool ok = r.proved + r.guarded == r.accesses && r.accesses == 2;
    *all_proved = ok && r.guarded == 0;
    if (ok && r.guarded == 0) {
        uint32_t *xs = calloc(length, sizeof *xs), *os = calloc(invocations, sizeof *os);
        kf_host_buffer bufs[2] = {{xs, length * 4ull}, {os, invocations * 4ull}};
        kf_interp_desc d = {0};
        d.buffers = bufs;
        d.buffer_count = 2;
        kf_status st = xs && os ? kf_kernel_interpret(k, &d) : KF_ERROR_OUT_OF_MEMORY;
        /* a proof that holds never meets an out-of-bounds access (a loop past 2^22 is fine) */
        ok = st == KF_OK || st == KF_ERROR_OUT_OF_MEMORY ||
             !strstr(kf_kernel_error(k), "out of bounds");
        if (!ok) {
            char *wgsl = kf_kernel_emit_wgsl(k);
            kt_fail(__FILE__, __LINE__, "kernel %s was proved in bounds but: %s\n%s\n%s", name,
                    kf_kernel_error(k), text ? text : "", wgsl ? wgsl : "");
            kf_free(wgsl);
        }
        free(xs);
        free(os);
    } else if (!ok) {
        kt_fail(__FILE__, __LINE__, "kernel %s: %u accesses, %u proved, %u guarded", name,
                r.accesses, r.proved, r.guarded);
    }
    kf_free(text);
    kf_kernel_destroy(k);
    return ok;
}

KT_CPU_TEST(fuzz, bounds_proof_holds_in_the_interpreter) {
    double seconds = kt_fuzz_seconds(BOUNDS_SHARE), start = kt_now();
    uint64_t n = 0, failures = 0, proved = 0;
    while (kt_now() - start < seconds && failures < 3) {
        bool all = false;
        failures += one_kernel(n++, &all) ? 0 : 1;
        proved += all;
    }
    printf("    %llu random kernels in %.1f s, %llu proved in bounds and interpreted\n",
           (unsigned long long)n, kt_now() - start, (unsigned long long)proved);
    KT_CHECK(failures == 0, "%llu kernels failed", (unsigned long long)failures);
}
