/* The one test runner's harness: tests register themselves with KT_TEST and check with KT_CHECK.
 * A test belongs to a suite (unit, ops, fusion, golden, fuzz) and says what it needs: KT_TEST is a
 * GPU test, KT_CPU_TEST one that needs no GPU driver. CTest runs one entry per suite and need,
 * labelled `cpu` or `gpu` (`ctest -L cpu` passes on a machine with no Vulkan driver).
 * GPU tests share one kf_context per run (kt_context()); it is NULL when no adapter exists, and a
 * GPU test then fails loudly rather than passing silently (KT_NEED_GPU). A CPU test that asks for
 * the context fails too: its label would be a lie. */
#ifndef KT_HARNESS_H
#define KT_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kfuse.h"

typedef void (*kt_fn)(void);

/* What a test needs to run; a GPU test may also use everything a CPU test does. */
typedef enum kt_need { KT_NEEDS_GPU, KT_NEEDS_CPU } kt_need;

typedef struct kt_case {
    const char *suite;
    const char *name;
    kt_fn fn;
    kt_need need;
} kt_case;

void kt_register(const char *suite, const char *name, kt_fn fn, kt_need need);
void kt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The run's seed (printed at start; fixed in CI with --seed or KFUSE_TEST_SEED). */
uint64_t kt_seed(void);
/* A per-test random stream derived from the run's seed and the test's name. */
uint64_t kt_rand_u64(void);
float kt_rand_f32(float lo, float hi);
/* Restarts the test's random stream from `seed` (a test mixing a fixed and a fresh stream). */
void kt_reseed(uint64_t seed);
/* A fuzz target's time budget: `share` of KFUSE_FUZZ_SECONDS (the fuzz suite's budget; CTest
 * sets 60 s, 20 s under the sanitizers; 10 s when unset), in seconds of wall clock. */
double kt_fuzz_seconds(double share);
/* Seconds of wall clock from a fixed point (monotonic). */
double kt_now(void);
/* The shared GPU context, or NULL (with a message printed once) when there is none. */
kf_context *kt_context(void);
/* Sets (value NULL: unsets) an environment variable for the rest of the running test; the
 * harness restores what it was when the test ends (a knob under test, or one a user's
 * environment may set that would change what the test checks). */
void kt_setenv(const char *name, const char *value);
/* The shared context's last error message ("" when there is none or no context was made). */
const char *kt_last_error(void);

#define KT_TEST_NEEDING(suite, name, need)                                                         \
    static void kt_test_##name(void);                                                              \
    __attribute__((constructor)) static void kt_reg_##name(void) {                                 \
        kt_register(#suite, #name, kt_test_##name, need);                                          \
    }                                                                                              \
    static void kt_test_##name(void)

/* A test that may use the GPU (the default: a new test is safe here until shown not to be). */
#define KT_TEST(suite, name) KT_TEST_NEEDING(suite, name, KT_NEEDS_GPU)
/* A test that needs no GPU driver: it runs under `ctest -L cpu` with none installed. */
#define KT_CPU_TEST(suite, name) KT_TEST_NEEDING(suite, name, KT_NEEDS_CPU)

#define KT_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            kt_fail(__FILE__, __LINE__, __VA_ARGS__);                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define KT_CHECK_OK(expr)                                                                          \
    do {                                                                                           \
        kf_status kt_st_ = (expr);                                                                 \
        if (kt_st_ != KF_OK) {                                                                     \
            kt_fail(__FILE__, __LINE__, "%s -> %s (the shared context's last error: %s)", #expr,   \
                    kf_status_str(kt_st_), kt_last_error());                                       \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define KT_NEED_GPU(ctx)                                                                           \
    kf_context *ctx = kt_context();                                                                \
    KT_CHECK(ctx != NULL, "no WebGPU adapter: run scripts/setup.sh (or set KF_WEBGPU_LIB)")

#endif
