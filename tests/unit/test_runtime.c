/* The runtime against a real WebGPU implementation (Dawn on lavapipe in CI): buffers, pipelines,
 * dispatch, timing, and every way an error comes back. Each GPU test poisons its outputs first,
 * so an element a kernel fails to write cannot pass, and keeps guard words past the end, so a
 * write out of bounds cannot either. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/runtime.h"

#define POISON 0x7fc00000u /* a quiet NaN */

/* Environment variables a test changes, put back afterwards. */
typedef struct saved_env {
    const char *name;
    char *value;
} saved_env;

static saved_env env_set(const char *name, const char *value) {
    const char *old = getenv(name);
    saved_env s = {name, old ? strdup(old) : NULL};
    if (value) {
        setenv(name, value, 1);
    } else {
        unsetenv(name);
    }
    return s;
}

static void env_restore(saved_env s) {
    if (s.value) {
        setenv(s.name, s.value, 1);
        free(s.value);
    } else {
        unsetenv(s.name);
    }
}

static kf_pipeline *compile(kf_context *ctx, const char *wgsl, const kf_binding_kind *kinds,
                            uint32_t kind_count, const kf_constant *constants,
                            uint32_t constant_count) {
    kf_pipeline_desc desc = {0};
    desc.wgsl = wgsl;
    desc.bindings = kinds;
    desc.binding_count = kind_count;
    desc.constants = constants;
    desc.constant_count = constant_count;
    kf_pipeline *p = NULL;
    if (kf_pipeline_get(ctx, &desc, &p) != KF_OK) {
        fprintf(stderr, "    compile failed: %s\n", kf_context_last_error(ctx));
        return NULL;
    }
    return p;
}

static const kf_binding_kind in_out[2] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ_WRITE};

/* --- context --- */

KT_TEST(unit, runtime_adapter_info) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    KT_CHECK(info.device[0] != '\0', "adapter has no device name");
    KT_CHECK(strcmp(info.backend, "unknown") != 0, "backend unknown");
    KT_CHECK(info.library[0] != '\0', "no library path");
    KT_CHECK(info.max_buffer_size >= 256u << 20, "maxBufferSize %llu below WebGPU's minimum",
             (unsigned long long)info.max_buffer_size);
    KT_CHECK(info.max_storage_buffer_binding_size >= 128u << 20,
             "maxStorageBufferBindingSize %llu below WebGPU's minimum",
             (unsigned long long)info.max_storage_buffer_binding_size);
    KT_CHECK(info.max_compute_workgroups_per_dimension >= 65535, "workgroups per dimension %u",
             info.max_compute_workgroups_per_dimension);
    KT_CHECK(info.max_compute_invocations_per_workgroup >= 256, "invocations %u",
             info.max_compute_invocations_per_workgroup);
    if (info.has_subgroups) {
        KT_CHECK(info.subgroup_min_size >= 1 && info.subgroup_min_size <= info.subgroup_max_size,
                 "subgroup sizes %u..%u", info.subgroup_min_size, info.subgroup_max_size);
    }
    KT_CHECK(kf_context_adapter_info(NULL, &info) == KF_ERROR_INVALID_ARGUMENT, "NULL ctx");
}

KT_CPU_TEST(unit, runtime_library_missing) {
    char err[1024];
    kf_context_desc desc = {0};
    desc.library_path = "/nonexistent/libwebgpu_dawn.so";
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = (kf_context *)&desc; /* must come back NULL */
    kf_status st = kf_context_create(&desc, &ctx);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "status %s", kf_status_str(st));
    KT_CHECK(ctx == NULL, "context not NULL after failure");
    KT_CHECK(strstr(err, "/nonexistent/libwebgpu_dawn.so"), "message does not name the path: %s",
             err);
    KT_CHECK(strstr(err, "setup.sh") && strstr(err, "KF_WEBGPU_LIB"),
             "message does not say how to get a library: %s", err);

    /* The same through the environment. */
    saved_env saved = env_set("KF_WEBGPU_LIB", "/nonexistent/libwgpu_native.so");
    desc.library_path = NULL;
    st = kf_context_create(&desc, &ctx);
    env_restore(saved);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "status %s", kf_status_str(st));
    KT_CHECK(strstr(err, "KF_WEBGPU_LIB") && strstr(err, "libwgpu_native.so"), "message: %s", err);
}

KT_CPU_TEST(unit, runtime_library_not_webgpu) {
    char err[1024];
    kf_context_desc desc = {0};
    desc.library_path = "libm.so.6"; /* opens fine, has no wgpu* */
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    kf_status st = kf_context_create(&desc, &ctx);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY, "status %s", kf_status_str(st));
    KT_CHECK(strstr(err, "wgpuCreateInstance"), "message does not name the missing entry: %s", err);
}

KT_CPU_TEST(unit, runtime_backend_unknown) {
    char err[1024];
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    saved_env saved = env_set("KF_BACKEND", "directx9");
    kf_status st = kf_context_create(&desc, &ctx);
    env_restore(saved);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "status %s", kf_status_str(st));
    KT_CHECK(strstr(err, "directx9") && strstr(err, "vulkan"), "message: %s", err);
    KT_CHECK(kf_context_create(&desc, NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL out accepted");
}

/* With no driver at all, the context must fail and say what to install, not fall back to
 * Dawn's Null backend (which computes nothing). */
KT_CPU_TEST(unit, runtime_no_adapter) {
    char err[2048];
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    saved_env icd = env_set("VK_ICD_FILENAMES", "/nonexistent/icd.json");
    saved_env drivers = env_set("VK_DRIVER_FILES", "/nonexistent/icd.json");
    saved_env egl = env_set("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent/egl_vendor.json");
    saved_env backend = env_set("KF_BACKEND", NULL);
    kf_status st = kf_context_create(&desc, &ctx);
    env_restore(backend);
    env_restore(egl);
    env_restore(drivers);
    env_restore(icd);
    if (st == KF_OK) {
        kf_adapter_info info;
        kf_context_adapter_info(ctx, &info);
        kf_context_destroy(ctx);
        KT_CHECK(false, "without drivers, the context got adapter '%s' (%s)", info.device,
                 info.backend);
    }
    KT_CHECK(st == KF_ERROR_NO_ADAPTER, "status %s: %s", kf_status_str(st), err);
    KT_CHECK(strstr(err, "mesa-vulkan-drivers") && strstr(err, "KF_BACKEND=gles"),
             "message does not say what to install: %s", err);
}

/* --- buffers --- */

KT_TEST(unit, runtime_buffer_round_trips) {
    KT_NEED_GPU(ctx);
    static const uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 4099, 65537, (1u << 20) + 3};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        kf_buffer *buf = NULL;
        KT_CHECK_OK(kf_buffer_create(ctx, n, &buf));
        KT_CHECK(kf_buffer_size(buf) == n, "size %llu", (unsigned long long)kf_buffer_size(buf));
        uint8_t *mirror = malloc(n);
        uint8_t *back = malloc(n);
        for (uint64_t i = 0; i < n; i++) {
            mirror[i] = (uint8_t)kt_rand_u64();
        }
        KT_CHECK_OK(kf_buffer_fill_u32(buf, POISON));
        KT_CHECK_OK(kf_buffer_upload(buf, 0, mirror, n));
        memset(back, 0, n);
        KT_CHECK_OK(kf_buffer_download(buf, 0, back, n));
        KT_CHECK(memcmp(back, mirror, n) == 0, "size %llu: round trip differs",
                 (unsigned long long)n);

        /* Unaligned pieces: the bytes around each piece must keep their values. */
        for (int k = 0; k < 12; k++) {
            uint64_t off = kt_rand_u64() % n;
            uint64_t len = kt_rand_u64() % (n - off + 1);
            if (k < 4 && n - off > 9) {
                len = (uint64_t)k + 1; /* pieces smaller than a word */
            }
            uint8_t piece[4096];
            uint8_t *src = len <= sizeof piece ? piece : malloc(len);
            for (uint64_t i = 0; i < len; i++) {
                src[i] = (uint8_t)kt_rand_u64();
            }
            KT_CHECK_OK(kf_buffer_upload(buf, off, src, len));
            memcpy(mirror + off, src, len);
            if (src != piece) {
                free(src);
            }
        }
        KT_CHECK_OK(kf_buffer_download(buf, 0, back, n));
        for (uint64_t i = 0; i < n; i++) {
            KT_CHECK(back[i] == mirror[i], "size %llu: byte %llu is %u, expected %u",
                     (unsigned long long)n, (unsigned long long)i, back[i], mirror[i]);
        }
        /* Partial downloads at odd offsets. */
        for (int k = 0; k < 8; k++) {
            uint64_t off = kt_rand_u64() % n;
            uint64_t len = kt_rand_u64() % (n - off + 1);
            memset(back, 0xEE, n);
            KT_CHECK_OK(kf_buffer_download(buf, off, back, len));
            KT_CHECK(memcmp(back, mirror + off, len) == 0, "size %llu: download [%llu, +%llu)",
                     (unsigned long long)n, (unsigned long long)off, (unsigned long long)len);
            if (len < n) {
                KT_CHECK(back[len] == 0xEE, "download wrote past the %llu bytes asked",
                         (unsigned long long)len);
            }
        }
        free(mirror);
        free(back);
        kf_buffer_destroy(buf);
    }
    kf_buffer_destroy(NULL); /* a no-op */
}

KT_TEST(unit, runtime_buffer_fill) {
    KT_NEED_GPU(ctx);
    kf_buffer *buf = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 4099, &buf));
    KT_CHECK_OK(kf_buffer_fill_u32(buf, 0xDEADBEEFu));
    uint8_t back[4099];
    KT_CHECK_OK(kf_buffer_download(buf, 0, back, sizeof back));
    const uint8_t pattern[4] = {0xEF, 0xBE, 0xAD, 0xDE}; /* little-endian words */
    for (size_t i = 0; i < sizeof back; i++) {
        KT_CHECK(back[i] == pattern[i % 4], "byte %zu is 0x%02x", i, back[i]);
    }
    kf_buffer_destroy(buf);
}

KT_TEST(unit, runtime_buffer_bad_arguments) {
    KT_NEED_GPU(ctx);
    kf_buffer *buf = NULL;
    KT_CHECK(kf_buffer_create(ctx, 0, &buf) == KF_ERROR_INVALID_ARGUMENT, "size 0 accepted");
    KT_CHECK(buf == NULL, "buffer returned on failure");
    KT_CHECK(strstr(kf_context_last_error(ctx), "size"), "message: %s", kf_context_last_error(ctx));
    KT_CHECK(kf_buffer_create(ctx, 16, NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL out accepted");
    KT_CHECK_OK(kf_buffer_create(ctx, 10, &buf));
    uint8_t bytes[16] = {0};
    kf_status st = kf_buffer_upload(buf, 8, bytes, 3);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "upload past the end: %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "offset 8") &&
                 strstr(kf_context_last_error(ctx), "10 bytes"),
             "message: %s", kf_context_last_error(ctx));
    st = kf_buffer_download(buf, 11, bytes, 0);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "download offset past the end: %s",
             kf_status_str(st));
    st = kf_buffer_upload(buf, 0, NULL, 4);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "NULL data: %s", kf_status_str(st));
    KT_CHECK_OK(kf_buffer_upload(buf, 10, NULL, 0)); /* empty at the end: fine */
    KT_CHECK(kf_buffer_upload(NULL, 0, bytes, 1) == KF_ERROR_INVALID_ARGUMENT, "NULL buffer");
    kf_buffer_destroy(buf);
}

KT_TEST(unit, runtime_buffer_above_limit) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    kf_buffer *buf = NULL;
    kf_status st = kf_buffer_create(ctx, info.max_buffer_size + 1, &buf);
    KT_CHECK(st == KF_ERROR_LIMIT, "status %s", kf_status_str(st));
    KT_CHECK(buf == NULL, "buffer returned on failure");
    KT_CHECK(strstr(kf_context_last_error(ctx), "maxBufferSize"), "message: %s",
             kf_context_last_error(ctx));
    st = kf_buffer_create(ctx, UINT64_MAX, &buf);
    KT_CHECK(st == KF_ERROR_LIMIT, "UINT64_MAX: status %s", kf_status_str(st));
}

/* The device running out of memory is a status and a message, and the context goes on. */
KT_TEST(unit, runtime_buffer_out_of_memory) {
    KT_NEED_GPU(ctx);
    kf_status st = kf__context_fake_oom(ctx);
    KT_CHECK(st == KF_OK, "this library cannot simulate out of memory: %s", kf_status_str(st));
    kf_buffer *buf = NULL;
    st = kf_buffer_create(ctx, 1024, &buf);
    KT_CHECK(st == KF_ERROR_OUT_OF_MEMORY, "status %s", kf_status_str(st));
    KT_CHECK(buf == NULL, "buffer returned on failure");
    KT_CHECK(strstr(kf_context_last_error(ctx), "kf_buffer_create"), "message: %s",
             kf_context_last_error(ctx));
    KT_CHECK_OK(kf_buffer_create(ctx, 1024, &buf));
    KT_CHECK_OK(kf_buffer_fill_u32(buf, 7));
    uint32_t v[256];
    KT_CHECK_OK(kf_buffer_download(buf, 0, v, sizeof v));
    KT_CHECK(v[0] == 7 && v[255] == 7, "the buffer after the failure holds %u %u", v[0], v[255]);
    kf_buffer_destroy(buf);
}

KT_TEST(unit, runtime_binding_above_limit) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    uint64_t size = info.max_storage_buffer_binding_size + 4;
    KT_CHECK(size <= info.max_buffer_size, "this device binds whole buffers; nothing to check");
    static const char *wgsl = "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
                              "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                              "@compute @workgroup_size(1) fn main() { y[0] = x[0]; }\n";
    kf_pipeline *p = compile(ctx, wgsl, in_out, 2, NULL, 0);
    KT_CHECK(p, "compile");
    kf_buffer *big = NULL, *small = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, size, &big));
    KT_CHECK_OK(kf_buffer_create(ctx, 4, &small));
    kf_buffer *io[2] = {big, small};
    kf_dispatch d = {p, io, 2, {1, 1, 1}};
    kf_status st = kf_context_run(ctx, &d, 1);
    KT_CHECK(st == KF_ERROR_LIMIT, "status %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "maxStorageBufferBindingSize"), "message: %s",
             kf_context_last_error(ctx));
    kf_buffer_destroy(big);
    kf_buffer_destroy(small);
}

/* --- kernels and grids --- */

/* y[i] = 3 x[i] + (i mod 7) for i < N; the grid is linearised so it may be folded. */
static const char *const affine_wgsl =
    "override N: u32;\n"
    "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
    "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
    "@compute @workgroup_size(64)\n"
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    "        @builtin(local_invocation_index) lid: u32) {\n"
    "    let i = (wid.x + wid.y * nwg.x) * 64u + lid;\n"
    "    if (i >= N) {\n"
    "        return;\n"
    "    }\n"
    "    y[i] = 3.0 * x[i] + f32(i % 7u);\n"
    "}\n";

static void check_affine(kf_context *ctx, uint32_t n) {
    enum { GUARD = 64 };
    kf_constant constants[1] = {{"N", (double)n}};
    kf_pipeline *p = compile(ctx, affine_wgsl, in_out, 2, constants, 1);
    KT_CHECK(p, "compile");
    float *x = malloc((size_t)n * 4);
    uint32_t *y = malloc(((size_t)n + GUARD) * 4);
    for (uint32_t i = 0; i < n; i++) {
        x[i] = kt_rand_f32(-4.0f, 4.0f);
    }
    kf_buffer *bx = NULL, *by = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, (uint64_t)n * 4, &bx));
    KT_CHECK_OK(kf_buffer_create(ctx, ((uint64_t)n + GUARD) * 4, &by));
    KT_CHECK_OK(kf_buffer_upload(bx, 0, x, (uint64_t)n * 4));
    KT_CHECK_OK(kf_buffer_fill_u32(by, POISON));
    kf_buffer *io[2] = {bx, by};
    kf_dispatch d = {p, io, 2, {(n + 63) / 64, 1, 1}};
    KT_CHECK_OK(kf_context_run(ctx, &d, 1));
    KT_CHECK_OK(kf_buffer_download(by, 0, y, ((uint64_t)n + GUARD) * 4));
    for (uint32_t i = 0; i < n; i++) {
        float got;
        memcpy(&got, &y[i], 4);
        double want = 3.0 * (double)x[i] + (double)(i % 7);
        KT_CHECK(fabs((double)got - want) <= 1e-6 * fmax(1.0, fabs(want)),
                 "n=%u: y[%u] = %g, expected %g%s", n, i, (double)got, want,
                 isnan(got) ? " (never written)" : "");
    }
    for (uint32_t i = n; i < n + GUARD; i++) {
        KT_CHECK(y[i] == POISON, "n=%u: guard word %u overwritten (0x%08x)", n, i - n, y[i]);
    }
    kf_buffer_destroy(bx);
    kf_buffer_destroy(by);
    free(x);
    free(y);
}

KT_TEST(unit, runtime_kernel_1) {
    KT_NEED_GPU(ctx);
    check_affine(ctx, 1);
}

KT_TEST(unit, runtime_kernel_65537) {
    KT_NEED_GPU(ctx);
    check_affine(ctx, 65537);
}

/* 2^24 elements in workgroups of 64 is 262144 workgroups, more than one dimension holds: the
 * runtime folds the grid, and the kernel must still see every element exactly once. */
KT_TEST(unit, runtime_kernel_2p24_folded) {
    KT_NEED_GPU(ctx);
    check_affine(ctx, 1u << 24);
}

KT_TEST(unit, runtime_grid_3d) {
    KT_NEED_GPU(ctx);
    static const char *wgsl =
        "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
        "@compute @workgroup_size(4, 2, 2)\n"
        "fn main(@builtin(global_invocation_id) g: vec3<u32>,\n"
        "        @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        "    let w = nwg * vec3<u32>(4u, 2u, 2u);\n"
        "    out[g.x + w.x * (g.y + w.y * g.z)] = g.x * 1000000u + g.y * 1000u + g.z;\n"
        "}\n";
    static const kf_binding_kind kinds[1] = {KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline *p = compile(ctx, wgsl, kinds, 1, NULL, 0);
    KT_CHECK(p, "compile");
    static const uint32_t grids[3][3] = {{7, 0, 0}, {3, 5, 0}, {3, 5, 7}};
    for (int t = 0; t < 3; t++) {
        uint32_t gx = grids[t][0], gy = grids[t][1] ? grids[t][1] : 1,
                 gz = grids[t][2] ? grids[t][2] : 1;
        uint32_t wx = gx * 4, wy = gy * 2, wz = gz * 2, n = wx * wy * wz;
        kf_buffer *out = NULL;
        KT_CHECK_OK(kf_buffer_create(ctx, (uint64_t)n * 4 + 16, &out));
        KT_CHECK_OK(kf_buffer_fill_u32(out, POISON));
        kf_dispatch d = {p, &out, 1, {grids[t][0], grids[t][1], grids[t][2]}};
        KT_CHECK_OK(kf_context_run(ctx, &d, 1));
        uint32_t *v = malloc((size_t)n * 4 + 16);
        KT_CHECK_OK(kf_buffer_download(out, 0, v, (uint64_t)n * 4 + 16));
        for (uint32_t z = 0; z < wz; z++) {
            for (uint32_t y = 0; y < wy; y++) {
                for (uint32_t x = 0; x < wx; x++) {
                    uint32_t got = v[x + wx * (y + wy * z)];
                    KT_CHECK(got == x * 1000000u + y * 1000u + z,
                             "grid %ux%ux%u: element (%u,%u,%u) is 0x%08x", gx, gy, gz, x, y, z,
                             got);
                }
            }
        }
        for (uint32_t i = n; i < n + 4; i++) {
            KT_CHECK(v[i] == POISON, "guard word overwritten");
        }
        free(v);
        kf_buffer_destroy(out);
    }
}

KT_TEST(unit, runtime_grid_above_limit) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    static const kf_binding_kind kinds[1] = {KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline *p = compile(ctx,
                             "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
                             "@compute @workgroup_size(1) fn main() { out[0] = 1u; }\n",
                             kinds, 1, NULL, 0);
    KT_CHECK(p, "compile");
    kf_buffer *out = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 4, &out));
    kf_dispatch d = {p, &out, 1, {1, info.max_compute_workgroups_per_dimension + 1, 1}};
    kf_status st = kf_context_run(ctx, &d, 1);
    KT_CHECK(st == KF_ERROR_LIMIT, "status %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "maxComputeWorkgroupsPerDimension"), "message: %s",
             kf_context_last_error(ctx));
    kf_buffer_destroy(out);
}

KT_TEST(unit, runtime_batched_dispatches) {
    KT_NEED_GPU(ctx);
    enum { N = 1000 };
    static const char *twice =
        "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
        "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "    if (g.x < arrayLength(&y)) { y[g.x] = 2.0 * x[g.x]; }\n"
        "}\n";
    static const char *plus_one =
        "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
        "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "    if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] + 1.0; }\n"
        "}\n";
    kf_pipeline *p1 = compile(ctx, twice, in_out, 2, NULL, 0);
    kf_pipeline *p2 = compile(ctx, plus_one, in_out, 2, NULL, 0);
    KT_CHECK(p1 && p2, "compile");
    float x[N], z[N];
    for (int i = 0; i < N; i++) {
        x[i] = kt_rand_f32(-10.0f, 10.0f);
    }
    kf_buffer *bx = NULL, *by = NULL, *bz = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &bx));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &by));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &bz));
    KT_CHECK_OK(kf_buffer_upload(bx, 0, x, sizeof x));
    KT_CHECK_OK(kf_buffer_fill_u32(by, POISON));
    KT_CHECK_OK(kf_buffer_fill_u32(bz, POISON));
    kf_buffer *io1[2] = {bx, by}, *io2[2] = {by, bz};
    kf_dispatch seq[2] = {{p1, io1, 2, {(N + 63) / 64, 1, 1}}, {p2, io2, 2, {(N + 63) / 64, 1, 1}}};
    kf_context_stats before, after;
    KT_CHECK_OK(kf_context_stats_get(ctx, &before));
    KT_CHECK_OK(kf_context_run(ctx, seq, 2));
    KT_CHECK_OK(kf_context_stats_get(ctx, &after));
    KT_CHECK(after.dispatches - before.dispatches == 2, "dispatches %llu",
             (unsigned long long)(after.dispatches - before.dispatches));
    KT_CHECK(after.submissions - before.submissions == 1, "submissions %llu",
             (unsigned long long)(after.submissions - before.submissions));
    KT_CHECK_OK(kf_buffer_download(bz, 0, z, sizeof z));
    for (int i = 0; i < N; i++) {
        KT_CHECK(z[i] == 2.0f * x[i] + 1.0f, "z[%d] = %g, expected %g", i, (double)z[i],
                 (double)(2.0f * x[i] + 1.0f));
    }
    kf_buffer_destroy(bx);
    kf_buffer_destroy(by);
    kf_buffer_destroy(bz);
}

KT_TEST(unit, runtime_dispatch_bad_arguments) {
    KT_NEED_GPU(ctx);
    kf_pipeline *p = compile(ctx,
                             "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
                             "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                             "@compute @workgroup_size(1) fn main() { y[0] = x[0]; }\n",
                             in_out, 2, NULL, 0);
    KT_CHECK(p, "compile");
    kf_buffer *b = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 4, &b));
    kf_dispatch d = {p, &b, 1, {1, 1, 1}};
    kf_status st = kf_context_run(ctx, &d, 1);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "1 buffer for 2 bindings: %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "2 bindings"), "message: %s",
             kf_context_last_error(ctx));
    KT_CHECK(kf_context_run(ctx, &d, 0) == KF_ERROR_INVALID_ARGUMENT, "count 0 accepted");
    kf_dispatch none = {NULL, NULL, 0, {1, 1, 1}};
    KT_CHECK(kf_context_run(ctx, &none, 1) == KF_ERROR_INVALID_ARGUMENT, "NULL pipeline");
    kf_buffer_destroy(b);
}

/* Binding one buffer to two writable bindings is a WebGPU validation error: it must come back
 * as a status with Dawn's message, and the context must keep working. */
KT_TEST(unit, runtime_validation_error) {
    KT_NEED_GPU(ctx);
    static const kf_binding_kind kinds[2] = {KF_BINDING_STORAGE_READ_WRITE,
                                             KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline *p = compile(ctx,
                             "@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n"
                             "@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n"
                             "@compute @workgroup_size(1) fn main() { a[0] = 1u; b[1] = 2u; }\n",
                             kinds, 2, NULL, 0);
    KT_CHECK(p, "compile");
    kf_buffer *buf = NULL, *other = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 16, &buf));
    KT_CHECK_OK(kf_buffer_create(ctx, 16, &other));
    kf_buffer *same[2] = {buf, buf};
    kf_dispatch d = {p, same, 2, {1, 1, 1}};
    kf_status st = kf_context_run(ctx, &d, 1);
    KT_CHECK(st == KF_ERROR_VALIDATION, "status %s", kf_status_str(st));
    KT_CHECK(strlen(kf_context_last_error(ctx)) > 20, "no message: %s", kf_context_last_error(ctx));
    kf_buffer *distinct[2] = {buf, other};
    d.buffers = distinct;
    KT_CHECK_OK(kf_context_run(ctx, &d, 1));
    uint32_t a[4], b[4];
    KT_CHECK_OK(kf_buffer_download(buf, 0, a, 16));
    KT_CHECK_OK(kf_buffer_download(other, 0, b, 16));
    KT_CHECK(a[0] == 1 && b[1] == 2, "after the error, the next run computed %u %u", a[0], b[1]);
    kf_buffer_destroy(buf);
    kf_buffer_destroy(other);
}

/* --- pipelines --- */

KT_TEST(unit, runtime_compile_error) {
    KT_NEED_GPU(ctx);
    static const char *wgsl = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
                              "@compute @workgroup_size(1)\n"
                              "fn main() {\n"
                              "    out[0] = undefined_thing + 1.0;\n"
                              "}\n";
    static const kf_binding_kind kinds[1] = {KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc desc = {0};
    desc.wgsl = wgsl;
    desc.bindings = kinds;
    desc.binding_count = 1;
    kf_pipeline *p = (kf_pipeline *)&desc;
    kf_status st = kf_pipeline_get(ctx, &desc, &p);
    const char *msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_COMPILE, "status %s", kf_status_str(st));
    KT_CHECK(p == NULL, "pipeline returned on failure");
    KT_CHECK(strstr(msg, "undefined_thing"), "message does not name the identifier: %s", msg);
    KT_CHECK(strstr(msg, "4:14: error"), "message does not give line 4, column 14: %s", msg);
    KT_CHECK(strstr(msg, "out[0] = undefined_thing"), "message does not quote the line: %s", msg);

    /* Compiles, but names an entry point that does not exist. */
    desc.wgsl = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
                "@compute @workgroup_size(1) fn main() { out[0] = 1.0; }\n";
    desc.entry_point = "no_such_entry";
    st = kf_pipeline_get(ctx, &desc, &p);
    KT_CHECK(st == KF_ERROR_COMPILE, "missing entry: status %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "no_such_entry"), "message: %s",
             kf_context_last_error(ctx));
}

KT_TEST(unit, runtime_pipeline_cache) {
    KT_NEED_GPU(ctx);
    kf_context_stats s0, s1, s2, s3;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    kf_constant c1[1] = {{"N", 100.0}}, c2[1] = {{"N", 101.0}};
    kf_pipeline *a = compile(ctx, affine_wgsl, in_out, 2, c1, 1);
    KT_CHECK(a, "compile");
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    kf_pipeline *b = compile(ctx, affine_wgsl, in_out, 2, c1, 1);
    KT_CHECK_OK(kf_context_stats_get(ctx, &s2));
    KT_CHECK(b == a, "second compile returned another pipeline");
    KT_CHECK(s2.pipeline_cache_hits == s1.pipeline_cache_hits + 1, "no cache hit counted");
    KT_CHECK(s2.pipelines_compiled == s1.pipelines_compiled, "the second compile compiled again");
    KT_CHECK(s1.pipelines_compiled <= s0.pipelines_compiled + 1, "first compile counted %llu",
             (unsigned long long)(s1.pipelines_compiled - s0.pipelines_compiled));
    /* Another constant value is another pipeline. */
    kf_pipeline *c = compile(ctx, affine_wgsl, in_out, 2, c2, 1);
    KT_CHECK(c && c != a, "a different constant found the same pipeline");
    KT_CHECK_OK(kf_context_stats_get(ctx, &s3));
    KT_CHECK(s3.pipelines_compiled == s2.pipelines_compiled + 1, "compiled %llu",
             (unsigned long long)(s3.pipelines_compiled - s2.pipelines_compiled));
    /* Binding kinds are part of the key too: the same WGSL with x declared read-write in the
     * layout must be built (and refused, as x is read-only in the WGSL), not found cached. */
    static const kf_binding_kind rw2[2] = {KF_BINDING_STORAGE_READ_WRITE,
                                           KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc desc = {0};
    desc.wgsl = affine_wgsl;
    desc.bindings = rw2;
    desc.binding_count = 2;
    desc.constants = c1;
    desc.constant_count = 1;
    kf_pipeline *d = NULL;
    kf_status st = kf_pipeline_get(ctx, &desc, &d);
    KT_CHECK(st == KF_ERROR_COMPILE && d == NULL, "other binding kinds: %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "ReadOnlyStorage"), "message: %s",
             kf_context_last_error(ctx));
}

KT_TEST(unit, runtime_f16) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    static const char *wgsl =
        "enable f16;\n"
        "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
        "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "    if (g.x < arrayLength(&y)) {\n"
        "        let h = f16(x[g.x]);\n"
        "        y[g.x] = f32(h * 2.0h + 0.5h);\n"
        "    }\n"
        "}\n";
    kf_pipeline_desc desc = {0};
    desc.wgsl = wgsl;
    desc.bindings = in_out;
    desc.binding_count = 2;
    kf_pipeline *p = NULL;
    kf_status st = kf_pipeline_get(ctx, &desc, &p);
    if (!info.has_f16) {
        /* Then f16 must be refused, not half-enabled. */
        KT_CHECK(st == KF_ERROR_COMPILE, "no shader-f16, yet `enable f16;` gave %s",
                 kf_status_str(st));
        return;
    }
    KT_CHECK(st == KF_OK, "shader-f16 reported but `enable f16;` fails: %s",
             kf_context_last_error(ctx));
    enum { N = 256 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)((int)(kt_rand_u64() % 512) - 256) * 0.25f; /* exact in f16 */
    }
    kf_buffer *bx = NULL, *by = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &bx));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof y, &by));
    KT_CHECK_OK(kf_buffer_upload(bx, 0, x, sizeof x));
    KT_CHECK_OK(kf_buffer_fill_u32(by, POISON));
    kf_buffer *io[2] = {bx, by};
    kf_dispatch d = {p, io, 2, {N / 64, 1, 1}};
    KT_CHECK_OK(kf_context_run(ctx, &d, 1));
    KT_CHECK_OK(kf_buffer_download(by, 0, y, sizeof y));
    for (int i = 0; i < N; i++) {
        KT_CHECK(y[i] == 2.0f * x[i] + 0.5f, "y[%d] = %g, expected %g", i, (double)y[i],
                 (double)(2.0f * x[i] + 0.5f));
    }
    kf_buffer_destroy(bx);
    kf_buffer_destroy(by);
}

KT_TEST(unit, runtime_subgroups) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    static const char *wgsl = "enable subgroups;\n"
                              "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
                              "@compute @workgroup_size(64)\n"
                              "fn main(@builtin(local_invocation_index) i: u32,\n"
                              "        @builtin(subgroup_size) size: u32) {\n"
                              "    out[2u * i] = subgroupAdd(1u);\n"
                              "    out[2u * i + 1u] = size;\n"
                              "}\n";
    static const kf_binding_kind kinds[1] = {KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc desc = {0};
    desc.wgsl = wgsl;
    desc.bindings = kinds;
    desc.binding_count = 1;
    kf_pipeline *p = NULL;
    kf_status st = kf_pipeline_get(ctx, &desc, &p);
    if (!info.has_subgroups) {
        KT_CHECK(st == KF_ERROR_COMPILE, "no subgroups, yet `enable subgroups;` gave %s",
                 kf_status_str(st));
        return;
    }
    KT_CHECK(st == KF_OK, "subgroups reported but `enable subgroups;` fails: %s",
             kf_context_last_error(ctx));
    kf_buffer *out = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 128 * 4, &out));
    KT_CHECK_OK(kf_buffer_fill_u32(out, POISON));
    kf_dispatch d = {p, &out, 1, {1, 1, 1}};
    KT_CHECK_OK(kf_context_run(ctx, &d, 1));
    uint32_t v[128];
    KT_CHECK_OK(kf_buffer_download(out, 0, v, sizeof v));
    for (int i = 0; i < 64; i++) {
        uint32_t size = v[2 * i + 1];
        KT_CHECK(size >= info.subgroup_min_size && size <= info.subgroup_max_size,
                 "subgroup size %u outside %u..%u", size, info.subgroup_min_size,
                 info.subgroup_max_size);
        KT_CHECK(v[2 * i] == size, "subgroupAdd(1) = %u in a subgroup of %u", v[2 * i], size);
    }
    kf_buffer_destroy(out);
}

/* --- timing --- */

static void check_timing(kf_context *ctx, bool expect_timestamps) {
    enum { N = 1 << 20 };
    kf_constant constants[1] = {{"N", (double)N}};
    kf_pipeline *p = compile(ctx, affine_wgsl, in_out, 2, constants, 1);
    KT_CHECK(p, "compile");
    kf_buffer *bx = NULL, *by = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, N * 4, &bx));
    KT_CHECK_OK(kf_buffer_create(ctx, N * 4, &by));
    KT_CHECK_OK(kf_buffer_fill_u32(bx, 0x3f800000u)); /* 1.0f */
    kf_buffer *io[2] = {bx, by};
    kf_dispatch d = {p, io, 2, {N / 64, 1, 1}};
    kf_timing t;
    KT_CHECK_OK(kf_context_time(ctx, &d, 1, 5, &t));
    KT_CHECK(t.median_ms > 0.0 && t.min_ms > 0.0, "times %g / %g ms not positive", t.median_ms,
             t.min_ms);
    KT_CHECK(t.min_ms <= t.median_ms, "min %g > median %g", t.min_ms, t.median_ms);
    KT_CHECK(t.gpu_timestamps == expect_timestamps, "gpu_timestamps %d, expected %d",
             t.gpu_timestamps, expect_timestamps);
    float y[4];
    KT_CHECK_OK(kf_buffer_download(by, 0, y, sizeof y));
    KT_CHECK(y[1] == 4.0f, "the timed kernel computed %g, expected 4", (double)y[1]);

    /* One by one: y = 3x + i % 7, then z = 3y + i % 7 over a sixteenth of it, in that order. */
    kf_buffer *bz = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, N * 4, &bz));
    KT_CHECK_OK(kf_buffer_fill_u32(bz, POISON));
    kf_buffer *io2[2] = {by, bz};
    kf_dispatch two[2] = {d, {p, io2, 2, {N / 64 / 16, 1, 1}}};
    double each[2] = {-1.0, -1.0};
    KT_CHECK_OK(kf_context_time_each(ctx, two, 2, 5, each, &t));
    KT_CHECK(each[0] > 0.0 && each[1] > 0.0, "dispatch times %g, %g ms not positive", each[0],
             each[1]);
    KT_CHECK(t.min_ms > 0.0 && t.min_ms <= t.median_ms && t.median_ms >= 0.5 * (each[0] + each[1]),
             "sums %g / %g ms for dispatches of %g + %g ms", t.min_ms, t.median_ms, each[0],
             each[1]);
    KT_CHECK(t.gpu_timestamps == expect_timestamps, "each: gpu_timestamps %d, expected %d",
             t.gpu_timestamps, expect_timestamps);
    float *z = malloc((N / 16 + 1) * sizeof *z);
    KT_CHECK(z, "out of memory");
    KT_CHECK_OK(kf_buffer_download(bz, 0, z, (N / 16 + 1) * sizeof *z));
    for (uint32_t i = 0; i < N / 16; i++) {
        float want = 3.0f * (3.0f + (float)(i % 7u)) + (float)(i % 7u);
        KT_CHECK(z[i] == want, "z[%u] = %g after the timed pair, expected %g", i, (double)z[i],
                 (double)want);
    }
    uint32_t past;
    memcpy(&past, &z[N / 16], 4);
    KT_CHECK(past == POISON, "z[%u] written past the second dispatch's grid", N / 16);
    free(z);
    kf_dispatch *many = calloc(2049, sizeof *many);
    double *many_ms = calloc(2049, sizeof *many_ms);
    KT_CHECK(many && many_ms, "out of memory");
    for (uint32_t i = 0; i < 2049; i++) {
        many[i] = d;
    }
    KT_CHECK(kf_context_time_each(ctx, many, 2049, 1, many_ms, &t) == KF_ERROR_LIMIT,
             "2049 dispatches timed one by one: %s", kf_context_last_error(ctx));
    free(many);
    free(many_ms);
    kf_buffer_destroy(bz);
    kf_buffer_destroy(bx);
    kf_buffer_destroy(by);
}

KT_TEST(unit, runtime_timing_positive) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    check_timing(ctx, info.has_timestamps);
}

/* A second context, without optional features: timing falls back to the wall clock. */
KT_TEST(unit, runtime_timing_wall_clock) {
    char err[1024];
    kf_context_desc desc = {0};
    desc.disable_timestamps = true;
    desc.disable_f16 = true;
    desc.disable_subgroups = true;
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    KT_CHECK(kf_context_create(&desc, &ctx) == KF_OK, "context: %s", err);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    KT_CHECK(!info.has_timestamps && !info.has_f16 && !info.has_subgroups,
             "disabled features reported enabled");
    check_timing(ctx, false);
    kf_context_destroy(ctx);
}

/* --- device loss --- */

KT_TEST(unit, runtime_device_lost) {
    char err[1024];
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    KT_CHECK(kf_context_create(&desc, &ctx) == KF_OK, "context: %s", err);
    kf_buffer *buf = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 64, &buf));
    kf_status st = kf__context_force_loss(ctx);
    KT_CHECK(st == KF_OK, "could not simulate a device loss: %s", kf_status_str(st));
    kf_buffer *another = NULL;
    st = kf_buffer_create(ctx, 64, &another);
    KT_CHECK(st == KF_ERROR_DEVICE_LOST, "after the loss, kf_buffer_create gave %s",
             kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "lost") &&
                 strstr(kf_context_last_error(ctx), "forced by a kfuse test"),
             "message: %s", kf_context_last_error(ctx));
    uint8_t bytes[4] = {1, 2, 3, 4};
    st = kf_buffer_upload(buf, 0, bytes, 4);
    KT_CHECK(st == KF_ERROR_DEVICE_LOST, "upload after the loss gave %s", kf_status_str(st));
    kf_buffer_destroy(buf);
    kf_context_destroy(ctx);
}
