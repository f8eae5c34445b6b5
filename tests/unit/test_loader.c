/* Which webgpu.h library a context loads, and why (src/runtime/loader.c, impl.c). Only Dawn is
 * supported; the fake libraries (tests/fake_wgpu) export every entry point kfuse resolves, so
 * only the implementation check can refuse them. No GPU needed. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static kf_status create_with(const char *path, char *err, size_t err_size) {
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    desc.library_path = path;
    desc.error_out = err;
    desc.error_out_size = err_size;
    kf_status st = kf_context_create(&desc, &ctx);
    kf_context_destroy(ctx);
    return st;
}

KT_CPU_TEST(unit, loader_refuses_wgpu_native) {
    char err[2048];
    const char *path = KF_FAKE_WGPU_DIR "/libkfuse_fake_wgpu_native.so";
    kf_status st = create_with(path, err, sizeof err);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "%s -> %s: %s", path, kf_status_str(st), err);
    KT_CHECK(strstr(err, "wgpu-native") && strstr(err, "supports Dawn"),
             "the message names the implementation and what is supported: %s", err);
    /* the same through the environment */
    const char *old = getenv("KF_WEBGPU_LIB");
    char *saved = old ? strdup(old) : NULL;
    setenv("KF_WEBGPU_LIB", path, 1);
    st = create_with(NULL, err, sizeof err);
    if (saved) {
        setenv("KF_WEBGPU_LIB", saved, 1);
        free(saved);
    } else {
        unsetenv("KF_WEBGPU_LIB");
    }
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "KF_WEBGPU_LIB=%s -> %s: %s", path, kf_status_str(st), err);
    KT_CHECK(strstr(err, "wgpu-native") && strstr(err, "supports Dawn"), "%s", err);
}

KT_CPU_TEST(unit, loader_refuses_an_unknown_implementation) {
    char err[2048];
    const char *path = KF_FAKE_WGPU_DIR "/libkfuse_fake_unknown.so";
    kf_status st = create_with(path, err, sizeof err);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "%s -> %s: %s", path, kf_status_str(st), err);
    KT_CHECK(strstr(err, "libkfuse_fake_unknown.so") && strstr(err, "Dawn"), "%s", err);
}

KT_TEST(unit, loader_says_why_it_chose_the_library) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    KT_CHECK(info.library[0] && info.library_source[0], "library %s, source '%s'", info.library,
             info.library_source);
    if (getenv("KF_WEBGPU_LIB")) {
        KT_CHECK(!strcmp(info.library_source, "KF_WEBGPU_LIB"), "%s", info.library_source);
    } else {
        KT_CHECK(strstr(info.library_source, "deps/dawn") || strstr(info.library_source, "beside"),
                 "%s", info.library_source);
    }
}
