/* device.c: the device's view of memory (include/tensorgc/device.h). Asks the CUDA driver and
 * NVML, both dlopen'ed once at run time, so tensorgc builds, imports and runs where neither is
 * installed. Never creates a CUDA context: free memory is read only inside a primary context that
 * is already active. Plain C, no Python. */
#include "tensorgc/device.h"

#include <stdio.h>
#include <string.h>

/* Every field in its "unknown" state, so each failure path only has to say why. */
static void
reset(int ordinal, tgc_device_mem *out)
{
    memset(out, 0, sizeof *out);
    out->ordinal = ordinal;
    out->free = out->device_used = out->process_used = -1;
    snprintf(out->source, sizeof out->source, "none");
}

#if !defined(TGC_HAVE_CUDA_HEADERS)

int
tgc_device_query(int ordinal, tgc_device_mem *out)
{
    if (!out)
        return -1;
    reset(ordinal, out);
    snprintf(out->error, sizeof out->error, "built without the CUDA toolkit headers");
    return -1;
}

int
tgc_device_count(void)
{
    return -1;
}

#else /* TGC_HAVE_CUDA_HEADERS */

#include <cuda.h>
/* The toolkit does not always ship nvml.h (the NVML dev package does); without it the driver's
 * answers stand alone. A build may also pass -DTGC_HAVE_NVML_HEADER itself. */
#if !defined(TGC_HAVE_NVML_HEADER) && defined(__has_include)
#if __has_include(<nvml.h>)
#define TGC_HAVE_NVML_HEADER 1
#endif
#endif
#if defined(TGC_HAVE_NVML_HEADER)
#include <nvml.h>
#endif

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

/* Our own pointer types with the headers' argument types: cuda.h's names are macros for the
 * versioned symbols, and nothing here links against libcuda. */
typedef CUresult (CUDAAPI *cu_init_fn)(unsigned int);
typedef CUresult (CUDAAPI *cu_count_fn)(int *);
typedef CUresult (CUDAAPI *cu_get_fn)(CUdevice *, int);
typedef CUresult (CUDAAPI *cu_text_fn)(char *, int, CUdevice); /* name, PCI bus id */
typedef CUresult (CUDAAPI *cu_total_fn)(size_t *, CUdevice);
typedef CUresult (CUDAAPI *cu_state_fn)(CUdevice, unsigned int *, int *);
typedef CUresult (CUDAAPI *cu_retain_fn)(CUcontext *, CUdevice);
typedef CUresult (CUDAAPI *cu_release_fn)(CUdevice);
typedef CUresult (CUDAAPI *cu_push_fn)(CUcontext);
typedef CUresult (CUDAAPI *cu_pop_fn)(CUcontext *);
typedef CUresult (CUDAAPI *cu_meminfo_fn)(size_t *, size_t *);
typedef CUresult (CUDAAPI *cu_errstr_fn)(CUresult, const char **);

/* The driver: written once under pthread_once (load), read-only afterwards. */
static struct {
    void *lib;
    int ready; /* symbols resolved and cuInit(0) succeeded */
    CUresult init;
    cu_init_fn init_fn;
    cu_count_fn count;
    cu_get_fn get;
    cu_text_fn name, bus_id;
    cu_total_fn total_mem;
    cu_meminfo_fn mem_info;
    cu_state_fn ctx_state;
    cu_retain_fn ctx_retain;
    cu_release_fn ctx_release;
    cu_push_fn ctx_push;
    cu_pop_fn ctx_pop;
    cu_errstr_fn err_str; /* optional */
    char why[160];        /* why the driver is unusable */
} cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* Appends one reason to out->error, "; " between reasons, truncated to fit. */
static void
note(tgc_device_mem *out, const char *fmt, ...)
{
    size_t len = strlen(out->error);
    va_list ap;
    if (len + 3 >= sizeof out->error)
        return;
    if (len) {
        memcpy(out->error + len, "; ", 3);
        len += 2;
    }
    va_start(ap, fmt);
    vsnprintf(out->error + len, sizeof out->error - len, fmt, ap);
    va_end(ap);
}

/* dlsym that remembers the first missing name, so one check covers a whole list. */
static void *
sym(void *lib, const char *name, const char **missing)
{
    void *p = dlsym(lib, name);
    if (!p && !*missing)
        *missing = name;
    return p;
}

/* dlopen; on failure copies dlerror's text (valid only until the next dl call) into why. */
static void *
open_lib(const char *file, const char *what, char *why, size_t size)
{
    void *lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    const char *e = lib ? NULL : dlerror();
    if (!lib)
        snprintf(why, size, "no %s: %s", what, e ? e : file);
    return lib;
}

static const char *
cu_err(CUresult r)
{
    const char *s = NULL;
    return cu.err_str && cu.err_str(r, &s) == CUDA_SUCCESS && s ? s : "CUDA driver error";
}

#if defined(TGC_HAVE_NVML_HEADER)

typedef nvmlReturn_t (DECLDIR *nv_init_fn)(void);
typedef nvmlReturn_t (DECLDIR *nv_by_bus_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (DECLDIR *nv_meminfo_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (DECLDIR *nv_meminfo2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
/* _v3 and _v2 are declared with different struct types (one layout in the NVML 12 and 13
 * headers, but that is not promised): each pointer is called with its own. */
typedef nvmlReturn_t (DECLDIR *nv_list3_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
typedef nvmlReturn_t (DECLDIR *nv_list2_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
typedef const char *(DECLDIR *nv_errstr_fn)(nvmlReturn_t);

/* NVML: written once under pthread_once (load), read-only afterwards. */
static struct {
    void *lib;
    int ready; /* symbols resolved and nvmlInit_v2 succeeded; never shut down (process lifetime) */
    nv_init_fn init;
    nv_by_bus_fn by_bus;
    nv_meminfo_fn mem_info;
    nv_meminfo2_fn mem_info2; /* optional (drivers from 510): "used" without the reserved part */
    nv_list3_fn compute3, graphics3; /* each list: _v3 where the driver has it, else _v2 */
    nv_list2_fn compute2, graphics2;
    nv_errstr_fn err_str;
    char why[160];
} nv;

static const char *
nv_err(nvmlReturn_t r)
{
    const char *s = nv.err_str ? nv.err_str(r) : NULL;
    return s ? s : "NVML error";
}

static void
load_nvml(void)
{
    const char *missing = NULL;
    nvmlReturn_t r;
    if (!(nv.lib = open_lib("libnvidia-ml.so.1", "NVML", nv.why, sizeof nv.why)))
        return;
    nv.init = (nv_init_fn)sym(nv.lib, "nvmlInit_v2", &missing);
    nv.by_bus = (nv_by_bus_fn)sym(nv.lib, "nvmlDeviceGetHandleByPciBusId_v2", &missing);
    nv.mem_info = (nv_meminfo_fn)sym(nv.lib, "nvmlDeviceGetMemoryInfo", &missing);
    nv.err_str = (nv_errstr_fn)sym(nv.lib, "nvmlErrorString", &missing);
    nv.mem_info2 = (nv_meminfo2_fn)dlsym(nv.lib, "nvmlDeviceGetMemoryInfo_v2");
    nv.compute3 = (nv_list3_fn)dlsym(nv.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    nv.graphics3 = (nv_list3_fn)dlsym(nv.lib, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    nv.compute2 = (nv_list2_fn)dlsym(nv.lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    nv.graphics2 = (nv_list2_fn)dlsym(nv.lib, "nvmlDeviceGetGraphicsRunningProcesses_v2");
    if (missing)
        snprintf(nv.why, sizeof nv.why, "libnvidia-ml.so.1 lacks %s", missing);
    else if ((r = nv.init()) != NVML_SUCCESS)
        snprintf(nv.why, sizeof nv.why, "nvmlInit_v2: %s", nv_err(r));
    else
        nv.ready = 1;
}

/* Bytes that `pid` holds per one running-process list, summed over its entries (one per MIG
 * instance); *listed gets bit 1 when pid is listed, bit 2 when with a figure. Returns 0 when
 * NVML answered. The list can grow between "insufficient size" and the next call: a few tries,
 * with headroom. */
#define TGC_DEFINE_LIST_SUM(NAME, FN, INFO)                                                     \
    static int NAME(FN list, nvmlDevice_t h, unsigned int pid, unsigned long long *bytes,       \
                    int *listed)                                                                \
    {                                                                                           \
        unsigned int cap = 16;                                                                  \
        for (int tries = 0; tries < 4; tries++) {                                               \
            INFO *buf = calloc(cap, sizeof *buf);                                               \
            unsigned int n = cap;                                                               \
            nvmlReturn_t r = buf ? list(h, &n, buf) : NVML_ERROR_MEMORY;                        \
            for (unsigned int i = 0; r == NVML_SUCCESS && i < n && i < cap; i++) {              \
                if (buf[i].pid != pid)                                                          \
                    continue;                                                                   \
                *listed |= 1;                                                                   \
                if (buf[i].usedGpuMemory != (unsigned long long)NVML_VALUE_NOT_AVAILABLE) {     \
                    *listed |= 2;                                                               \
                    *bytes += buf[i].usedGpuMemory;                                             \
                }                                                                               \
            }                                                                                   \
            free(buf);                                                                          \
            if (r != NVML_ERROR_INSUFFICIENT_SIZE)                                              \
                return r == NVML_SUCCESS ? 0 : -1;                                              \
            cap = (n > cap ? n : cap) + 16;                                                     \
        }                                                                                       \
        return -1;                                                                              \
    }
TGC_DEFINE_LIST_SUM(list_sum3, nv_list3_fn, nvmlProcessInfo_t)
TGC_DEFINE_LIST_SUM(list_sum2, nv_list2_fn, nvmlProcessInfo_v2_t)

static int
list_sum(nv_list3_fn v3, nv_list2_fn v2, nvmlDevice_t h, unsigned int pid,
         unsigned long long *bytes, int *listed)
{
    if (v3)
        return list_sum3(v3, h, pid, bytes, listed);
    return v2 ? list_sum2(v2, h, pid, bytes, listed) : -1;
}

#endif /* TGC_HAVE_NVML_HEADER */

/* Device-wide use and this process's share. CUDA ordinals follow CUDA_VISIBLE_DEVICES and NVML
 * indices do not, so the device is found by its PCI bus id. */
static void
query_nvml(CUdevice dev, tgc_device_mem *out)
{
#if defined(TGC_HAVE_NVML_HEADER)
    char bus[64];
    nvmlDevice_t h;
    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    nvmlReturn_t r;
    CUresult cr;
    unsigned long long compute = 0, graphics = 0;
    int listed = 0, answered = 0;
    unsigned int pid = (unsigned int)getpid();
    if (!nv.ready) {
        note(out, "%s", nv.why);
        return;
    }
    if ((cr = cu.bus_id(bus, (int)sizeof bus, dev)) != CUDA_SUCCESS) {
        note(out, "cuDeviceGetPCIBusId: %s", cu_err(cr));
        return;
    }
    if ((r = nv.by_bus(bus, &h)) != NVML_SUCCESS) {
        note(out, "NVML has no device at %s: %s", bus, nv_err(r));
        return;
    }
    out->nvml = 1;
    /* v1's "used" counts the driver's reserve, which cuDeviceTotalMem leaves out of `total`;
     * v2 leaves it out too, so used + free = total as with the driver's own figures. */
    if (nv.mem_info2 && nv.mem_info2(h, &mem2) == NVML_SUCCESS)
        out->device_used = (long long)mem2.used;
    else if ((r = nv.mem_info(h, &mem)) == NVML_SUCCESS)
        out->device_used = (long long)mem.used;
    else
        note(out, "nvmlDeviceGetMemoryInfo: %s", nv_err(r));
    answered += list_sum(nv.compute3, nv.compute2, h, pid, &compute, &listed) == 0;
    answered += list_sum(nv.graphics3, nv.graphics2, h, pid, &graphics, &listed) == 0;
    /* A process with both kinds of context is in both lists with its one total (nvidia-smi
     * shows it once, as C+G): take the larger figure, not the sum. */
    if (listed & 2)
        out->process_used = (long long)(compute > graphics ? compute : graphics);
    else if (listed)
        note(out, "NVML lists pid %u without its memory", pid);
    else if (!answered)
        note(out, "NVML's running-process lists are unavailable");
    else
        note(out, "NVML does not list pid %u here (no context, or another PID namespace)", pid);
#else
    (void)dev;
    note(out, "built without nvml.h");
#endif
}

static void
load(void)
{
    const char *missing = NULL;
    if (!(cu.lib = open_lib("libcuda.so.1", "CUDA driver", cu.why, sizeof cu.why)))
        return;
    cu.init_fn = (cu_init_fn)sym(cu.lib, "cuInit", &missing);
    cu.count = (cu_count_fn)sym(cu.lib, "cuDeviceGetCount", &missing);
    cu.get = (cu_get_fn)sym(cu.lib, "cuDeviceGet", &missing);
    cu.name = (cu_text_fn)sym(cu.lib, "cuDeviceGetName", &missing);
    cu.bus_id = (cu_text_fn)sym(cu.lib, "cuDeviceGetPCIBusId", &missing);
    cu.total_mem = (cu_total_fn)sym(cu.lib, "cuDeviceTotalMem_v2", &missing);
    cu.ctx_state = (cu_state_fn)sym(cu.lib, "cuDevicePrimaryCtxGetState", &missing);
    cu.ctx_retain = (cu_retain_fn)sym(cu.lib, "cuDevicePrimaryCtxRetain", &missing);
    cu.ctx_release = (cu_release_fn)sym(cu.lib, "cuDevicePrimaryCtxRelease_v2", &missing);
    cu.ctx_push = (cu_push_fn)sym(cu.lib, "cuCtxPushCurrent_v2", &missing);
    cu.ctx_pop = (cu_pop_fn)sym(cu.lib, "cuCtxPopCurrent_v2", &missing);
    cu.mem_info = (cu_meminfo_fn)sym(cu.lib, "cuMemGetInfo_v2", &missing);
    cu.err_str = (cu_errstr_fn)dlsym(cu.lib, "cuGetErrorString");
    if (missing) {
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 lacks %s", missing);
        return;
    }
    /* cuInit creates no context; its failure (no device, driver/library mismatch) is final. */
    if ((cu.init = cu.init_fn(0)) != CUDA_SUCCESS) {
        snprintf(cu.why, sizeof cu.why, "cuInit: %s", cu_err(cu.init));
        return;
    }
    cu.ready = 1;
#if defined(TGC_HAVE_NVML_HEADER)
    load_nvml(); /* only with the driver: the ordinal reaches NVML through it */
#endif
}

/* Free bytes need a context, and creating one would take hundreds of MiB of this process's
 * device memory, so only a primary context that is already active (PyTorch's) is borrowed. One
 * released between the state check and the retain would be recreated; PyTorch never releases
 * its own, so that window is left open. */
static void
query_free(CUdevice dev, tgc_device_mem *out)
{
    unsigned int flags = 0;
    int active = 0;
    CUcontext ctx = NULL, popped = NULL;
    size_t free_b = 0, total_b = 0;
    CUresult r = cu.ctx_state(dev, &flags, &active);
    if (r == CUDA_SUCCESS && !active) {
        note(out, "free unknown: the primary context is not active (none is created)");
        return;
    }
    if (r == CUDA_SUCCESS && (r = cu.ctx_retain(&ctx, dev)) == CUDA_SUCCESS) {
        if ((r = cu.ctx_push(ctx)) == CUDA_SUCCESS) {
            r = cu.mem_info(&free_b, &total_b);
            cu.ctx_pop(&popped);
        }
        cu.ctx_release(dev);
    }
    if (r == CUDA_SUCCESS)
        out->free = (long long)free_b;
    else
        note(out, "free unknown: %s", cu_err(r));
}

int
tgc_device_query(int ordinal, tgc_device_mem *out)
{
    int n = 0;
    CUdevice dev;
    size_t total = 0;
    CUresult r;
    if (!out)
        return -1;
    reset(ordinal, out);
    pthread_once(&load_once, load);
    if (!cu.ready)
        return note(out, "%s", cu.why), -1;
    if ((r = cu.count(&n)) != CUDA_SUCCESS)
        return note(out, "cuDeviceGetCount: %s", cu_err(r)), -1;
    if (ordinal < 0 || ordinal >= n)
        return note(out, "no CUDA device %d: the driver sees %d", ordinal, n), -1;
    if ((r = cu.get(&dev, ordinal)) != CUDA_SUCCESS || (r = cu.total_mem(&total, dev)) != CUDA_SUCCESS)
        return note(out, "CUDA device %d: %s", ordinal, cu_err(r)), -1;
    out->ok = 1;
    out->total = total;
    if (cu.name(out->name, (int)sizeof out->name - 1, dev) != CUDA_SUCCESS)
        out->name[0] = '\0';
    query_free(dev, out);
    query_nvml(dev, out);
    if (out->device_used < 0 && out->free >= 0)
        out->device_used = (long long)out->total - out->free;
    snprintf(out->source, sizeof out->source, "%s", out->nvml ? "cuda driver + nvml" : "cuda driver");
    return 0;
}

int
tgc_device_count(void)
{
    int n = 0;
    pthread_once(&load_once, load);
    if (!cu.ready) /* a driver that found no device answered 0 */
        return cu.init == CUDA_ERROR_NO_DEVICE ? 0 : -1;
    return cu.count(&n) == CUDA_SUCCESS ? n : -1;
}

#endif /* TGC_HAVE_CUDA_HEADERS */
