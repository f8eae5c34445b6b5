/* kfuse_chain_variants: hand-written WGSL variants of the benchmark's element-wise chains on
 * 2^28 f32, timed side by side, to see what limits a long chain: one transcendental per element
 * (tanh, exp, 1/x) against a plain copy, the chain of 4, 5 and 8 operators as kfuse emits them
 * (c4, c5, c8), with sigmoid and GELU through tanh (c8b) or silu as a division (c8c), the chain
 * of 8 with kfuse's tanh as it is now (c8k: limited argument and small-argument series) and with
 * tanh through exp (c8e, c8m), and c8e with some reciprocals and exps moved off the special-
 * function units (c8r1, c8r2, c8r4, c8x1, c8x2, c8rx), each with 1, 2 or 4 vec4s per invocation
 * (loads first).
 *   kfuse_chain_variants [FN ...]     (default: every function; $KFUSE_CHAIN_ELEMENTS: size)
 * Results are not checked: this measures code shapes; kfuse's own kernels are verified by kfuse
 * verify and the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfuse.h"

/* 2^28 elements; $KFUSE_CHAIN_ELEMENTS (a multiple of 4096) for a quick try on a CPU adapter */
static uint32_t N = 1u << 28;
static const char *HDR = "@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;\n"
                         "@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;\n"
                         "fn relu(t: f32) -> f32 { return select(select(t, 0.0f, (t < 0.0f)), t, "
                         "(bitcast<u32>(t) & 2147483647u) > 2139095040u); }\n"
                         "fn th(t: f32) -> f32 { return tanh(select(t, select(-15.0f, 15.0f, t > "
                         "0.0f), abs(t) > 15.0f)); }\n"
                         "fn sg(t: f32) -> f32 { return 1.0f / (1.0f + exp(-t)); }\n"
                         "fn sg2(t: f32) -> f32 { return 0.5f + 0.5f * tanh(0.5f * t); }\n"
                         "fn gl(t: f32) -> f32 { return t / (1.0f + exp(-2.0f * (0.7978846f * (t + "
                         "0.044715f * (t * t * t))))); }\n"
                         "fn gl2(t: f32) -> f32 { return 0.5f * t * (1.0f + tanh(0.7978846f * (t + "
                         "0.044715f * (t * t * t)))); }\n"
                         "fn c8(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = sg(th(t)) "
                         "* 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8b(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg2(th(t)) * 2.0f; let w = gl2(u); return w * sg2(w); }\n"
                         "fn c8c(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th(t)) * 2.0f; let w = gl(u); return w / (1.0f + exp(-w)); }\n"
                         "fn c4(v: f32) -> f32 { return th(relu(1.5f * v + 0.25f)); }\n"
                         "fn c5(v: f32) -> f32 { return sg(th(relu(1.5f * v + 0.25f))); }\n"
                         /* kfuse's own tanh (src/ops/elementwise.c ir_tanh: limited argument,
                          * the builtin, the series below 1/16), and tanh as 2 sigmoid(2t) - 1
                          * through exp (exp's overflow gives the limits: no clamp) */
                         "fn th_k(t: f32) -> f32 { let a = abs(t); let t2 = t * t; return "
                         "select(tanh(select(t, select(-15.0f, 15.0f, t > 0.0f), a > 15.0f)), t + "
                         "t * (t2 * (-0.33333334f + t2 * 0.13333334f)), a < 0.0625f); }\n"
                         "fn th_e(t: f32) -> f32 { let t2 = t * t; return select(2.0f / (1.0f + "
                         "exp(-2.0f * t)) - 1.0f, t + t * (t2 * (-0.33333334f + t2 * "
                         "0.13333334f)), abs(t) < 0.0625f); }\n"
                         "fn glm(t: f32) -> f32 { return t * (1.0f / (1.0f + exp(-2.0f * "
                         "(0.7978846f * (t + 0.044715f * (t * t * t)))))); }\n"
                         /* the chain as kfuse emits it today (c8k), with tanh through exp (c8e),
                          * and with gelu's division as a reciprocal too (c8m) */
                         "fn c8k(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_k(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8e(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_e(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8m(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_e(t)) * 2.0f; let w = glm(u); return w * sg(w); }\n"
                         /* the special-function units' share: 8 of them an element (4 exp,
                          * 4 reciprocals) is about what they deliver at copy speed, so some
                          * move to the FMA pipes: a reciprocal by Newton's iteration from a bit
                          * trick (no MUFU; 3 steps reach f32 from 12%; d clamped below 2^100 so
                          * the trick stays positive), exp as 2^n times a polynomial */
                         "fn rcpn(d0: f32) -> f32 { let d = min(d0, 1e30f); var y = "
                         "bitcast<f32>(0x7ef311c3u - bitcast<u32>(d)); y = fma(y, fma(-d, y, "
                         "1.0f), y); y = fma(y, fma(-d, y, 1.0f), y); return fma(y, fma(-d, y, "
                         "1.0f), y); }\n"
                         "fn expp(x0: f32) -> f32 { let x = clamp(x0, -87.0f, 88.0f); let n = "
                         "round(x * 1.442695f); let f = fma(n, -1.4286068e-6f, fma(n, "
                         "-6.9314575e-1f, x)); let p = fma(fma(fma(fma(fma(1.3981999e-3f, f, "
                         "8.3334519e-3f), f, 4.1665795e-2f), f, 1.6666665e-1f), f, 0.5f), f * f, "
                         "f + 1.0f); return bitcast<f32>(bitcast<i32>(p) + (i32(n) << 23u)); }\n"
                         "fn sgn(t: f32) -> f32 { return rcpn(1.0f + exp(-t)); }\n"
                         "fn th_n(t: f32) -> f32 { let t2 = t * t; return select(2.0f * rcpn(1.0f "
                         "+ exp(-2.0f * t)) - 1.0f, t + t * (t2 * (-0.33333334f + t2 * "
                         "0.13333334f)), abs(t) < 0.0625f); }\n"
                         "fn th_p(t: f32) -> f32 { let t2 = t * t; return select(2.0f / (1.0f + "
                         "expp(-2.0f * t)) - 1.0f, t + t * (t2 * (-0.33333334f + t2 * "
                         "0.13333334f)), abs(t) < 0.0625f); }\n"
                         "fn gln(t: f32) -> f32 { return t * rcpn(1.0f + exp(-2.0f * (0.7978846f * "
                         "(t + 0.044715f * (t * t * t))))); }\n"
                         "fn sgp(t: f32) -> f32 { return 1.0f / (1.0f + expp(-t)); }\n"
                         /* c8e with 1, 2 or 4 of its reciprocals by Newton (c8r1, c8r2, c8r4),
                          * 1 or 2 of its exps as the polynomial (c8x1, c8x2), one of each (c8rx) */
                         "fn c8r1(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_n(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8r2(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sgn(th_n(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8r4(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sgn(th_n(t)) * 2.0f; let w = gln(u); return w * sgn(w); }\n"
                         "fn c8x1(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_p(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8x2(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sgp(th_p(t)) * 2.0f; let w = gl(u); return w * sg(w); }\n"
                         "fn c8rx(v: f32) -> f32 { let t = relu(1.5f * v + 0.25f); let u = "
                         "sg(th_n(t)) * 2.0f; let w = gl(u); return w * sgp(w); }\n"
                         "fn ident(v: f32) -> f32 { return v; }\n"
                         "fn ftanh(v: f32) -> f32 { return tanh(v); }\n"
                         "fn fexp(v: f32) -> f32 { return exp(v); }\n"
                         "fn frcp(v: f32) -> f32 { return 1.0f / v; }\n"
                         "fn fth_k(v: f32) -> f32 { return th_k(v); }\n"
                         "fn fth_e(v: f32) -> f32 { return th_e(v); }\n";
/* The kernel applying fn to every element, `per` vec4s per invocation, all loads first. */
static const char *kernel(const char *fn, uint32_t per) {
    static char text[16384];
    char body[2048] = "";
    size_t o = 0;
    for (uint32_t p = 0; p < per; p++) {
        o += (size_t)snprintf(body + o, sizeof body - o, "    let v%u = x[base + %uu * stride];\n",
                              p, p);
    }
    for (uint32_t p = 0; p < per; p++) {
        o += (size_t)snprintf(body + o, sizeof body - o,
                              "    out[base + %uu * stride] = vec4<f32>(%s(v%u.x), %s(v%u.y), "
                              "%s(v%u.z), %s(v%u.w));\n",
                              p, fn, p, fn, p, fn, p, fn, p);
    }
    snprintf(text, sizeof text,
             "%s@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) li: u32, "
             "@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {\n"
             "    let stride = %uu;\n    let base = (wg.x + wg.y * nw.x) * 256u + li;\n"
             "    if (base >= stride) { return; }\n%s}\n",
             HDR, N / 4 / per, body);
    return text;
}

int main(int argc, char **argv) {
    const char *elements = getenv("KFUSE_CHAIN_ELEMENTS");
    if (elements && atoi(elements) >= 4096) {
        N = (uint32_t)atoi(elements) / 4096u * 4096u;
    }
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    kf_buffer *bufs[2] = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK || kf_buffer_create(ctx, 4ull * N, &bufs[0]) ||
        kf_buffer_create(ctx, 4ull * N, &bufs[1]) || kf_buffer_fill_u32(bufs[0], 0x3f000000u)) {
        fprintf(stderr, "kfuse_chain_variants: no device or no memory\n");
        return 1;
    }
    static const char *const all[] = {"ident", "ftanh", "fexp", "frcp", "fth_k", "fth_e", "c4",
                                      "c5",    "c8",    "c8b",  "c8c",  "c8k",   "c8e",   "c8m",
                                      "c8r1",  "c8r2",  "c8r4", "c8x1", "c8x2",  "c8rx"};
    /* the functions named on the command line, else all of them */
    const char *const *fns = argc > 1 ? (const char *const *)argv + 1 : all;
    size_t fn_count = argc > 1 ? (size_t)argc - 1 : sizeof all / sizeof all[0];
    static const uint32_t pers[] = {1, 2, 4};
    kf_binding_kind kinds[2] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ_WRITE};
    for (size_t f = 0; f < fn_count; f++) {
        for (size_t i = 0; i < sizeof pers / sizeof pers[0]; i++) {
            kf_pipeline_desc pd = {
                .wgsl = kernel(fns[f], pers[i]), .bindings = kinds, .binding_count = 2};
            kf_pipeline *pipe = NULL;
            kf_timing t;
            kf_dispatch d = {
                .buffers = bufs, .buffer_count = 2, .groups = {N / 4 / pers[i] / 256, 1, 1}};
            if (kf_pipeline_get(ctx, &pd, &pipe) != KF_OK ||
                (d.pipeline = pipe, kf_context_time(ctx, &d, 1, 20, &t)) != KF_OK) {
                printf("%s: %s\n", fns[f], kf_context_last_error(ctx));
                continue;
            }
            printf("%-6s per=%u %.4f ms  %.0f GB/s  (min %.4f ms)\n", fns[f], pers[i], t.median_ms,
                   8.0 * N / (t.median_ms * 1e6), t.min_ms);
            fflush(stdout);
        }
    }
    kf_buffer_destroy(bufs[0]);
    kf_buffer_destroy(bufs[1]);
    kf_context_destroy(ctx);
    return 0;
}
