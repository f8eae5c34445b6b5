/* Finding a webgpu.h implementation at run time and resolving the entry points kfuse calls.
 *
 * Search order (the first that opens wins):
 *   1. kf_context_desc.library_path, when given (no fallback: a wrong path is an error);
 *   2. $KF_WEBGPU_LIB, when set (likewise no fallback);
 *   3. the folder scripts/setup.sh fills, deps/dawn (libwebgpu_wrapper.so or libwebgpu_dawn.so
 *      in it): first in the source tree kfuse was built from (KF_DEFAULT_DAWN_DIR), then beside
 *      the running program's build folder (<exe>/../../deps/dawn, for a tree copied elsewhere),
 *      then under the working directory;
 *   4. the system's libwebgpu_dawn.so, then libwgpu_native.so, through the dynamic loader's path.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"

#ifndef KF_DEFAULT_DAWN_DIR
#define KF_DEFAULT_DAWN_DIR "deps/dawn"
#endif

#define KF__HOW_TO_GET                                                                             \
    "Run scripts/setup.sh (it fetches Dawn into deps/dawn), or set KF_WEBGPU_LIB to the path "     \
    "of a webgpu.h library such as libwebgpu_dawn.so."

static void append(char *buf, size_t size, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(buf);
    if (used + 1 < size) {
        snprintf(buf + used, size - used, fmt, a, b);
    }
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

static kf_status finish(void *library, const char *path, kf__wgpu_api *api, void **out,
                        char *opened, size_t opened_size, char *err, size_t err_size) {
    const char *missing = NULL;
    if (!resolve(library, api, &missing)) {
        dlclose(library);
        snprintf(err, err_size,
                 "%s is not a usable webgpu.h library: it has no %s. " KF__HOW_TO_GET, path,
                 missing);
        return KF_ERROR_NO_LIBRARY;
    }
    *out = library;
    char resolved[PATH_MAX];
    snprintf(opened, opened_size, "%s", realpath(path, resolved) ? resolved : path);
    return KF_OK;
}

kf_status kf__wgpu_load(const char *path, kf__wgpu_api *api, void **library, char *opened,
                        size_t opened_size, char *err, size_t err_size) {
    char tried[2048] = "";
    *library = NULL;
    const char *env = getenv("KF_WEBGPU_LIB");
    const char *explicit_path = path ? path : (env && *env ? env : NULL);
    if (explicit_path) {
        void *lib = open_one(explicit_path, tried, sizeof tried);
        if (!lib) {
            snprintf(err, err_size, "could not load the WebGPU library %s%s:%s\n" KF__HOW_TO_GET,
                     explicit_path, path ? "" : " (from KF_WEBGPU_LIB)", tried);
            return KF_ERROR_NO_LIBRARY;
        }
        return finish(lib, explicit_path, api, library, opened, opened_size, err, err_size);
    }

    /* build/<preset>/kfuse -> deps/dawn two folders up. */
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
    const char *candidates[] = {
        KF_DEFAULT_DAWN_DIR "/libwebgpu_wrapper.so",
        KF_DEFAULT_DAWN_DIR "/libwebgpu_dawn.so",
        beside_exe,
        "./deps/dawn/libwebgpu_wrapper.so",
        "libwebgpu_dawn.so",
        "libwgpu_native.so",
    };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        if (!candidates[i][0]) {
            continue;
        }
        void *lib = open_one(candidates[i], tried, sizeof tried);
        if (lib) {
            return finish(lib, candidates[i], api, library, opened, opened_size, err, err_size);
        }
    }
    snprintf(err, err_size, "none of these could be loaded:%s\n" KF__HOW_TO_GET, tried);
    return KF_ERROR_NO_LIBRARY;
}
