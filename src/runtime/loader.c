/* Finding a webgpu.h implementation at run time and resolving the entry points kfuse calls.
 *
 * Search order (the first that opens and is an implementation kfuse supports wins):
 *   1. kf_context_desc.library_path, when given (no fallback: a wrong path is an error);
 *   2. beside libkfuse itself (found with dladdr): <dir>/kfuse/libwebgpu_wrapper.so, where
 *      `cmake --install` puts Dawn next to lib/libkfuse.so; for a program linked with the static
 *      library, the same folder relative to the program (<bin>/../lib/kfuse/);
 *   3. $KF_WEBGPU_LIB, when set (no fallback either);
 *   4. the build tree's deps/dawn (KF_DEFAULT_DAWN_DIR, compiled in unless KF_BUILD_TREE_DAWN
 *      is OFF; $KF_NO_BUILD_TREE_DAWN=1 skips it at run time), then beside the running
 *      program's build folder (<exe>/../../deps/dawn, a tree copied elsewhere), then
 *      ./deps/dawn;
 *   5. the system's libwebgpu_dawn.so, then libwgpu_native.so, through the dynamic loader.
 * Each library is identified (impl.c) before it is used: a library that is not an
 * implementation kfuse supports is refused, and the search goes on past it.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"

#ifndef KF_DEFAULT_DAWN_DIR
#define KF_DEFAULT_DAWN_DIR ""
#endif
/* The library folder seen from the program folder of an install (../lib on most systems). */
#ifndef KF_INSTALL_BIN_TO_LIB
#define KF_INSTALL_BIN_TO_LIB "../lib"
#endif
#define KF__BUNDLED_NAME "kfuse/libwebgpu_wrapper.so"

#define KF__HOW_TO_GET                                                                             \
    "Run scripts/setup.sh (it fetches Dawn into deps/dawn), install kfuse with `cmake --install` " \
    "(Dawn goes beside libkfuse), or set KF_WEBGPU_LIB to the path of Dawn's webgpu.h library."

/* Appends to the list of what was tried; a list too long for buf ends in "..." (truncation is
 * expected and harmless here, so the count is looked at rather than warned about). */
static void append(char *buf, size_t size, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(buf);
    if (used + 1 < size) {
        int n = snprintf(buf + used, size - used, fmt, a, b);
        if (n > 0 && (size_t)n >= size - used && size > 4) {
            memcpy(buf + size - 4, "...", 4);
        }
    }
}

static bool has_symbol(void *library, const char *name) {
    return dlsym(library, name) != NULL;
}

/* Resolves every entry point; on a missing one, names it. */
static bool resolve(void *library, kf__wgpu_api *api, const char **missing) {
    memset(api, 0, sizeof *api);
    void *sym;
#define KF_WGPU_RESOLVE(ret, field, symbol, params)                                                \
    sym = dlsym(library, #symbol);                                                                 \
    if (!sym) {                                                                                    \
        *missing = #symbol;                                                                        \
        return false;                                                                              \
    }                                                                                              \
    memcpy(&api->field, &sym, sizeof sym);
    KF_WGPU_PROCS(KF_WGPU_RESOLVE)
#undef KF_WGPU_RESOLVE
    sym = dlsym(library, "wgpuDeviceForceLoss");
    memcpy(&api->device_force_loss, &sym, sizeof sym);
    sym = dlsym(library, "wgpuDeviceCreateComputePipelineAsync");
    memcpy(&api->device_create_compute_pipeline_async, &sym, sizeof sym);
    sym = dlsym(library, "wgpuDeviceTick");
    memcpy(&api->device_tick, &sym, sizeof sym);
    return true;
}

/* Opens one candidate. RTLD_NODELETE: Dawn and the drivers it loads start threads and register
 * exit handlers, so the library stays mapped for the life of the process once opened. */
static void *open_one(const char *path, char *tried, size_t tried_size) {
    dlerror();
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!library) {
        const char *why = dlerror();
        size_t n = strlen(path);
        if (why && !strncmp(why, path, n) && !strncmp(why + n, ": ", 2)) {
            why += n + 2; /* dlerror repeats the path */
        }
        append(tried, tried_size, "\n  %s: %s", path, why ? why : "cannot be opened");
    }
    return library;
}

/* Identifies and resolves an opened library. KF_ERROR_NO_LIBRARY (with err set) when it is not
 * an implementation kfuse supports or lacks an entry point. */
static kf_status finish(void *library, const char *path, kf__wgpu_loaded *out, char *err,
                        size_t err_size) {
    char supported[128];
    kf__wgpu_impl_supported(supported, sizeof supported);
    const kf__wgpu_impl *impl = kf__wgpu_impl_identify(has_symbol, library);
    const char *missing = NULL;
    if (!impl && !resolve(library, &out->api, &missing)) {
        dlclose(library);
        snprintf(err, err_size,
                 "%s is not a usable webgpu.h library: it has no %s. " KF__HOW_TO_GET, path,
                 missing);
        return KF_ERROR_NO_LIBRARY;
    }
    if (!impl || !impl->supported) {
        dlclose(library);
        if (impl) {
            snprintf(err, err_size,
                     "%s is %s, which kfuse does not support: %s. kfuse supports %s (the build "
                     "scripts/setup.sh pins). " KF__HOW_TO_GET,
                     path, impl->name, impl->why, supported);
        } else {
            snprintf(err, err_size,
                     "%s is not a webgpu.h implementation kfuse knows (it exports none of the "
                     "symbols that identify one); kfuse supports %s. " KF__HOW_TO_GET,
                     path, supported);
        }
        return KF_ERROR_NO_LIBRARY;
    }
    if (!resolve(library, &out->api, &missing)) {
        dlclose(library);
        snprintf(err, err_size,
                 "%s is not a usable webgpu.h library: it has no %s. " KF__HOW_TO_GET, path,
                 missing);
        return KF_ERROR_NO_LIBRARY;
    }
    out->library = library;
    out->impl = impl;
    char resolved[PATH_MAX];
    snprintf(out->path, sizeof out->path, "%.*s", (int)sizeof out->path - 1,
             realpath(path, resolved) ? resolved : path);
    return KF_OK;
}

/* An object of this file, whose address dladdr maps to the file it was loaded from. */
static const char g_anchor = 0;

/* The folder of the file that holds this code: libkfuse.so, or the program it is linked into. */
static bool own_folder(char *out, size_t size, bool *is_program) {
    Dl_info info;
    if (!dladdr(&g_anchor, &info) || !info.dli_fname || !info.dli_fname[0]) {
        return false;
    }
    char resolved[PATH_MAX];
    const char *file = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    const char *slash = strrchr(file, '/');
    if (!slash) {
        return false;
    }
    const char *base = slash + 1;
    *is_program = strncmp(base, "lib", 3) != 0 || !strstr(base, ".so");
    snprintf(out, size, "%.*s", (int)(slash - file), file);
    return true;
}

static bool env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

#ifndef KF_BUILD_VKMASK_DIR
#define KF_BUILD_VKMASK_DIR ""
#endif
#define KF__VKMASK_MANIFEST "VkLayer_kfuse_vendor_mask.json"

bool kf__vkmask_dir(char *out, size_t size) {
    char folder[PATH_MAX];
    bool is_program = false;
    char dir[PATH_MAX + 64], manifest[PATH_MAX + 128];
    if (own_folder(folder, sizeof folder, &is_program)) {
        snprintf(dir, sizeof dir, "%s/%skfuse/vkmask", folder,
                 is_program ? KF_INSTALL_BIN_TO_LIB "/" : "");
        snprintf(manifest, sizeof manifest, "%s/" KF__VKMASK_MANIFEST, dir);
        if (access(manifest, R_OK) == 0) {
            snprintf(out, size, "%.*s", (int)size - 1, dir);
            return true;
        }
    }
    if (KF_BUILD_VKMASK_DIR[0] && !env_set("KF_NO_BUILD_TREE_DAWN")) {
        snprintf(manifest, sizeof manifest, "%s/" KF__VKMASK_MANIFEST, KF_BUILD_VKMASK_DIR);
        if (access(manifest, R_OK) == 0) {
            snprintf(out, size, "%s", KF_BUILD_VKMASK_DIR);
            return true;
        }
    }
    return false;
}

kf_status kf__wgpu_load(const char *path, kf__wgpu_loaded *out, char *err, size_t err_size) {
    char tried[3072] = "";
    memset(out, 0, sizeof *out);
    if (path) {
        void *lib = open_one(path, tried, sizeof tried);
        if (!lib) {
            snprintf(err, err_size, "could not load the WebGPU library %s:%s\n" KF__HOW_TO_GET,
                     path, tried);
            return KF_ERROR_NO_LIBRARY;
        }
        snprintf(out->why, sizeof out->why, "kf_context_desc.library_path");
        return finish(lib, path, out, err, err_size);
    }

    /* 2: beside libkfuse, as installed */
    char folder[PATH_MAX];
    bool is_program = false;
    if (own_folder(folder, sizeof folder, &is_program)) {
        char bundled[PATH_MAX + 64];
        snprintf(bundled, sizeof bundled, "%s/%s%s", folder,
                 is_program ? KF_INSTALL_BIN_TO_LIB "/" : "", KF__BUNDLED_NAME);
        if (access(bundled, F_OK) == 0) {
            void *lib = open_one(bundled, tried, sizeof tried);
            if (lib) {
                snprintf(out->why, sizeof out->why, "installed beside %s",
                         is_program ? "this program" : "libkfuse");
                char refused[1024];
                if (finish(lib, bundled, out, refused, sizeof refused) == KF_OK) {
                    return KF_OK;
                }
                append(tried, sizeof tried, "\n  %s: refused: %s", bundled, refused);
            }
        }
    }

    /* 3: the environment */
    const char *env = getenv("KF_WEBGPU_LIB");
    if (env && *env) {
        void *lib = open_one(env, tried, sizeof tried);
        if (!lib) {
            snprintf(
                err, err_size,
                "could not load the WebGPU library %s (from KF_WEBGPU_LIB):%s\n" KF__HOW_TO_GET,
                env, tried);
            return KF_ERROR_NO_LIBRARY;
        }
        snprintf(out->why, sizeof out->why, "KF_WEBGPU_LIB");
        return finish(lib, env, out, err, err_size);
    }

    /* 4 and 5: build trees, then the system. build/<preset>/kfuse -> deps/dawn two folders up. */
    char beside_exe[1100] = "";
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(beside_exe, sizeof beside_exe, "%s/../../deps/dawn/libwebgpu_wrapper.so", exe);
        }
    }
    bool build_tree = KF_DEFAULT_DAWN_DIR[0] && !env_set("KF_NO_BUILD_TREE_DAWN");
    static const char *const why[] = {
        "the build tree's deps/dawn",
        "the build tree's deps/dawn",
        "deps/dawn beside this program's build folder",
        "./deps/dawn",
        "the system's library path",
        "the system's library path",
    };
    const char *candidates[] = {
        build_tree ? KF_DEFAULT_DAWN_DIR "/libwebgpu_wrapper.so" : "",
        build_tree ? KF_DEFAULT_DAWN_DIR "/libwebgpu_dawn.so" : "",
        build_tree ? beside_exe : "",
        build_tree ? "./deps/dawn/libwebgpu_wrapper.so" : "",
        "libwebgpu_dawn.so",
        "libwgpu_native.so",
    };
    char refused[1024] = "";
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        if (!candidates[i][0]) {
            continue;
        }
        void *lib = open_one(candidates[i], tried, sizeof tried);
        if (!lib) {
            continue;
        }
        snprintf(out->why, sizeof out->why, "%s", why[i]);
        kf_status st = finish(lib, candidates[i], out, refused, sizeof refused);
        if (st == KF_OK) {
            return st;
        }
        append(tried, sizeof tried, "\n  %s: refused: %s", candidates[i], refused);
    }
    snprintf(err, err_size, "none of these could be loaded:%s\n" KF__HOW_TO_GET, tried);
    return KF_ERROR_NO_LIBRARY;
}
