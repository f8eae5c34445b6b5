/* Attention forward kernels other than attention.c's 16-lanes-a-row one: on subgroup matrices
 * (f16, attention_sgmat.c) and on FMA units with register tiles (f32 and f16,
 * attention_tiled.c). Both take q, k, v [bh, t, d] (the bindings "q", "k", "v", then, with lse,
 * "lse" (read_write, bh * t f32 values whatever the dtype: the row statistics
 * lse_i = log sum_j exp(s_ij)), then "out")
 * and yield o through kf_kernel_yield, so element-wise tails fuse into them. */
#ifndef KF_OPS_ATTENTION_SGMAT_H
#define KF_OPS_ATTENTION_SGMAT_H

#include "kfuse.h"
#include "ops/operator.h"

typedef struct kf__attn_desc {
    uint32_t bh, t, d; /* heads (batch x heads), rows per head, head dimension (<= 128) */
    bool causal;
    float scale;
    bool with_lse; /* write lse as a second output */
    /* q, k, v read in place through strided views (kf_operator.kernel_strided), NULL or rank 0:
     * row-major. The FMA kernels read them; the subgroup-matrix kernels do not (NULL). */
    const kf__strided *layouts;
} kf__attn_desc;

/* The subgroup-matrix kernel for subgroups of sg invocations (16 to 128, a power of two),
 * within wg_bytes of workgroup memory (0: 48 KiB). f16 storage, f32 accumulation. NULL where
 * it cannot (d > 128, sg out of range, too little memory). */
kf_kernel *kf__attention_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes);

/* A configuration, for measuring (kf__attention_sgmat's default: 4 subgroups, the widest key
 * tile of 64, 32, 16 that fits, P as hi + lo): subgroups per workgroup (16 query rows each),
 * keys per tile (a multiple of 16 up to 64, shrunk to fit; 0: widest), hi_only: P as one f16
 * matrix (faster, and outside verification's f16 tolerance where o cancels: not a default). */
typedef struct kf__attn_sgmat_config {
    uint32_t subgroups, keys;
    bool hi_only;
    bool direct;         /* q, k, v as matrices straight from storage: T % 16 == 0 (and T % keys),
                            D % 16 == 0; else no kernel */
    bool reload_q;       /* direct: q's matrices loaded for each key tile, not held in registers */
    uint32_t row_blocks; /* 16-row blocks of q per subgroup: 1 (0) or 2 (direct: T >= 32) */
    bool online;         /* one pass over the keys, O rescaled in registers (attention_sgmat.c):
                            q from storage, k and v staged through workgroup memory where the
                            tiles fit (from storage where not, or with direct), T % keys == 0,
                            D % 16 == 0; subgroups default 4, keys 64 shrunk to fit */
    bool heavy_first;    /* online, causal: the last query rows (the most keys) dispatched first */
    bool lazy;           /* online: O kept in result matrices across tiles, rescaled (through
                            workgroup memory) only when a row's maximum grows by more than
                            LAZY_TAU since the last rescale (attention_sgmat.c) */
    uint32_t probe;      /* KF__ATTN_PROBE_* bits: variants for diagnosis only */
} kf__attn_sgmat_config;
/* The probe's variants (bench/attention/attention_probe.c), none correct as a kernel: */
enum {
    KF__ATTN_PROBE_LO_CAST = 1u, /* lo = f16(P - f32(f16(P))): the split that lost lo on the H200 */
    KF__ATTN_PROBE_LO_ONLY = 2u, /* O += lo V alone: lo's share of o */
    KF__ATTN_PROBE_NO_SCALE = 4u, /* P not scaled by 2^14 in its f16 matrices */
    /* the one-pass kernel's, for where its time goes ("/pN": N the bits): */
    KF__ATTN_PROBE_NO_SOFTMAX = 8u,   /* no scores read, no P written, no O_reg update */
    KF__ATTN_PROBE_NO_QK = 16u,       /* no q k^T (nor its store) */
    KF__ATTN_PROBE_NO_PV = 32u,       /* no P V (nor its loads and store) */
    KF__ATTN_PROBE_NO_BARRIERS = 64u, /* the loop's two barriers left out */
    KF__ATTN_PROBE_KV_SHARED = 128u,  /* k's and v's matrices loaded from workgroup memory */
};
kf_kernel *kf__attention_sgmat_config(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                      const kf__attn_sgmat_config *cfg);
/* "WxC", then any of "/hi", "/direct", "/rq" (reload_q), "/r2" (row_blocks 2), "/on" (online),
 * "/hf" (heavy_first), "/lz" (lazy), "/pN" (probe bits N), into *out;
 * false if it does not parse. */
bool kf__attention_sgmat_config_parse(const char *text, kf__attn_sgmat_config *out);

/* The kernel attention's forward takes on ctx, else NULL (the caller keeps its FMA kernels):
 * where kf__attention_sgmat runs there (kf__sgmat_usable), the one-pass kernel (4x32/on at
 * D <= 64, 2x32/on above) where it builds and the device has subgroups; else the two-pass
 * default configuration for D <= 64 and the direct 4x16 one above where T and D are multiples
 * of 16 (each measured faster than the one before it on the H200). $KF_ATTN_SGMAT: "0" never,
 * "1" the two-pass default configuration at every D, a configuration
 * ("WxC[/hi][/direct][/rq][/r2][/on][/hf][/lz][/pN]") that one, for measuring. */
kf_kernel *kf__attention_sgmat_for(kf_context *ctx, const kf__attn_desc *a);

/* A tiling of the two backward kernels below (attention_grad_sgmat.c): subgroups per workgroup
 * (1, 2, 4: 16 keys, or queries, each), the walked side's tile (16, 32) and slots, the pairs
 * of f16 slots (hi and lo) for P and dS: 2, or 1 where they take turns (a barrier more a tile,
 * workgroup memory for a longer tile); 0 in any field: chosen. */
typedef struct kf__attn_grad_tiling {
    uint32_t subgroups, tile, slots;
} kf__attn_grad_tiling;
/* "WxC", then "/1" or "/2" (slots) ($KF_ATTN_GRAD_SGMAT, $KF_ATTN_GRAD_Q_SGMAT) into *out;
 * false if it does not parse. */
bool kf__attn_grad_tiling_parse(const char *text, kf__attn_grad_tiling *out);

/* attention_grad_k's and attention_grad_v's kernel on subgroup matrices:
 * dk (want_dk) yielded, dv (want_dv) yielded or, with both, stored into a binding "dv" after the
 * inputs q, k, v, g (attention_grad.c's bindings); f16 q, k, v and outputs, g f32. tiling NULL
 * (or its zero fields): the most subgroups that fit wg_bytes (0: 48 KiB), then the shorter
 * query tile (16 before 32), then one pair of slots before two (attention_grad_sgmat.c's
 * choose_tiling has the H200's numbers). NULL where it cannot (T % 16, D % 16, D > 128, sg,
 * memory). */
kf_kernel *kf__attention_grad_kv_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                       bool want_dk, bool want_dv,
                                       const kf__attn_grad_tiling *tiling);
/* Its workgroup memory in bytes for w subgroups, query tiles of c, head dimension d and that
 * many pairs of slots. */
uint32_t kf__attention_grad_kv_sgmat_bytes(uint32_t w, uint32_t c, uint32_t d, uint32_t slots);
/* The kernel above for ctx's device, where it has subgroup matrices (kf__sgmat_usable) and f16
 * is asked; $KF_ATTN_GRAD_SGMAT: "0" never (nor dq's kernel), "WxC[/1|/2]" that tiling. NULL
 * elsewhere. */
kf_kernel *kf__attention_grad_kv_sgmat_for(kf_context *ctx, const kf__attn_desc *a, bool want_dk,
                                           bool want_dv);

/* attention_grad_q's and attention_grad_stats's kernel on subgroup matrices: dq (want_dq)
 * yielded (f16), g' = [dy | lse' | delta'] (want_stats, f32) yielded or, with both, stored into
 * a binding "stats" after the inputs q, k, v, g (attention_grad.c's bindings). tiling (keys
 * walked in tiles) as dk's, but two pairs of slots before one at D > 64. NULL where it cannot
 * (T % 16, D % 16, D > 128, sg, memory). */
kf_kernel *kf__attention_grad_q_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                      bool want_dq, bool want_stats,
                                      const kf__attn_grad_tiling *tiling);
/* Its workgroup memory in bytes for w subgroups of sg invocations, key tiles of c, head
 * dimension d and that many pairs of slots. */
uint32_t kf__attention_grad_q_sgmat_bytes(uint32_t w, uint32_t c, uint32_t d, uint32_t sg,
                                          uint32_t slots);
/* The kernel above for ctx's device, where it has subgroup matrices; $KF_ATTN_GRAD_SGMAT=0 or
 * $KF_ATTN_GRAD_Q_SGMAT=0 never, $KF_ATTN_GRAD_Q_SGMAT="WxC[/1|/2]" that tiling. NULL
 * elsewhere. */
kf_kernel *kf__attention_grad_q_sgmat_for(kf_context *ctx, const kf__attn_desc *a, bool want_dq,
                                          bool want_stats);

/* The register-tiled FMA kernel (attention_tiled.c) for f32 or f16 storage (f32 compute): 64
 * query rows a workgroup, 32-key tiles, within 32 KiB of workgroup memory. NULL where it
 * cannot (d > 128, another dtype). */
kf_kernel *kf__attention_tiled(const kf__attn_desc *a, kf_dtype dtype);

/* Its tiling: tx x ty invocations, each owning rm rows and cn keys of a tile (a workgroup:
 * ty rm rows, tiles of tx cn keys); chunk: D columns staged at a time (0: the default; D: q
 * staged once); vec: q, k and v staged as vec4 rows (dot products of 4 terms a load, output
 * columns 4 at a time; D and the chunk multiples of 4). tx 8 to 64, tx ty <= 256, tx >= rm,
 * rm <= 8, cn <= 4. */
typedef struct kf__attn_tiled_config {
    uint32_t tx, ty, rm, cn, chunk;
    bool vec;
    bool dist; /* the softmax by the scores' owners (rm 1, 2 or 4), not one invocation a row */
} kf__attn_tiled_config;
extern const kf__attn_tiled_config kf__attn_tiled_default; /* 16, 16, 4, 2, 0, scalar */
/* The tiling the forward takes first, where the device's workgroup memory holds it (47 KiB at D
 * 64; not lavapipe's 32 KiB, nor 48 KiB at D 128): 8 x 16 invocations of 4 rows and 4 keys, D
 * staged 64 columns at a time (q once, up to D 64) as vec4 rows, the softmax by the scores'
 * owners. On the H200 (session 9, B 4, H 16, T 1024, D 64, causal f32) 0.633 ms against 0.910 for
 * the default tiling; bench/results/s9/. */
extern const kf__attn_tiled_config kf__attn_tiled_wide;
/* The kernel in that tiling within wg_bytes of workgroup memory (0: no limit), else NULL. */
kf_kernel *kf__attention_tiled_config(const kf__attn_desc *a, kf_dtype dtype,
                                      const kf__attn_tiled_config *cfg, uint32_t wg_bytes);
/* Its workgroup memory in bytes at head dimension d. */
uint32_t kf__attention_tiled_bytes(const kf__attn_tiled_config *c, uint32_t d);
/* "tx,ty,rm,cn[,chunk][/v][/d]" ($KF_ATTN_TILED) into *out; false if it does not parse. */
bool kf__attention_tiled_config_parse(const char *text, kf__attn_tiled_config *out);

#endif
