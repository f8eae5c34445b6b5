/* erf has no WGSL builtin. kfuse evaluates, in f32:
 *   |x| < 0.7:  the Taylor series 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320
 *               + x^13/9360) (truncation error below 1e-7 there);
 *   otherwise:  Abramowitz & Stegun 7.1.26,
 *               sign(x) (1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-x^2)),
 *               t = 1 / (1 + p |x|), whose error in exact arithmetic is below 1.5e-7.
 * A&S alone loses to cancellation near 0 in f32 (6.3e-7 at x = 0.038); the series fixes that.
 * (Beyond 0.7 the f32 rounding of A&S itself, about 2.5e-7 near 0.86, dominates.)
 * The measured max abs error against libm's erf is in docs/builder.md, and
 * tests/unit/test_ir_erf.c re-measures it on the CPU and on the GPU.
 * The interpreter evaluates exactly this sequence of f32 operations, the one the WGSL helper
 * (src/wgsl/emit.c) spells out, so interpreter and GPU agree up to the GPU's exp and division. */
#include "ir/ir_internal.h"

#include <math.h>

float kf__erf_f32(float x) {
    float x2 = x * x;
    float small =
        x *
        (1.1283791671f +
         x2 * (-0.3761263890f +
               x2 * (0.1128379167f +
                     x2 * (-0.0268661706f +
                           x2 * (0.0052239776f + x2 * (-0.0008548327f + x2 * 0.0001205533f))))));
    float t = 1.0f / (1.0f + 0.3275911f * fabsf(x));
    float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
               0.254829592f) *
              t;
    float s = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    float big = s * (1.0f - p * expf(-x2));
    return fabsf(x) < 0.7f ? small : big;
}
