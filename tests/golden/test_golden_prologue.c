/* The WGSL of a prologue-fused matmul, kept in tests/golden/prologue-matmul-gelu.wgsl: GELU
 * composed into the loads of a (kf_kernel_prologue) of a small register-blocked matmul, whose
 * vec4 tile loads run the prologue lane by lane. KFUSE_UPDATE_GOLDEN=1 rewrites it. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/examples.h"
#include "ops/matmul_blocked.h"

static kf_val gelu(kf_kernel *k, kf_val x, void *user) {
    return kf__example_gelu_tanh(k, x, user);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) {
        buf[n] = '\0';
    }
    fclose(f);
    return buf;
}

KT_CPU_TEST(golden, wgsl_prologue_matmul_matches_golden_file) {
    const kf__mm_config cfg = {16, 16, 4, 4,
                               4,  1,  0, 0}; /* 4x4 invocations of 4x4 each, vec4 loads */
    kf_kernel *mm = kf__matmul_blocked(16, 16, 16, &cfg);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *g = kf_kernel_map("gelu", f32, f32, NULL, gelu, NULL);
    kf_kernel *k = kf_kernel_prologue(mm, "a", g);
    /* a and b as 64 vec4s, out as 256 floats: every access is proved, so nothing is guarded */
    kf_kernel_set_binding_length(k, 0, 64);
    kf_kernel_set_binding_length(k, 1, 64);
    kf_kernel_set_binding_length(k, 2, 256);
    char *wgsl = kf_kernel_emit_wgsl(k);
    kf_kernel_destroy(mm);
    kf_kernel_destroy(g);
    kf_kernel_destroy(k);
    KT_CHECK(wgsl, "no WGSL");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/golden/prologue-matmul-gelu.wgsl", KF_SOURCE_DIR);
    const char *update = getenv("KFUSE_UPDATE_GOLDEN");
    if (update && !strcmp(update, "1")) {
        FILE *f = fopen(path, "wb");
        bool ok = f && fputs(wgsl, f) >= 0;
        if (f) {
            ok = fclose(f) == 0 && ok;
        }
        kf_free(wgsl);
        KT_CHECK(ok, "cannot write %s", path);
        printf("    rewrote %s\n", path);
        return;
    }
    char *golden = slurp(path);
    bool same = golden && !strcmp(golden, wgsl);
    if (!same) {
        printf("---- emitted ----\n%s", wgsl);
    }
    free(golden);
    kf_free(wgsl);
    KT_CHECK(same,
             "%s differs from the emitted WGSL (printed above); after an intended change "
             "rerun with KFUSE_UPDATE_GOLDEN=1",
             path);
}
