/* The attention kernels' other tilings, the ones bench/h200_s7_attn.sh measures through
 * $KF_ATTN_TILED and $KF_ATTN_GRAD_TILES / _LAYOUT (off by default), run in the interpreter (no
 * driver: cheap cold; its race detector checks every barrier) against the specs, every element
 * into poisoned outputs: the register-tiled forward with vec4 rows and with the softmax by the
 * scores' owners, and the dk + dv and dq + g2 kernels with interleaved columns and padded P
 * slots, on ragged shapes (T past a tile, D not a multiple of 4) causal and not; and all of them
 * once more with q, k and v read in place through strides (kf__strided) from one qkv tensor. */
#include "harness.h"
#include "ops/attention.h"
#include "ops/attention_sgmat.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0x7fc00001u /* a NaN: an element the kernel forgot stays NaN */
#define GUARD 16u

static float *poisoned(uint64_t n) {
    float *x = malloc((n + GUARD) * sizeof *x);
    uint32_t bits = POISON;
    for (uint64_t i = 0; x && i < n + GUARD; i++) {
        memcpy(&x[i], &bits, sizeof bits);
    }
    return x;
}

/* got against want (n elements, the op's f32 tolerance, relative to 1% of want's rms), and the
 * guard after got untouched. */
static bool matches(const char *what, const float *got, const float *want, uint64_t n, double tol) {
    double floor = kf__verify_floor(want, n);
    for (uint64_t e = 0; e < n; e++) {
        if (!(kf__rel_error(got[e], want[e], floor) <= tol)) {
            kt_fail(__FILE__, __LINE__, "%s element %llu: %g, spec %g", what, (unsigned long long)e,
                    got[e], want[e]);
            return false;
        }
    }
    for (uint32_t g = 0; g < GUARD; g++) {
        uint32_t bits;
        memcpy(&bits, &got[n + g], sizeof bits);
        if (bits != POISON) {
            kt_fail(__FILE__, __LINE__, "%s: wrote past the end", what);
            return false;
        }
    }
    return true;
}

static bool interpret(kf_kernel *k, kf_host_buffer *bufs, uint32_t count, const char *what) {
    kf_interp_desc d = {.buffers = bufs, .buffer_count = count};
    if (!k || kf_kernel_status(k) != KF_OK || kf_kernel_interpret(k, &d) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, k ? kf_kernel_error(k) : "no kernel");
        return false;
    }
    return true;
}

/* One shape: q, k, v, dy random; the forward (o and lse) in each forward tiling, dk + dv and
 * dq + g2 in each backward one; strided: q, k and v read in place from one [T, 3 bh D] tensor,
 * as the GPT's from its qkv product (slice |> reshape |> permute; kf_operator.kernel_strided). */
static void check_shape(uint32_t bh, uint32_t t, uint32_t d, bool causal, bool strided,
                        const char *const *fwd, const char *const *bwd) {
    kf_shape s = {3, {bh, t, d}}, gs = {3, {bh, t, d + 2}}, ls = {3, {bh, t, 1}};
    kf_op_params p = {.causal = causal, .given = KF_PARAM_CAUSAL};
    kf_tensor *in[4] = {0}, *dy = NULL, *o = NULL, *lse = NULL, *want[4] = {0};
    for (int i = 0; i < 3; i++) {
        kf_tensor_create(&s, &in[i]);
        kf_tensor_fill_random(in[i], kt_rand_u64(), -1.0f, 1.0f);
    }
    kf_tensor_create(&s, &dy);
    kf_tensor_fill_random(dy, kt_rand_u64(), -1.0f, 1.0f);
    kf_tensor_create(&gs, &in[3]);
    kf_tensor_create(&s, &o);
    kf_tensor_create(&ls, &lse);
    const kf_tensor *prep_in[4] = {in[0], in[1], in[2], dy};
    const kf_tensor *const *cin = (const kf_tensor *const *)in;
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_grad_prep"), prep_in, &p, in[3]));
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention"), cin, &p, o));
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_lse"), cin, &p, lse));
    static const char *const grads[4] = {"attention_grad_q", "attention_grad_stats",
                                         "attention_grad_k", "attention_grad_v"};
    for (int w = 0; w < 4; w++) {
        kf_tensor_create(w == 1 ? &gs : &s, &want[w]);
        KT_CHECK_OK(kf_op_spec_forward(kf_op_find(grads[w]), cin, &p, want[w]));
    }
    const uint64_t n = kf_tensor_size(o), rows = (uint64_t)bh * t, gn = kf_tensor_size(in[3]);
    kf_host_buffer ins[4];
    for (int i = 0; i < 4; i++) {
        ins[i] = (kf_host_buffer){in[i]->data, kf_tensor_size(in[i]) * 4};
    }
    /* input i's (head h, row r, column c) at r 3 bh D + i bh D + h D + c */
    kf__strided layouts[3] = {{0}};
    float *qkv = strided ? malloc(3 * n * sizeof *qkv) : NULL;
    for (uint32_t i = 0; qkv && i < 3; i++) {
        layouts[i] = (kf__strided){.rank = 3,
                                   .dims = {bh, t, d},
                                   .strides = {d, 3ull * bh * d, 1},
                                   .offset = (uint64_t)i * bh * d};
        for (uint64_t e = 0; e < n; e++) {
            uint64_t h = e / ((uint64_t)t * d), r = e / d % t, c = e % d;
            qkv[r * 3 * bh * d + layouts[i].offset + h * d + c] = in[i]->data[e];
        }
        ins[i] = (kf_host_buffer){qkv, 3 * n * 4};
    }
    char what[96];
    kf__attn_desc a = {.bh = bh,
                       .t = t,
                       .d = d,
                       .causal = causal,
                       .scale = (float)(1.0 / sqrt((double)d)),
                       .with_lse = true,
                       .layouts = qkv ? layouts : NULL};
    for (const char *const *f = fwd; *f; f++) {
        kf__attn_tiled_config c;
        KT_CHECK(kf__attention_tiled_config_parse(*f, &c), "%s does not parse", *f);
        kf_kernel *k = kf__attention_tiled_config(&a, KF_DTYPE_F32, &c, 0);
        float *got_o = poisoned(n), *got_l = poisoned(rows);
        kf_host_buffer b[5] = {
            ins[0], ins[1], ins[2], {got_l, (rows + GUARD) * 4}, {got_o, (n + GUARD) * 4}};
        snprintf(what, sizeof what, "forward %s T %u D %u%s%s", *f, t, d, causal ? " causal" : "",
                 qkv ? " strided" : "");
        if (interpret(k, b, 5, what) &&
            matches(what, got_o, o->data, n, kf__op_attention.tolerance_f32)) {
            matches(what, got_l, lse->data, rows, kf__op_attention_lse.tolerance_f32);
        }
        free(got_o);
        free(got_l);
        kf_kernel_destroy(k);
    }
    kf_shape shapes[4] = {s, s, s, gs};
    for (const char *const *g = bwd; *g; g++) {
        for (int dq_side = 0; dq_side < 2; dq_side++) {
            kf_kernel *k = kf__attention_grad_kernel_tiled(dq_side != 0, *g, shapes, &p,
                                                           KF_DTYPE_F32, qkv ? layouts : NULL);
            uint64_t side_n = dq_side ? gn : n;
            float *out = poisoned(n), *side = poisoned(side_n);
            kf_host_buffer b[6] = {ins[0],
                                   ins[1],
                                   ins[2],
                                   ins[3],
                                   {side, (side_n + GUARD) * 4},
                                   {out, (n + GUARD) * 4}};
            snprintf(what, sizeof what, "%s %s T %u D %u%s%s", dq_side ? "dq + g2" : "dk + dv", *g,
                     t, d, causal ? " causal" : "", qkv ? " strided" : "");
            double tol = kf__op_attention_grad_k.tolerance_f32;
            if (interpret(k, b, 6, what) &&
                matches(what, out, want[dq_side ? 0 : 2]->data, n, tol)) {
                matches(what, side, want[dq_side ? 1 : 3]->data, side_n, tol);
            }
            free(out);
            free(side);
            kf_kernel_destroy(k);
        }
    }
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(in[i]);
        kf_tensor_destroy(want[i]);
    }
    kf_tensor_destroy(dy);
    kf_tensor_destroy(o);
    kf_tensor_destroy(lse);
    free(qkv);
}

KT_CPU_TEST(ops, attention_tilings_interpreter) {
    /* the forward: vec4 rows; the softmax by the owners (vec4 and scalar, 1 and 2 rows an
     * invocation); q staged once with 4 keys an invocation */
    static const char *const fwd[] = {"16,16,4,2/v", "8,16,4,2/v/d",    "16,8,2,2/d",
                                      "16,16,1,2/d", "8,16,4,4,64/v/d", NULL};
    /* the backward: both layouts at the default tiling, 4 columns an invocation interleaved,
     * 2 rows, padded P alone */
    static const char *const bwd[] = {"4,2,16,8,3", "2,4,8,16,1", "4,4,8,8,3",
                                      "4,2,8,8,2",  "2,2,8,8,3",  NULL};
    check_shape(2, 17, 8, true, false, fwd, bwd);   /* one row past a 16-row tile */
    check_shape(1, 70, 36, false, false, fwd, bwd); /* past 64 rows; D past a 32-column chunk */
    check_shape(1, 33, 7, true, false, fwd, bwd);   /* D not a multiple of 4 */
    /* q, k and v through strides (2 heads, D not a multiple of 4), in every tiling */
    check_shape(2, 17, 7, true, true, fwd, bwd);
}
