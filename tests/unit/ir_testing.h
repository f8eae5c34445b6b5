/* Helpers shared by the kernel-IR tests: run one kernel on the same host buffers on the GPU and in
 * the interpreter, and compare what came back. */
#ifndef KT_IR_TESTING_H
#define KT_IR_TESTING_H

#include "harness.h"

#define KT_POISON 0x7fc00000u /* a quiet NaN: what outputs hold before a kernel writes them */

/* A launch: groups all zero means the kernel's own grid or enough for `elements`. */
typedef struct kt_launch {
    uint32_t groups[3];
    uint64_t elements;
    const kf_constant *constants;
    uint32_t constant_count;
    uint32_t subgroup_size; /* interpreter only */
} kt_launch;

/* Runs k on the GPU: uploads every buffer, runs, downloads the read_write bindings back into
 * bufs. Each read_write buffer gets 4 guard words past its end, which must stay untouched (so
 * pass `elements` for a stage: the length of "out" on the GPU includes them). false with a
 * test failure recorded on error. */
bool kt_ir_gpu(kf_context *ctx, kf_kernel *k, kf_host_buffer *bufs, uint32_t count,
               const kt_launch *launch);
/* Runs k in the interpreter on bufs. */
bool kt_ir_interp(kf_kernel *k, kf_host_buffer *bufs, uint32_t count, const kt_launch *launch);

/* Deep copies of host buffers (to run the same inputs twice) and their release. */
kf_host_buffer *kt_bufs_copy(const kf_host_buffer *bufs, uint32_t count);
void kt_bufs_free(kf_host_buffer *bufs, uint32_t count);

/* Element-wise comparison of two f32 arrays: |a - b| <= tol * max(|b|, floor); NaN only against
 * NaN. Records a failure naming `what` and the first bad index. */
bool kt_close_f32(const float *a, const float *b, uint64_t n, double tol, double floor,
                  const char *what);
/* The same for f16 arrays (as stored), and exact comparison of 32-bit words. */
bool kt_close_f16(const uint16_t *a, const uint16_t *b, uint64_t n, double tol, double floor,
                  const char *what);
bool kt_equal_u32(const uint32_t *a, const uint32_t *b, uint64_t n, const char *what);

/* Random data: floats in [lo, hi), never all zero. */
void kt_fill_f32(float *p, uint64_t n, float lo, float hi);
void kt_fill_poison(void *p, uint64_t bytes);

#endif
