/* erf has no WGSL builtin. kfuse uses Abramowitz & Stegun 7.1.26,
 *     erf(x) = sign(x) * (1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-x^2)),
 *     t = 1 / (1 + p |x|),
 * whose error in exact arithmetic is below 1.5e-7; evaluated in f32 its measured max abs error
 * against libm's erf is in docs/builder.md (tests/unit/test_ir_erf.c re-measures it).
 * The interpreter evaluates exactly this sequence of f32 operations, the one the WGSL helper
 * (src/wgsl/emit.c) spells out, so interpreter and GPU agree up to the GPU's exp and division. */
#include "ir/ir_internal.h"

#include <math.h>

float kf__erf_f32(float x) {
    float t = 1.0f / (1.0f + 0.3275911f * fabsf(x));
    float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
               0.254829592f) *
              t;
    float y = 1.0f - p * expf(-x * x);
    float s = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    return s * y;
}
