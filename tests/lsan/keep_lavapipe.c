/* Preloaded (LD_PRELOAD) into the sanitizer build's tests only: a dlclose that leaves lavapipe's
 * library (libvulkan_lvp.so) loaded and passes every other call through.
 *
 * Why: on AMD Zen processors Mesa's CPU detection (lavapipe's, Mesa 25) keeps a small block
 * (128 bytes, the L3 caches' affinity masks) that only a global of the driver points to. The
 * Vulkan loader unloads the driver when Dawn destroys its instance, and at exit LeakSanitizer then
 * finds the block unreferenced and reports it as a leak "from <unknown module>", which fails
 * every GPU test process of the asan-ubsan preset on such a machine (and none on Intel). With
 * the driver kept loaded its globals are scanned and the block is not a leak; kfuse's own
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
