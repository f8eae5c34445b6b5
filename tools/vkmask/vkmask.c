/* VK_LAYER_KFUSE_vendor_mask: a Vulkan layer that rewrites VkPhysicalDeviceProperties.vendorID.
 *
 * Dawn (the pinned mid-2025 build) never offers shader-f16 on a Vulkan device whose vendor id is
 * NVIDIA's (crbug.com/tint/2164), although the driver has shaderFloat16 and 16-bit storage. With
 * this layer on, vkGetPhysicalDeviceProperties, vkGetPhysicalDeviceProperties2 and
 * vkGetPhysicalDeviceProperties2KHR report the vendor id in KF_VKMASK_VENDOR instead (any strtoul
 * base-0 number: 0xFFFF, 65535, ...; default 0xFFFF, a vendor Dawn has no special case for).
 * KF_VKMASK_VERBOSE=1 prints one line to stderr per rewrite; otherwise the layer prints nothing.
 *
 * Enable it for one process, with no install:
 *     VK_LAYER_PATH=<build>/vkmask VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask kfuse info
 *
 * The layer declares the few Vulkan types it needs itself, so building it needs no Vulkan headers.
 * Only the layout matters: each struct below is laid out as the Vulkan headers and the loader's
 * vk_layer.h define it, up to the last member the layer reads or writes. It assumes the Linux ABI
 * (VKAPI_ATTR and VKAPI_CALL empty), as every platform kfuse runs Dawn on has.
 *
 * Dispatch: every dispatchable handle (instance, physical device, device, queue, command buffer)
 * starts with a pointer to the loader's dispatch table, the same for an instance and its physical
 * devices, and for a device and its queues. The layer keys a small table of instances and one of
 * devices by that pointer, as the Khronos sample layers do, so several instances and devices work
 * at once, up to KF_VKMASK_MAX_* of each alive together.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The Vulkan declarations the layer needs ---- */

typedef int32_t VkResult;
typedef int32_t VkStructureType;
typedef uint32_t VkBool32;
typedef struct VkInstance_T *VkInstance;
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef struct VkAllocationCallbacks VkAllocationCallbacks; /* passed through, never read */

enum {
    VK_SUCCESS = 0,
    VK_ERROR_OUT_OF_HOST_MEMORY = -1,
    VK_ERROR_INITIALIZATION_FAILED = -3,
};

/* The sType values the loader gives its own structs in the create-info chains, and the value of
 * their `function` member for the one that carries the link to the next layer. */
enum {
    VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO = 47,
    VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO = 48,
    VK_LAYER_LINK_INFO = 0,
};

/* The loader's layer-interface negotiation (interface version 2). */
enum { LAYER_NEGOTIATE_INTERFACE_STRUCT = 1, VKMASK_LAYER_INTERFACE_VERSION = 2 };

/* Every extensible Vulkan struct starts with these two members. */
typedef struct vk_chain {
    VkStructureType sType;
    const struct vk_chain *pNext;
} vk_chain;

/* The create infos' heads: flags, application info, layer and extension lists follow, which the
 * layer passes on untouched. */
typedef struct VkInstanceCreateInfo {
    VkStructureType sType;
    const void *pNext;
} VkInstanceCreateInfo;

typedef struct VkDeviceCreateInfo {
    VkStructureType sType;
    const void *pNext;
} VkDeviceCreateInfo;

typedef void (*PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance instance, const char *name);
typedef PFN_vkVoidFunction (*PFN_vkGetDeviceProcAddr)(VkDevice device, const char *name);
typedef PFN_vkVoidFunction (*PFN_GetPhysicalDeviceProcAddr)(VkInstance instance, const char *name);
typedef VkResult (*PFN_vkCreateInstance)(const VkInstanceCreateInfo *info,
                                         const VkAllocationCallbacks *alloc, VkInstance *instance);
typedef void (*PFN_vkDestroyInstance)(VkInstance instance, const VkAllocationCallbacks *alloc);
typedef VkResult (*PFN_vkCreateDevice)(VkPhysicalDevice physical_device,
                                       const VkDeviceCreateInfo *info,
                                       const VkAllocationCallbacks *alloc, VkDevice *device);
typedef void (*PFN_vkDestroyDevice)(VkDevice device, const VkAllocationCallbacks *alloc);

typedef struct VkLayerInstanceLink {
    struct VkLayerInstanceLink *pNext;
    PFN_vkGetInstanceProcAddr pfnNextGetInstanceProcAddr;
    PFN_GetPhysicalDeviceProcAddr pfnNextGetPhysicalDeviceProcAddr;
} VkLayerInstanceLink;

typedef struct VkLayerInstanceCreateInfo {
    VkStructureType sType; /* VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO */
    const void *pNext;
    int32_t function; /* VK_LAYER_LINK_INFO for the one the layer uses */
    union {
        VkLayerInstanceLink *pLayerInfo;
        PFN_vkVoidFunction pfnSetInstanceLoaderData;
        struct {
            PFN_vkVoidFunction pfnLayerCreateDevice;
            PFN_vkVoidFunction pfnLayerDestroyDevice;
        } layerDevice;
        uint32_t loaderFeatures;
    } u;
} VkLayerInstanceCreateInfo;

typedef struct VkLayerDeviceLink {
    struct VkLayerDeviceLink *pNext;
    PFN_vkGetInstanceProcAddr pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr pfnNextGetDeviceProcAddr;
} VkLayerDeviceLink;

typedef struct VkLayerDeviceCreateInfo {
    VkStructureType sType; /* VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO */
    const void *pNext;
    int32_t function;
    union {
        VkLayerDeviceLink *pLayerInfo;
        PFN_vkVoidFunction pfnSetDeviceLoaderData;
    } u;
} VkLayerDeviceCreateInfo;

typedef struct VkNegotiateLayerInterface {
    int32_t sType; /* LAYER_NEGOTIATE_INTERFACE_STRUCT */
    void *pNext;
    uint32_t loaderLayerInterfaceVersion;
    PFN_vkGetInstanceProcAddr pfnGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr pfnGetDeviceProcAddr;
    PFN_GetPhysicalDeviceProcAddr pfnGetPhysicalDeviceProcAddr;
} VkNegotiateLayerInterface;

/* The head of VkPhysicalDeviceProperties, up to the device name; the caller's struct continues
 * with the limits and sparse properties, which the layer leaves alone. */
typedef struct VkPhysicalDeviceProperties {
    uint32_t apiVersion;
    uint32_t driverVersion;
    uint32_t vendorID;
    uint32_t deviceID;
    int32_t deviceType;
    char deviceName[256];
} VkPhysicalDeviceProperties;

typedef struct VkPhysicalDeviceProperties2 {
    VkStructureType sType;
    void *pNext;
    VkPhysicalDeviceProperties properties;
} VkPhysicalDeviceProperties2;

_Static_assert(offsetof(VkPhysicalDeviceProperties, vendorID) == 8, "vendorID at byte 8");
_Static_assert(offsetof(VkPhysicalDeviceProperties, deviceName) == 20, "deviceName at byte 20");
_Static_assert(offsetof(VkPhysicalDeviceProperties2, properties) == 16, "properties at byte 16");
_Static_assert(offsetof(VkLayerInstanceCreateInfo, u) == 24, "loader struct layout");

typedef void (*PFN_vkGetPhysicalDeviceProperties)(VkPhysicalDevice physical_device,
                                                  VkPhysicalDeviceProperties *properties);
typedef void (*PFN_vkGetPhysicalDeviceProperties2)(VkPhysicalDevice physical_device,
                                                   VkPhysicalDeviceProperties2 *properties);

/* ---- The layer's state ---- */

/* 0xFFFF is no PCI vendor that Dawn's gpu_info has a special case for (NVIDIA 0x10DE, AMD 0x1002,
 * Intel 0x8086, ARM 0x13B5, Qualcomm 0x5143, Apple 0x106B, ImgTec 0x1010, Samsung 0x144D,
 * Mesa 0x10005, Microsoft 0x1414, Google 0x1AE0, Broadcom 0x14E4, Huawei 0x19E5), and PCI never
 * assigns it. */
#define KF_VKMASK_DEFAULT_VENDOR 0xFFFFu
#define KF_VKMASK_MAX_INSTANCES 16
#define KF_VKMASK_MAX_DEVICES 16
#define KF_VKMASK_MAX_ANNOUNCED 8

typedef struct instance_entry {
    void *key; /* the loader's dispatch table pointer; NULL marks a free slot */
    VkInstance instance;
    PFN_vkGetInstanceProcAddr next_gipa;
    PFN_vkDestroyInstance next_destroy_instance;
    PFN_vkGetPhysicalDeviceProperties next_properties;
    PFN_vkGetPhysicalDeviceProperties2 next_properties2;
    PFN_vkGetPhysicalDeviceProperties2 next_properties2_khr;
    uint32_t vendor; /* what vendorID reads as, from KF_VKMASK_VENDOR at vkCreateInstance */
    int verbose;
    /* Dawn reads the properties several times; verbose mode says so once per physical device. */
    VkPhysicalDevice announced[KF_VKMASK_MAX_ANNOUNCED];
} instance_entry;

typedef struct device_entry {
    void *key;
    PFN_vkGetDeviceProcAddr next_gdpa;
    PFN_vkDestroyDevice next_destroy_device;
} device_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static instance_entry g_instances[KF_VKMASK_MAX_INSTANCES];
static device_entry g_devices[KF_VKMASK_MAX_DEVICES];

/* The loader's dispatch table pointer, never NULL in a live handle (a free slot's key is NULL). */
static void *dispatch_key(const void *handle) {
    void *key;
    memcpy(&key, handle, sizeof key);
    return key;
}

/* Copies out the entry whose key matches `handle`'s. Callers then work on the copy outside the
 * lock, so a slow driver call never holds it. With `or_sole`, a handle whose key matches no
 * instance (a physical device, from a loader that gave it a dispatch table of its own) gets the
 * only instance, if exactly one is alive, as in kfuse. */
static int find_instance(const void *handle, int or_sole, instance_entry *out) {
    if (!handle) {
        return 0;
    }
    void *key = dispatch_key(handle);
    const instance_entry *match = NULL, *sole = NULL;
    size_t live = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_INSTANCES; i++) {
        if (g_instances[i].key) {
            live++;
            sole = &g_instances[i];
            if (g_instances[i].key == key) {
                match = &g_instances[i];
            }
        }
    }
    if (!match && or_sole && live == 1) {
        match = sole;
    }
    if (match) {
        *out = *match;
    }
    pthread_mutex_unlock(&g_lock);
    return match != NULL;
}

static int find_device(const void *handle, device_entry *out) {
    if (!handle) {
        return 0;
    }
    void *key = dispatch_key(handle);
    int found = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_DEVICES && !found; i++) {
        if (g_devices[i].key && g_devices[i].key == key) {
            *out = g_devices[i];
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

static int env_verbose(void) {
    const char *v = getenv("KF_VKMASK_VERBOSE");
    return v && !strcmp(v, "1");
}

static uint32_t env_vendor(int verbose) {
    const char *text = getenv("KF_VKMASK_VENDOR");
    if (!text || !*text) {
        return KF_VKMASK_DEFAULT_VENDOR;
    }
    char *end = NULL;
    unsigned long value = strtoul(text, &end, 0);
    if (*end != '\0' || value > UINT32_MAX || text[0] == '-') {
        if (verbose) {
            fprintf(stderr,
                    "vkmask: KF_VKMASK_VENDOR='%s' is not a 32-bit number (try 0xFFFF); "
                    "using 0x%x\n",
                    text, KF_VKMASK_DEFAULT_VENDOR);
        }
        return KF_VKMASK_DEFAULT_VENDOR;
    }
    return (uint32_t)value;
}

/* Whether this is the first rewrite for `physical_device` (within its instance's first
 * KF_VKMASK_MAX_ANNOUNCED devices; past those, every rewrite counts as a first). */
static int first_rewrite(const void *instance_key, VkPhysicalDevice physical_device) {
    int first = 1;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_INSTANCES; i++) {
        instance_entry *e = &g_instances[i];
        if (!e->key || e->key != instance_key) {
            continue;
        }
        for (size_t j = 0; j < KF_VKMASK_MAX_ANNOUNCED; j++) {
            if (e->announced[j] == physical_device) {
                first = 0;
                break;
            }
            if (!e->announced[j]) {
                e->announced[j] = physical_device;
                break;
            }
        }
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return first;
}

static void mask_vendor(const instance_entry *e, VkPhysicalDevice physical_device,
                        VkPhysicalDeviceProperties *p) {
    if (p->vendorID == e->vendor) {
        return;
    }
    if (e->verbose && first_rewrite(e->key, physical_device)) {
        /* deviceName is NUL-terminated by the driver; the bound only guards a broken one. */
        fprintf(stderr, "vkmask: %.*s: vendorID 0x%x -> 0x%x\n", (int)sizeof p->deviceName,
                p->deviceName, p->vendorID, e->vendor);
    }
    p->vendorID = e->vendor;
}

/* ---- Intercepted commands ---- */

static VkResult vkmask_CreateInstance(const VkInstanceCreateInfo *info,
                                      const VkAllocationCallbacks *alloc, VkInstance *instance) {
    VkLayerInstanceCreateInfo *link_info = NULL;
    for (const vk_chain *c = info->pNext; c; c = c->pNext) {
        if (c->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
            ((const VkLayerInstanceCreateInfo *)c)->function == VK_LAYER_LINK_INFO) {
            /* The loader's own struct, which each layer advances for the next one. */
            link_info = (VkLayerInstanceCreateInfo *)(uintptr_t)c;
            break;
        }
    }
    if (!link_info || !link_info->u.pLayerInfo) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    PFN_vkGetInstanceProcAddr next_gipa = link_info->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkCreateInstance next_create = (PFN_vkCreateInstance)next_gipa(NULL, "vkCreateInstance");
    if (!next_create) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    link_info->u.pLayerInfo = link_info->u.pLayerInfo->pNext;
    VkResult result = next_create(info, alloc, instance);
    if (result != VK_SUCCESS) {
        return result;
    }

    instance_entry e;
    memset(&e, 0, sizeof e);
    e.key = dispatch_key(*instance);
    e.instance = *instance;
    e.next_gipa = next_gipa;
    e.next_destroy_instance = (PFN_vkDestroyInstance)next_gipa(*instance, "vkDestroyInstance");
    e.next_properties =
        (PFN_vkGetPhysicalDeviceProperties)next_gipa(*instance, "vkGetPhysicalDeviceProperties");
    e.next_properties2 =
        (PFN_vkGetPhysicalDeviceProperties2)next_gipa(*instance, "vkGetPhysicalDeviceProperties2");
    e.next_properties2_khr = (PFN_vkGetPhysicalDeviceProperties2)next_gipa(
        *instance, "vkGetPhysicalDeviceProperties2KHR");
    e.verbose = env_verbose();
    e.vendor = env_vendor(e.verbose);

    int stored = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_INSTANCES && !stored; i++) {
        if (!g_instances[i].key) {
            g_instances[i] = e;
            stored = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!stored) {
        if (e.verbose) {
            fprintf(stderr, "vkmask: more than %d instances at once; vkCreateInstance fails\n",
                    KF_VKMASK_MAX_INSTANCES);
        }
        if (e.next_destroy_instance) {
            e.next_destroy_instance(*instance, alloc);
        }
        *instance = NULL;
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    return VK_SUCCESS;
}

static void vkmask_DestroyInstance(VkInstance instance, const VkAllocationCallbacks *alloc) {
    if (!instance) {
        return;
    }
    void *key = dispatch_key(instance);
    PFN_vkDestroyInstance next_destroy = NULL;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_INSTANCES; i++) {
        if (g_instances[i].key && g_instances[i].key == key) {
            next_destroy = g_instances[i].next_destroy_instance;
            memset(&g_instances[i], 0, sizeof g_instances[i]);
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (next_destroy) {
        next_destroy(instance, alloc);
    }
}

static void vkmask_GetPhysicalDeviceProperties(VkPhysicalDevice physical_device,
                                               VkPhysicalDeviceProperties *properties) {
    instance_entry e;
    if (!find_instance(physical_device, 1, &e) || !e.next_properties) {
        return; /* unreachable through the loader: it only calls what GIPA returned */
    }
    e.next_properties(physical_device, properties);
    mask_vendor(&e, physical_device, properties);
}

static void vkmask_GetPhysicalDeviceProperties2(VkPhysicalDevice physical_device,
                                                VkPhysicalDeviceProperties2 *properties) {
    instance_entry e;
    if (!find_instance(physical_device, 1, &e) || !e.next_properties2) {
        return;
    }
    e.next_properties2(physical_device, properties);
    mask_vendor(&e, physical_device, &properties->properties);
}

static void vkmask_GetPhysicalDeviceProperties2KHR(VkPhysicalDevice physical_device,
                                                   VkPhysicalDeviceProperties2 *properties) {
    instance_entry e;
    if (!find_instance(physical_device, 1, &e) || !e.next_properties2_khr) {
        return;
    }
    e.next_properties2_khr(physical_device, properties);
    mask_vendor(&e, physical_device, &properties->properties);
}

static VkResult vkmask_CreateDevice(VkPhysicalDevice physical_device,
                                    const VkDeviceCreateInfo *info,
                                    const VkAllocationCallbacks *alloc, VkDevice *device) {
    VkLayerDeviceCreateInfo *link_info = NULL;
    for (const vk_chain *c = info->pNext; c; c = c->pNext) {
        if (c->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO &&
            ((const VkLayerDeviceCreateInfo *)c)->function == VK_LAYER_LINK_INFO) {
            link_info = (VkLayerDeviceCreateInfo *)(uintptr_t)c;
            break;
        }
    }
    instance_entry inst;
    if (!link_info || !link_info->u.pLayerInfo || !find_instance(physical_device, 1, &inst)) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    PFN_vkGetInstanceProcAddr next_gipa = link_info->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr next_gdpa = link_info->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    PFN_vkCreateDevice next_create = (PFN_vkCreateDevice)next_gipa(inst.instance, "vkCreateDevice");
    if (!next_create) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    link_info->u.pLayerInfo = link_info->u.pLayerInfo->pNext;
    VkResult result = next_create(physical_device, info, alloc, device);
    if (result != VK_SUCCESS) {
        return result;
    }

    device_entry e;
    e.key = dispatch_key(*device);
    e.next_gdpa = next_gdpa;
    e.next_destroy_device = (PFN_vkDestroyDevice)next_gdpa(*device, "vkDestroyDevice");
    int stored = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_DEVICES && !stored; i++) {
        if (!g_devices[i].key) {
            g_devices[i] = e;
            stored = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!stored) {
        if (inst.verbose) {
            fprintf(stderr, "vkmask: more than %d devices at once; vkCreateDevice fails\n",
                    KF_VKMASK_MAX_DEVICES);
        }
        if (e.next_destroy_device) {
            e.next_destroy_device(*device, alloc);
        }
        *device = NULL;
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    return VK_SUCCESS;
}

static void vkmask_DestroyDevice(VkDevice device, const VkAllocationCallbacks *alloc) {
    if (!device) {
        return;
    }
    void *key = dispatch_key(device);
    PFN_vkDestroyDevice next_destroy = NULL;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < KF_VKMASK_MAX_DEVICES; i++) {
        if (g_devices[i].key && g_devices[i].key == key) {
            next_destroy = g_devices[i].next_destroy_device;
            memset(&g_devices[i], 0, sizeof g_devices[i]);
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (next_destroy) {
        next_destroy(device, alloc);
    }
}

/* ---- Entry points ---- */

#define KF_VKMASK_EXPORT __attribute__((visibility("default")))

KF_VKMASK_EXPORT PFN_vkVoidFunction vkGetInstanceProcAddr(VkInstance instance, const char *name);
KF_VKMASK_EXPORT PFN_vkVoidFunction vkGetDeviceProcAddr(VkDevice device, const char *name);
KF_VKMASK_EXPORT VkResult vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v);

typedef struct intercept {
    const char *name;
    PFN_vkVoidFunction fn;
} intercept;

/* Commands the layer answers for whatever the instance (the loader asks for vkCreateInstance
 * with none), and those it answers only where the next layer has the command too. */
static const intercept g_global_commands[] = {
    {"vkGetInstanceProcAddr", (PFN_vkVoidFunction)vkGetInstanceProcAddr},
    {"vkCreateInstance", (PFN_vkVoidFunction)vkmask_CreateInstance},
};
static const intercept g_instance_commands[] = {
    {"vkDestroyInstance", (PFN_vkVoidFunction)vkmask_DestroyInstance},
    {"vkGetPhysicalDeviceProperties", (PFN_vkVoidFunction)vkmask_GetPhysicalDeviceProperties},
    {"vkGetPhysicalDeviceProperties2", (PFN_vkVoidFunction)vkmask_GetPhysicalDeviceProperties2},
    {"vkGetPhysicalDeviceProperties2KHR",
     (PFN_vkVoidFunction)vkmask_GetPhysicalDeviceProperties2KHR},
    {"vkCreateDevice", (PFN_vkVoidFunction)vkmask_CreateDevice},
    /* Device commands are also reachable through vkGetInstanceProcAddr. */
    {"vkGetDeviceProcAddr", (PFN_vkVoidFunction)vkGetDeviceProcAddr},
    {"vkDestroyDevice", (PFN_vkVoidFunction)vkmask_DestroyDevice},
};
static const intercept g_device_commands[] = {
    {"vkGetDeviceProcAddr", (PFN_vkVoidFunction)vkGetDeviceProcAddr},
    {"vkDestroyDevice", (PFN_vkVoidFunction)vkmask_DestroyDevice},
};

static PFN_vkVoidFunction lookup(const intercept *table, size_t count, const char *name) {
    for (size_t i = 0; i < count; i++) {
        if (!strcmp(table[i].name, name)) {
            return table[i].fn;
        }
    }
    return NULL;
}

#define KF_VKMASK_COUNT(a) (sizeof(a) / sizeof((a)[0]))

PFN_vkVoidFunction vkGetInstanceProcAddr(VkInstance instance, const char *name) {
    if (!name) {
        return NULL;
    }
    PFN_vkVoidFunction own = lookup(g_global_commands, KF_VKMASK_COUNT(g_global_commands), name);
    if (own) {
        return own;
    }
    instance_entry e;
    if (!find_instance(instance, 0, &e)) {
        return NULL;
    }
    PFN_vkVoidFunction next = e.next_gipa(instance, name);
    own = lookup(g_instance_commands, KF_VKMASK_COUNT(g_instance_commands), name);
    /* A command the layers below lack (vkGetPhysicalDeviceProperties2KHR without the extension)
     * stays absent rather than reaching a NULL call through the layer. */
    return next && own ? own : next;
}

PFN_vkVoidFunction vkGetDeviceProcAddr(VkDevice device, const char *name) {
    if (!name) {
        return NULL;
    }
    device_entry e;
    if (!find_device(device, &e)) {
        return NULL;
    }
    PFN_vkVoidFunction next = e.next_gdpa(device, name);
    PFN_vkVoidFunction own = lookup(g_device_commands, KF_VKMASK_COUNT(g_device_commands), name);
    return next && own ? own : next;
}

VkResult vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v) {
    if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT) {
        return VK_ERROR_INITIALIZATION_FAILED;
    }
    if (v->loaderLayerInterfaceVersion >= VKMASK_LAYER_INTERFACE_VERSION) {
        v->pfnGetInstanceProcAddr = vkGetInstanceProcAddr;
        v->pfnGetDeviceProcAddr = vkGetDeviceProcAddr;
        v->pfnGetPhysicalDeviceProcAddr = NULL; /* intercepts no unknown physical-device command */
        v->loaderLayerInterfaceVersion = VKMASK_LAYER_INTERFACE_VERSION;
    }
    return VK_SUCCESS;
}
