/* device.h: the device's view of memory (allocator/device.c), plain C with no Python.
 *
 * Asks the CUDA driver (libcuda.so.1) and NVML (libnvidia-ml.so.1), both loaded with dlopen at
 * run time, how much memory a CUDA device has, how much is free, and how much of it this process
 * and all processes use, so the reporter can explain what the caching allocator does not hold.
 * Neither library is needed to build or import tensorgc: without them a query answers ok = 0 and
 * says why in `error`. Built without -DTGC_HAVE_CUDA_HEADERS (cuda.h; nvml.h is used when the
 * compiler finds it), every query fails with "built without the CUDA toolkit headers".
 *
 * The first call runs cuInit(0). A process that has done so cannot use CUDA in a child it forks
 * (a driver rule), so callers should query only processes that already use CUDA. */
#ifndef TENSORGC_DEVICE_H
#define TENSORGC_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int ok;                        /* 1 when the CUDA driver answered for this device */
    int ordinal;                   /* CUDA device ordinal as this process sees it */
    unsigned long long total;      /* bytes: cuDeviceTotalMem_v2 */
    long long free;                /* bytes: cuMemGetInfo_v2 in the device's primary context when that context is already active; -1 if not available */
    long long device_used;         /* bytes used on the device by all processes: NVML memory info used, else total - free; -1 unknown */
    long long process_used;        /* bytes this process (getpid()) uses on the device per NVML's running-process lists (compute + graphics, _v3 then _v2 fallbacks); -1 when NVML is missing or does not list us (containers with PID namespaces) */
    int nvml;                      /* 1 when NVML answered */
    char name[96];                 /* device name */
    char source[64];               /* e.g. "cuda driver + nvml" */
    char error[192];               /* why something is missing; "" when all is well */
} tgc_device_mem;

/* Fills *out for CUDA ordinal `ordinal`. Returns 0 when the driver answered (out->ok = 1), -1
 * otherwise with out->error set. Never aborts or crashes when libcuda.so.1 / libnvidia-ml.so.1 are
 * absent. Never creates a CUDA context: cuMemGetInfo is only called inside the device's primary
 * context when cuDevicePrimaryCtxGetState says it is already active (retain, push, query, pop,
 * release). Thread-safe (a pthread_once for loading). */
int tgc_device_query(int ordinal, tgc_device_mem *out);

/* Number of CUDA devices the driver sees, -1 with no driver. */
int tgc_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
