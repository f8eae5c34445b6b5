/* Preloaded (LD_PRELOAD) into the sanitizer build's tests only: a dlclose that leaves lavapipe's
 * library (libvulkan_lvp.so) loaded and passes every other call through.
 *
 * Why: on an AMD EPYC machine (and not on the Intel ones CI and earlier sessions ran on) lavapipe
 * (Mesa 25.0.7) keeps one 128-byte block, realloc'd once per process, that only a global of the
 * driver points to: most likely Mesa's CPU detection, which records the L3 caches' topology on AMD
 * Zen only. The Vulkan loader unloads the driver when Dawn destroys its instance, and at exit
 * LeakSanitizer finds the block unreferenced and reports it as a leak "from <unknown module>",
 * failing every GPU test process of the asan-ubsan preset. Keeping each library loaded in turn
 * showed it is lavapipe's (keeping the loader, Dawn or any other driver loaded does not hide it).
 * With the driver kept loaded its globals are scanned and the block is not a leak; kfuse's own
 * allocations are checked as before. Built without the sanitizers: it runs before they start. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <string.h>

typedef int (*dlclose_fn)(void *);

int dlclose(void *handle) {
    static dlclose_fn real_dlclose;
    struct link_map *map = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
        strstr(map->l_name, "libvulkan_lvp.so")) {
        return 0; /* loaded once more than closed: it stays */
    }
    if (!real_dlclose) {
        void *sym = dlsym(RTLD_NEXT, "dlclose");
        memcpy(&real_dlclose, &sym, sizeof real_dlclose);
    }
    return real_dlclose ? real_dlclose(handle) : -1;
}
