/* A fake webgpu.h library for the loader's tests (built twice, not part of kfuse_tests): every
 * entry point kfuse resolves exists and returns zero, so only the implementation check can tell
 * it from Dawn. With KF_FAKE_WGPU_NATIVE it also exports wgpu-native's marker symbol. */
#include "runtime/wgpu_abi.h"

#define KF_FAKE_STUB(ret, field, symbol, params)                                                   \
    void *symbol(void);                                                                            \
    void *symbol(void) {                                                                           \
        return 0;                                                                                  \
    }
KF_WGPU_PROCS(KF_FAKE_STUB)
#undef KF_FAKE_STUB

#ifdef KF_FAKE_WGPU_NATIVE
void wgpuGenerateReport(void);
void wgpuGenerateReport(void) {}
#endif
