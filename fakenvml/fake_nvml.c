/* A fake libnvidia-ml.so.1: the NVML calls the agent makes, answered from the JSON state file named by
 * FAKE_NVML_STATE (see docs/fake-nvml.md). The file is re-read whenever it changes (device, inode,
 * size, mtime or ctime differ), so other tools drive the fake by replacing it atomically.
 *
 * Thread-safe: one mutex guards the state; a device's ``delay_ms`` is slept outside it, so one slow
 * GPU never blocks a waiting event thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "functions.h"
#include "nvml_subset.h"
#include "state.h"

#define HANDLE_MAGIC 0x4e564d4cU /* "NVML" */
#define EVENTSET_MAGIC 0x45565453U
#define GPM_MAGIC 0x47504d53U
#define MAX_STATE_BYTES (64u << 20)
#define EVENT_POLL_MS 50
#define SUPPORTED_EVENTS                                                                                   \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |              \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

struct nvmlDevice_st {
    unsigned int magic;
    unsigned int index;
};

struct nvmlEventSet_st {
    unsigned int magic;
    unsigned long long types[FAKE_MAX_DEVICES]; /* registered event types per device index */
};

/* GPM metrics the fake keeps, and the reading each follows */
enum { GPM_SM, GPM_TENSOR, GPM_DRAM, GPM_GRAPHICS, GPM_COUNT };
static const enum fake_averaged gpm_reading[GPM_COUNT] = {AVG_SM, AVG_TENSOR, AVG_DRAM, AVG_UTIL_GPU};

struct nvmlGpmSample_st {
    unsigned int magic;
    int filled;
    unsigned int index;
    double at; /* CLOCK_MONOTONIC seconds when taken */
    int has[GPM_COUNT];
    double value[GPM_COUNT];       /* the state's value when taken */
    int has_integral[GPM_COUNT];   /* the state carried integrals of it */
    double integral[GPM_COUNT];    /* its running integral when taken */
};

typedef struct {
    unsigned long long *seqs;
    size_t n, cap;
} seq_set;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_state *g_state; /* NULL until a state file has been read */
static fake_state *g_spare;
static char g_path[PATH_MAX];
static struct stat g_seen;
static int g_seen_valid;
static int g_last_errno;
static int g_refcount;
static struct nvmlDevice_st g_handles[FAKE_MAX_DEVICES];
static seq_set g_delivered[FAKE_MAX_DEVICES]; /* Xid seqs handed out, per device, per state path */

/* --- hiding missing functions' symbols ------------------------------------------------------------
 * ctypes (and so nvidia-ml-py) finds functions with dlsym(). glibc's lookup skips a symbol whose
 * st_value is 0, so setting it to 0 in our own .dynsym makes dlsym() fail exactly as on an older
 * driver that lacks the function; the saved value restores it when the state file no longer lists it.
 * A caller that resolved the function before it was listed keeps its pointer, so every function also
 * answers NVML_ERROR_FUNCTION_NOT_FOUND itself while it is listed. */

#define FAKE_FN_ADDR(name) (void *)name,
static void *const g_fn_addrs[FN_COUNT] = {FAKE_FUNCTIONS(FAKE_FN_ADDR)};
#undef FAKE_FN_ADDR
static ElfW(Sym) *g_syms[FN_COUNT];
static ElfW(Addr) g_sym_values[FN_COUNT];
static unsigned char g_hidden[FN_COUNT];

static int page_protection(const void *addr) {
    /* keep whatever execute bit the page has (a linker without -z separate-code shares pages) */
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int prot = PROT_READ | PROT_WRITE;
    if (!maps) return prot;
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            if (perms[2] == 'x') prot |= PROT_EXEC;
            break;
        }
    }
    fclose(maps);
    return prot;
}

static int make_writable(void *addr, size_t len) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    return mprotect((void *)start, end - start, page_protection(addr));
}

static void find_own_symbols(void) {
    for (int i = 0; i < FN_COUNT; i++) {
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        if (dladdr1(g_fn_addrs[i], &info, (void **)&sym, RTLD_DL_SYMENT) && sym && info.dli_sname &&
            strcmp(info.dli_sname, fake_function_names[i]) == 0) {
            g_syms[i] = (ElfW(Sym) *)sym;
            g_sym_values[i] = sym->st_value;
        }
    }
}

static void apply_missing_locked(const unsigned char missing[FN_COUNT]) {
    for (int i = 0; i < FN_COUNT; i++) {
        unsigned char want = missing ? missing[i] : 0;
        if (want == g_hidden[i] || !g_syms[i]) continue;
        if (make_writable(g_syms[i], sizeof *g_syms[i]) != 0) {
            fprintf(stderr, "fake-nvml: cannot hide %s: %s\n", fake_function_names[i], strerror(errno));
            continue;
        }
        g_syms[i]->st_value = want ? 0 : g_sym_values[i];
        g_hidden[i] = want;
    }
}

/* --- the state file ------------------------------------------------------------------------------- */

/* the energy counters (below) account each state's power up to the moment it is replaced */
static void energy_forget_locked(void);
static void energy_reload_locked(const fake_state *old, const fake_state *next);
/* and the clocks event counters each state's reason bits, up to the moment the file was written */
static void reasons_forget_locked(void);
static void reasons_reload_locked(const fake_state *old, const struct stat *written);

static void forget_delivered_locked(void) {
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) g_delivered[i].n = 0;
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap >= MAX_STATE_BYTES) {
            snprintf(err, errlen, "larger than %u bytes", MAX_STATE_BYTES);
            free(buf);
            buf = NULL;
            break;
        }
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        snprintf(err, errlen, "read error");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void refresh_locked(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    if (!path || !*path) path = "";
    if (strcmp(path, g_path) != 0) {
        /* another state file is another machine: forget the last one */
        snprintf(g_path, sizeof g_path, "%s", path);
        g_seen_valid = 0;
        g_last_errno = 0;
        free(g_state);
        g_state = NULL;
        forget_delivered_locked();
        energy_forget_locked();
        reasons_forget_locked();
        apply_missing_locked(NULL);
    }
    if (!*path) return;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != g_last_errno) fprintf(stderr, "fake-nvml: %s: %s\n", path, strerror(errno));
        g_last_errno = errno; /* keep the last good state meanwhile */
        return;
    }
    g_last_errno = 0;
    if (g_seen_valid && same_file(&st, &g_seen)) return;
    g_seen = st;
    g_seen_valid = 1;
    char err[256] = "", warn[1024] = "";
    size_t len = 0;
    char *text = read_file(path, &len, err, sizeof err);
    if (!g_spare) g_spare = malloc(sizeof *g_spare);
    if (text && g_spare && fake_state_parse(text, len, g_spare, err, sizeof err, warn, sizeof warn) == 0) {
        fake_state *old = g_state;
        energy_reload_locked(old, g_spare);
        reasons_reload_locked(old, &st);
        g_state = g_spare;
        g_spare = old;
        apply_missing_locked(g_state->missing);
        if (warn[0]) fprintf(stderr, "fake-nvml: %s: %s\n", path, warn);
    } else {
        fprintf(stderr, "fake-nvml: %s: %s; keeping the previous state\n", path, err[0] ? err : "out of memory");
    }
    free(text);
}

__attribute__((constructor)) static void fake_nvml_load(void) {
    for (unsigned i = 0; i < FAKE_MAX_DEVICES; i++) g_handles[i] = (struct nvmlDevice_st){HANDLE_MAGIC, i};
    pthread_mutex_lock(&g_lock);
    find_own_symbols();
    refresh_locked(); /* hides missing functions before anyone can dlsym() them */
    pthread_mutex_unlock(&g_lock);
}

/* --- entering a call ------------------------------------------------------------------------------
 * Every entry point calls enter() (or system_enter()) first; both return with g_lock held, and the
 * caller unlocks on every path. */

static void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static nvmlReturn_t system_enter(enum fake_function fn) {
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    if (!g_state) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (g_state->missing[fn]) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (g_state->driver_error != NVML_SUCCESS) return g_state->driver_error;
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

static int valid_handle(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_handles;
    return p >= base && p < base + sizeof g_handles && (p - base) % sizeof g_handles[0] == 0 &&
           h->magic == HANDLE_MAGIC;
}

static nvmlReturn_t device_check(enum fake_function fn, nvmlDevice_t h, const fake_device **out) {
    nvmlReturn_t r = system_enter(fn);
    if (r != NVML_SUCCESS) return r;
    if (!valid_handle(h)) return NVML_ERROR_INVALID_ARGUMENT;
    if (h->index >= g_state->ndevices) return NVML_ERROR_GPU_IS_LOST; /* gone from the state file */
    *out = &g_state->devices[h->index];
    return NVML_SUCCESS;
}

static nvmlReturn_t enter(enum fake_function fn, nvmlDevice_t h, const fake_device **out) {
    const fake_device *d = NULL;
    nvmlReturn_t r = device_check(fn, h, &d);
    if (r == NVML_SUCCESS && d->delay_ms) {
        unsigned delay = d->delay_ms;
        pthread_mutex_unlock(&g_lock);
        sleep_ms(delay);
        r = device_check(fn, h, &d); /* the state may have changed while we slept */
    }
    if (r != NVML_SUCCESS) return r;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    if (d->unsupported[fn]) return NVML_ERROR_NOT_SUPPORTED;
    *out = d;
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r) {
    pthread_mutex_unlock(&g_lock);
    return r;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* --- library and system --------------------------------------------------------------------------- */

static nvmlReturn_t init(enum fake_function fn) {
    static int told;
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    if (!g_state && !g_path[0] && !told++)
        fprintf(stderr, "fake-nvml: FAKE_NVML_STATE is not set; answering as a node without a driver\n");
    if (!g_state) return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    if (g_state->missing[fn]) return leave(NVML_ERROR_FUNCTION_NOT_FOUND);
    if (g_state->driver_error != NVML_SUCCESS) return leave(g_state->driver_error);
    g_refcount++;
    return leave(NVML_SUCCESS);
}

FAKE_API nvmlReturn_t nvmlInit(void) { return init(FN_nvmlInit); }
FAKE_API nvmlReturn_t nvmlInit_v2(void) { return init(FN_nvmlInit_v2); }
FAKE_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init(FN_nvmlInitWithFlags);
}

FAKE_API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    if (g_state && g_state->missing[FN_nvmlShutdown]) return leave(NVML_ERROR_FUNCTION_NOT_FOUND);
    if (g_refcount == 0) return leave(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    return leave(NVML_SUCCESS);
}

FAKE_API const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

FAKE_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t r = system_enter(FN_nvmlSystemGetDriverVersion);
    return leave(r ? r : copy_string(version, length, g_state->driver_version));
}

FAKE_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t r = system_enter(FN_nvmlSystemGetNVMLVersion);
    return leave(r ? r : copy_string(version, length, g_state->nvml_version));
}

static nvmlReturn_t cuda_version(enum fake_function fn, int *out) {
    nvmlReturn_t r = system_enter(fn);
    if (r == NVML_SUCCESS && !out) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *out = g_state->cuda_driver_version;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(FN_nvmlSystemGetCudaDriverVersion, v); }
FAKE_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    return cuda_version(FN_nvmlSystemGetCudaDriverVersion_v2, v);
}

static nvmlReturn_t device_count(enum fake_function fn, unsigned int *count) {
    nvmlReturn_t r = system_enter(fn);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *count = g_state->ndevices;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return device_count(FN_nvmlDeviceGetCount, c); }
FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { return device_count(FN_nvmlDeviceGetCount_v2, c); }

static nvmlReturn_t handle_by_index(enum fake_function fn, unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t r = system_enter(fn);
    if (r == NVML_SUCCESS && (!device || index >= g_state->ndevices)) r = NVML_ERROR_INVALID_ARGUMENT;
    leave(r);
    if (r != NVML_SUCCESS) return r;
    const fake_device *d;
    r = enter(fn, &g_handles[index], &d);
    if (r == NVML_SUCCESS) *device = &g_handles[index];
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex, i, d);
}
FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex_v2, i, d);
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t r = system_enter(FN_nvmlDeviceGetHandleByUUID);
    unsigned found = FAKE_MAX_DEVICES;
    if (r == NVML_SUCCESS && (!uuid || !device)) r = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; r == NVML_SUCCESS && i < g_state->ndevices && found == FAKE_MAX_DEVICES; i++)
        if (strcmp(g_state->devices[i].uuid, uuid) == 0) found = i;
    if (r == NVML_SUCCESS && found == FAKE_MAX_DEVICES) r = NVML_ERROR_NOT_FOUND;
    leave(r);
    if (r != NVML_SUCCESS) return r;
    const fake_device *d;
    r = enter(FN_nvmlDeviceGetHandleByUUID, &g_handles[found], &d);
    if (r == NVML_SUCCESS) *device = &g_handles[found];
    return leave(r);
}

/* --- identity ------------------------------------------------------------------------------------- */

FAKE_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetIndex, device, &d);
    if (r == NVML_SUCCESS && !index) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *index = d->index;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetMinorNumber, device, &d);
    if (r == NVML_SUCCESS && !minor) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *minor = d->index;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetName, device, &d);
    return leave(r ? r : copy_string(name, length, d->name));
}

FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetUUID, device, &d);
    return leave(r ? r : copy_string(uuid, length, d->uuid));
}

static nvmlReturn_t pci_info(enum fake_function fn, nvmlDevice_t device, nvmlPciInfo_t *pci) {
    const fake_device *d;
    nvmlReturn_t r = enter(fn, device, &d);
    if (r == NVML_SUCCESS && !pci) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        unsigned domain = 0, bus = 0, dev = 0, func = 0;
        memset(pci, 0, sizeof *pci);
        sscanf(d->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &func);
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
        pci->pciDeviceId = 0x233010DE; /* H100 SXM5, vendor 10DE */
        pci->pciSubSystemId = 0x16C110DE;
        snprintf(pci->busId, sizeof pci->busId, "%s", d->pci_bus_id);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", domain & 0xFFFF, bus, dev, func);
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return pci_info(FN_nvmlDeviceGetPciInfo_v2, d, p);
}
FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return pci_info(FN_nvmlDeviceGetPciInfo_v3, d, p);
}

/* --- readings averaged over time -------------------------------------------------------------------
 * With ``integrals`` in its state, a device answers as a real one does: utilization over the past
 * sample period, power over its averaging interval, GPM between two samples. The writer carries a
 * running integral of each reading (value x seconds); the state's own value holds from the last
 * item's ``at`` on, and between two items the reading was what their difference over their gap says. */

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double current(const fake_device *d, enum fake_averaged k) {
    switch (k) {
    case AVG_UTIL_GPU: return d->utilization_gpu;
    case AVG_UTIL_MEMORY: return d->utilization_memory;
    case AVG_POWER: return d->power_mw;
    case AVG_SM: return d->sm_active;
    case AVG_TENSOR: return d->tensor_active;
    default: return d->dram_active;
    }
}

static int integrated(const fake_device *d, enum fake_averaged k) {
    return d->nintegrals && (d->integrals[0].has >> k & 1);
}

/* The integral at ``t``, for t at or after the first item's ``at`` (callers clamp). */
static double integral_at(const fake_device *d, enum fake_averaged k, double t) {
    const fake_integral *g = d->integrals;
    size_t n = d->nintegrals;
    if (t >= g[n - 1].at) return g[n - 1].value[k] + current(d, k) * (t - g[n - 1].at);
    size_t i = 0;
    while (i + 2 < n && g[i + 1].at <= t) i++;
    double span = g[i + 1].at - g[i].at;
    return g[i].value[k] + (g[i + 1].value[k] - g[i].value[k]) * (t - g[i].at) / span;
}

/* The mean over the ``seconds`` before now (from the first item on, where it is later); the instant's
 * value without integrals, with a zero period, or at the very first item. */
static double averaged(const fake_device *d, enum fake_averaged k, double seconds) {
    if (!integrated(d, k) || seconds <= 0) return current(d, k);
    double now = monotonic_now();
    double from = now - seconds;
    if (from < d->integrals[0].at) from = d->integrals[0].at;
    if (now - from < 1e-6) return current(d, k);
    return (integral_at(d, k, now) - integral_at(d, k, from)) / (now - from);
}

static unsigned int rounded(double v, double hi) {
    if (v < 0) v = 0;
    if (v > hi) v = hi;
    return (unsigned int)(v + 0.5);
}

/* The reading at ``t`` itself: the slope of the integrals' segment holding t (a writer may schedule a
 * change ahead), else the state's own value. */
static double instant_at(const fake_device *d, enum fake_averaged k, double t) {
    const fake_integral *g = d->integrals;
    size_t n = d->nintegrals;
    if (!integrated(d, k) || t < g[0].at || t >= g[n - 1].at) return current(d, k);
    size_t i = 0;
    while (i + 2 < n && g[i + 1].at <= t) i++;
    return (g[i + 1].value[k] - g[i].value[k]) / (g[i + 1].at - g[i].at);
}

/* value x seconds over [a, b]: from the integrals where they reach, the state's own value before the
 * first item (the fake knows nothing earlier) or without integrals. */
static double integral_over(const fake_device *d, enum fake_averaged k, double a, double b) {
    if (b <= a) return 0;
    if (!integrated(d, k)) return current(d, k) * (b - a);
    double first = d->integrals[0].at;
    double before = a < first ? current(d, k) * ((b < first ? b : first) - a) : 0;
    if (b <= first) return before;
    double from = a < first ? first : a;
    return before + integral_at(d, k, b) - integral_at(d, k, from);
}

/* --- the energy counter ----------------------------------------------------------------------------
 * nvmlDeviceGetTotalEnergyConsumption: millijoules since the library was loaded (the real one counts
 * from the driver's load). Each device's count is the power integrated up to ``at``; it moves on at
 * every call and whenever the state is replaced, so a rewrite loses nothing and it never decreases. */

static double g_energy_mj[FAKE_MAX_DEVICES];
static double g_energy_at[FAKE_MAX_DEVICES]; /* CLOCK_MONOTONIC seconds counted up to; 0: not yet */

static void energy_forget_locked(void) {
    memset(g_energy_mj, 0, sizeof g_energy_mj);
    memset(g_energy_at, 0, sizeof g_energy_at);
}

static void energy_advance(const fake_device *d, unsigned i, double to) {
    if (g_energy_at[i] == 0) g_energy_at[i] = to; /* a device counts from when it is first seen */
    if (to <= g_energy_at[i]) return;
    if (d->has_power) g_energy_mj[i] += integral_over(d, AVG_POWER, g_energy_at[i], to);
    g_energy_at[i] = to;
}

/* The next state's integrals know what happened since their first item better than the old state's
 * extrapolation (a writer may have appended several changes between two calls): the old state counts
 * only up to there. */
static void energy_reload_locked(const fake_state *old, const fake_state *next) {
    double now = monotonic_now();
    for (unsigned i = 0; i < FAKE_MAX_DEVICES; i++) {
        const fake_device *n = i < next->ndevices ? &next->devices[i] : NULL;
        double split = now;
        if (n && integrated(n, AVG_POWER) && n->integrals[0].at < now) split = n->integrals[0].at;
        if (split < g_energy_at[i]) split = g_energy_at[i];
        if (old && i < old->ndevices) energy_advance(&old->devices[i], i, split);
        if (n && g_energy_at[i] == 0) g_energy_at[i] = now;
    }
}

FAKE_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetTotalEnergyConsumption, device, &d);
    if (r == NVML_SUCCESS && !energy) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (!d->energy_counter || !d->has_power)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        energy_advance(d, d->index, monotonic_now());
        *energy = (unsigned long long)g_energy_mj[d->index]; /* floor: a count never goes back */
    }
    return leave(r);
}

/* --- the sample buffer -----------------------------------------------------------------------------
 * nvmlDeviceGetSamples: the driver takes a sample every ``sample_period_seconds`` P, at t = k*P on
 * CLOCK_MONOTONIC; each is the mean over (t - P, t] and the buffer keeps the last
 * ``sample_buffer_depth``. A utilization sample of 0 is not recorded (a real buffer comes back empty
 * while the GPU idles). Timestamps are microseconds on ``sample_clock``. */

/* to the nearest integer, without libm (the Makefile links none) */
static long long round_ll(double x) { return x < 0 ? -(long long)(0.5 - x) : (long long)(x + 0.5); }

/* microseconds to add to a CLOCK_MONOTONIC time for ``kind``'s clock. Measured once and kept until the
 * clock steps by more than 1 ms: measured at every call, read jitter would move a sample's timestamp
 * by a microsecond between calls, and a reader's lastSeenTimeStamp would get it twice. */
static long long clock_offset_us(enum fake_sample_clock kind) {
    static long long kept[3];
    static int have[3];
    if (kind == CLOCK_KIND_MONOTONIC) return 0;
    struct timespec a, b, o;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(kind == CLOCK_KIND_REALTIME ? CLOCK_REALTIME : CLOCK_BOOTTIME, &o);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double mono = ((double)a.tv_sec + (double)b.tv_sec) / 2 + ((double)a.tv_nsec + (double)b.tv_nsec) / 2e9;
    long long off = round_ll(((double)o.tv_sec - mono + (double)o.tv_nsec / 1e9) * 1e6);
    if (!have[kind] || llabs(off - kept[kind]) > 1000) kept[kind] = off;
    have[kind] = 1;
    return kept[kind];
}

/* The sample at grid time ``t``: 0 where none was taken (before the integrals' first item, or a
 * utilization of 0), else 1 with its value. */
static int sample_at(const fake_device *d, enum fake_averaged k, double t, double period, unsigned *out) {
    double from = t - period;
    if (integrated(d, k)) {
        if (t <= d->integrals[0].at) return 0; /* the driver's buffer starts with the history */
        if (from < d->integrals[0].at) from = d->integrals[0].at;
    }
    double mean = integral_over(d, k, from, t) / (t - from);
    *out = rounded(mean, k == AVG_POWER ? 4e9 : 100);
    return k == AVG_POWER || *out != 0;
}

static nvmlReturn_t sample_reading(const fake_device *d, nvmlSamplingType_t type, enum fake_averaged *k) {
    switch (type) {
    case NVML_TOTAL_POWER_SAMPLES: *k = AVG_POWER; return d->has_power ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    case NVML_GPU_UTILIZATION_SAMPLES: *k = AVG_UTIL_GPU; break;
    case NVML_MEMORY_UTILIZATION_SAMPLES: *k = AVG_UTIL_MEMORY; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    return d->has_utilization ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* Fills ``out`` with the newest samples after ``last_seen``, at most ``cap``, oldest first. */
static unsigned fill_samples(const fake_device *d, enum fake_averaged k, unsigned long long last_seen,
                             nvmlSample_t *out, unsigned cap) {
    double p = d->sample_period_s;
    long long newest = (long long)(monotonic_now() / p) /* positive: truncation floors */;
    long long offset = clock_offset_us(d->sample_clock);
    unsigned n = 0;
    for (long long g = newest; g > newest - (long long)d->sample_depth && n < cap; g--) {
        long long ts = round_ll((double)g * p * 1e6) + offset;
        if (ts <= 0 || (unsigned long long)ts <= last_seen) break; /* older ones are older still */
        unsigned value;
        if (!sample_at(d, k, (double)g * p, p, &value)) continue;
        out[n].timeStamp = (unsigned long long)ts;
        out[n].sampleValue.ullVal = 0;
        out[n++].sampleValue.uiVal = value;
    }
    for (unsigned i = 0; i < n / 2; i++) { /* newest first -> oldest first */
        nvmlSample_t tmp = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = tmp;
    }
    return n;
}

FAKE_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                           unsigned long long lastSeenTimeStamp, nvmlValueType_t *sampleValType,
                                           unsigned int *sampleCount, nvmlSample_t *samples) {
    const fake_device *d;
    enum fake_averaged k = AVG_POWER;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetSamples, device, &d);
    if (r == NVML_SUCCESS && (!sampleValType || !sampleCount || (samples && *sampleCount == 0)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) r = sample_reading(d, type, &k);
    if (r == NVML_SUCCESS && d->sample_depth == 0) r = NVML_ERROR_NOT_SUPPORTED; /* no buffer kept */
    if (r != NVML_SUCCESS) return leave(r);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (!samples) { /* sizing call: room for the whole buffer */
        *sampleCount = d->sample_depth;
        return leave(NVML_SUCCESS);
    }
    *sampleCount = fill_samples(d, k, lastSeenTimeStamp, samples, *sampleCount);
    return leave(*sampleCount ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND);
}

/* --- gauges --------------------------------------------------------------------------------------- */

FAKE_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetUtilizationRates, device, &d);
    if (r == NVML_SUCCESS && !u) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_utilization) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        u->gpu = rounded(averaged(d, AVG_UTIL_GPU, d->utilization_average_s), 100);
        u->memory = rounded(averaged(d, AVG_UTIL_MEMORY, d->utilization_average_s), 100);
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetMemoryInfo, device, &d);
    if (r == NVML_SUCCESS && !m) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_memory) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        /* v1 counts the driver's reservation as used */
        m->total = d->memory_total;
        m->used = d->memory_used + d->memory_reserved;
        m->free = d->memory_total - m->used;
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetMemoryInfo_v2, device, &d);
    if (r == NVML_SUCCESS && !m) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && m->version != nvmlMemory_v2) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && !d->has_memory) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        m->total = d->memory_total;
        m->reserved = d->memory_reserved;
        m->used = d->memory_used;
        m->free = d->memory_total - d->memory_reserved - d->memory_used;
    }
    return leave(r);
}

static nvmlReturn_t uint_value(enum fake_function fn, nvmlDevice_t device, unsigned int *out, size_t has_off,
                               size_t value_off) {
    const fake_device *d;
    nvmlReturn_t r = enter(fn, device, &d);
    if (r == NVML_SUCCESS && !out) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !*(const int *)((const char *)d + has_off)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *out = *(const unsigned int *)((const char *)d + value_off);
    return leave(r);
}

#define UINT_FIELD(has, value) offsetof(fake_device, has), offsetof(fake_device, value)

FAKE_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetPowerUsage, device, &d);
    if (r == NVML_SUCCESS && !power) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_power) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *power = rounded(averaged(d, AVG_POWER, d->power_average_s), 4e9);
    return leave(r);
}
FAKE_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    return uint_value(FN_nvmlDeviceGetEnforcedPowerLimit, d, limit, UINT_FIELD(has_power_limit, power_limit_mw));
}
FAKE_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *limit) {
    return uint_value(FN_nvmlDeviceGetPowerManagementLimit, d, limit, UINT_FIELD(has_power_limit, power_limit_mw));
}

/* "Default power management limit is a power management limit that the device boots with" (nvml.h), mW. */
FAKE_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *limit) {
    return uint_value(FN_nvmlDeviceGetPowerManagementDefaultLimit, d, limit,
                      UINT_FIELD(has_power_default_limit, power_default_limit_mw));
}

/* The PCIe link (nvml.h): the current generation and width, and the max "possible with this device and
 * system" (a Gen5 GPU in a Gen4 slot reports 4). nvmlDeviceGetGpuMaxPcieLinkGeneration is the GPU's own
 * max; the fake has no slot of its own, so it answers the same max. */
FAKE_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return uint_value(FN_nvmlDeviceGetCurrPcieLinkGeneration, d, gen, UINT_FIELD(has_pcie_generation, pcie_generation));
}
FAKE_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return uint_value(FN_nvmlDeviceGetCurrPcieLinkWidth, d, width, UINT_FIELD(has_pcie_width, pcie_width));
}
FAKE_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return uint_value(FN_nvmlDeviceGetMaxPcieLinkGeneration, d, gen,
                      UINT_FIELD(has_pcie_generation_max, pcie_generation_max));
}
FAKE_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return uint_value(FN_nvmlDeviceGetMaxPcieLinkWidth, d, width, UINT_FIELD(has_pcie_width_max, pcie_width_max));
}
FAKE_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return uint_value(FN_nvmlDeviceGetGpuMaxPcieLinkGeneration, d, gen,
                      UINT_FIELD(has_pcie_generation_max, pcie_generation_max));
}

/* "Retrieves the state of the device's NvLink for the link specified" (nvml.h): NVML_FEATURE_ENABLED (1)
 * when active. A GPU without NVLink answers NOT_SUPPORTED for every link; past the GPU's own links the
 * fake answers NOT_SUPPORTED up to NVML_NVLINK_MAX_LINKS and INVALID_ARGUMENT from there (the fake's
 * choice: what a real driver answers past its links is not documented). */
FAKE_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetNvLinkState, device, &d);
    if (r == NVML_SUCCESS && (!isActive || link >= FAKE_NVLINK_MAX_LINKS)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (!d->has_nvlink_links || link >= d->nvlink_links)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *isActive = d->nvlink_inactive[link] ? 0U : 1U;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                               unsigned int *temp) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetTemperature, device, &d);
    if (r == NVML_SUCCESS && (!temp || sensor != NVML_TEMPERATURE_GPU)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_temperature) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *temp = d->temperature_c < 0 ? 0U : (unsigned)d->temperature_c;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetTemperatureV, device, &d);
    if (r == NVML_SUCCESS && !t) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && t->version != nvmlTemperature_v1) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && t->sensorType != NVML_TEMPERATURE_GPU) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_temperature) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) t->temperature = d->temperature_c;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetClockInfo, device, &d);
    if (r == NVML_SUCCESS && (!clock || (unsigned)type > NVML_CLOCK_VIDEO)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        if ((type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) && d->has_sm_clock) *clock = d->sm_clock_mhz;
        else if (type == NVML_CLOCK_MEM && d->has_mem_clock) *clock = d->mem_clock_mhz;
        else r = NVML_ERROR_NOT_SUPPORTED;
    }
    return leave(r);
}

/* nvmlDeviceGetMaxClockInfo: "Retrieves the maximum clock speeds for the device" (nvml.h), in MHz. */
FAKE_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetMaxClockInfo, device, &d);
    if (r == NVML_SUCCESS && (!clock || (unsigned)type > NVML_CLOCK_VIDEO)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        if ((type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) && d->has_sm_clock_max) *clock = d->sm_clock_max_mhz;
        else r = NVML_ERROR_NOT_SUPPORTED;
    }
    return leave(r);
}

static nvmlReturn_t event_reasons(enum fake_function fn, nvmlDevice_t device, unsigned long long *reasons) {
    const fake_device *d;
    nvmlReturn_t r = enter(fn, device, &d);
    if (r == NVML_SUCCESS && !reasons) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_clocks_event_reasons) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) *reasons = d->clocks_event_reasons;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return event_reasons(FN_nvmlDeviceGetCurrentClocksEventReasons, d, reasons);
}
FAKE_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return event_reasons(FN_nvmlDeviceGetCurrentClocksThrottleReasons, d, reasons);
}

/* --- clocks event counters ---------------------------------------------------------------------------
 * NVML_FI_DEV_CLOCKS_EVENT_REASON_*: nanoseconds each reason has held. A writer that counts them
 * (``clocks_event_seconds`` at ``clocks_event_at``: agent/devtools/fake_nvml.py does, at every write)
 * is answered its count plus the time the current bits have held since: states written between two
 * reads count too. Otherwise the fake integrates each device's bits over CLOCK_MONOTONIC from the
 * library's load: a state's bits up to the moment its file was replaced (its mtime, not the moment
 * the fake noticed), the current state's up to the read; a state replaced before any read is lost.
 * Either way a reader between two writes sees the time the bits have held so far. */

static const struct {
    unsigned field;
    unsigned long long bit;
} reason_fields[] = {
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0x4},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0x10},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0x20},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0x40},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0x80},
};
#define REASON_FIELDS (sizeof reason_fields / sizeof reason_fields[0])

static double g_reason_ns[FAKE_MAX_DEVICES][REASON_FIELDS];
static double g_reason_at[FAKE_MAX_DEVICES]; /* CLOCK_MONOTONIC seconds counted up to; 0: not yet */

static void reasons_forget_locked(void) {
    memset(g_reason_ns, 0, sizeof g_reason_ns);
    memset(g_reason_at, 0, sizeof g_reason_at);
}

static void reasons_advance(const fake_device *d, unsigned i, double to) {
    if (g_reason_at[i] == 0) g_reason_at[i] = to; /* a device counts from when it is first seen */
    if (to <= g_reason_at[i]) return;
    for (size_t k = 0; k < REASON_FIELDS; k++)
        if (d->has_clocks_event_reasons && (d->clocks_event_reasons & reason_fields[k].bit))
            g_reason_ns[i][k] += (to - g_reason_at[i]) * 1e9;
    g_reason_at[i] = to;
}

static void reasons_reload_locked(const fake_state *old, const struct stat *written) {
    double now = monotonic_now();
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    double age = (double)(real.tv_sec - written->st_mtim.tv_sec) + (double)(real.tv_nsec - written->st_mtim.tv_nsec) / 1e9;
    double split = now - (age > 0 ? age : 0);
    for (unsigned i = 0; old && i < old->ndevices; i++)
        reasons_advance(&old->devices[i], i, split > g_reason_at[i] ? split : g_reason_at[i]);
}

/* The cumulative ns for a clocks event field, or 0 where it is not one or the device has none. */
static int reason_field(const fake_device *d, unsigned field, unsigned long long *out) {
    for (size_t k = 0; k < REASON_FIELDS; k++) {
        if (reason_fields[k].field != field) continue;
        if (!d->clocks_event_counters || !d->has_clocks_event_reasons) return 0;
        if (d->has_clocks_event_seconds) {
            double held = monotonic_now() - d->clocks_event_at;
            double s = d->clocks_event_seconds[k] + ((d->clocks_event_reasons & reason_fields[k].bit) && held > 0 ? held : 0);
            *out = (unsigned long long)(s * 1e9);
            return 1;
        }
        reasons_advance(d, d->index, monotonic_now());
        *out = (unsigned long long)g_reason_ns[d->index][k];
        return 1;
    }
    return 0;
}

/* --- counters ------------------------------------------------------------------------------------- */

static long long now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* NVML_FI_DEV_POWER_*: "Current GPU power, supported on all architectures" (186) and "GPU power
 * averaged over 1 sec interval, supported on Ampere (except GA100) or newer" (185), in mW as an
 * unsigned int; scopeId is the power scope, of which the fake keeps the GPU's (0). */
static int power_field(const fake_device *d, const nvmlFieldValue_t *v, unsigned *out) {
    int average = v->fieldId == NVML_FI_DEV_POWER_AVERAGE;
    if (!d->has_power || v->scopeId != NVML_POWER_SCOPE_GPU) return 0;
    if (d->power_fields == POWER_FIELDS_NONE || (average && d->power_fields != POWER_FIELDS_BOTH)) return 0;
    double mw = average ? averaged(d, AVG_POWER, 1.0) : instant_at(d, AVG_POWER, monotonic_now());
    *out = rounded(mw, 4e9);
    return 1;
}

/* NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL: one counter summed over the links, whatever the scopeId */
static int nvlink_error(const fake_device *d, int which, unsigned long long *out) {
    *out = d->nvlink_errors[which];
    return d->has_nvlink_errors[which];
}

FAKE_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetFieldValues, device, &d);
    if (r == NVML_SUCCESS && (valuesCount < 0 || (valuesCount > 0 && !values))) r = NVML_ERROR_INVALID_ARGUMENT;
    long long now = r == NVML_SUCCESS ? now_usec() : 0;
    for (int i = 0; r == NVML_SUCCESS && i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        int has = 0;
        unsigned long long value = 0;
        unsigned power = 0;
        /* NVLink throughput is only kept for all links together (scopeId UINT_MAX) */
        int all_links = v->scopeId == UINT_MAX;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        switch (v->fieldId) {
        case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: has = d->has_pcie_tx; value = d->pcie_tx; break;
        case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: has = d->has_pcie_rx; value = d->pcie_rx; break;
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: has = d->has_nvlink_tx && all_links; value = d->nvlink_tx_kib; break;
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: has = d->has_nvlink_rx && all_links; value = d->nvlink_rx_kib; break;
        case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: has = nvlink_error(d, 0, &value); break;
        case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: has = nvlink_error(d, 1, &value); break;
        case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: has = nvlink_error(d, 2, &value); break;
        case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: has = nvlink_error(d, 3, &value); break;
        case NVML_FI_DEV_POWER_AVERAGE:
        case NVML_FI_DEV_POWER_INSTANT: has = power_field(d, v, &power); v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT; break;
        default: has = reason_field(d, v->fieldId, &value);
        }
        v->timestamp = now;
        v->latencyUsec = 0;
        v->nvmlReturn = has ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        v->value.ullVal = 0;
        if (has && v->valueType == NVML_VALUE_TYPE_UNSIGNED_INT) v->value.uiVal = power;
        else if (has) v->value.ullVal = value;
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                  nvmlEccCounterType_t counterType, unsigned long long *counts) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetTotalEccErrors, device, &d);
    if (r == NVML_SUCCESS && (!counts || (unsigned)errorType > 1 || (unsigned)counterType > 1))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_ecc) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *counts = errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? d->ecc_uncorrected : d->ecc_corrected;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                unsigned int *isPending, unsigned int *failureOccurred) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetRemappedRows, device, &d);
    if (r == NVML_SUCCESS && (!corrRows || !uncRows || !isPending || !failureOccurred))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !d->has_row_remap) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        *corrRows = d->remapped_rows_correctable;
        *uncRows = d->remapped_rows_uncorrectable;
        *isPending = d->row_remap_pending;
        *failureOccurred = d->row_remap_failure;
    }
    return leave(r);
}

/* --- processes ------------------------------------------------------------------------------------ */

static nvmlReturn_t processes(enum fake_function fn, nvmlDevice_t device, unsigned int *count, void *infos,
                              int v1) {
    const fake_device *d;
    nvmlReturn_t r = enter(fn, device, &d);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS) return leave(r);
    unsigned n = (unsigned)d->nprocesses;
    if (*count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if (n && !infos) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < n; i++) {
        const fake_process *p = &d->processes[i];
        unsigned long long mem = p->has_memory ? p->used_memory : NVML_VALUE_NOT_AVAILABLE_ULL;
        if (v1) {
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){p->pid, mem};
        } else {
            ((nvmlProcessInfo_t *)infos)[i] =
                (nvmlProcessInfo_t){p->pid, mem, NVML_VALUE_NOT_AVAILABLE_UINT, NVML_VALUE_NOT_AVAILABLE_UINT};
        }
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p) {
    return processes(FN_nvmlDeviceGetComputeRunningProcesses, d, n, p, 1);
}
FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p) {
    return processes(FN_nvmlDeviceGetComputeRunningProcesses_v2, d, n, p, 0);
}
FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p) {
    return processes(FN_nvmlDeviceGetComputeRunningProcesses_v3, d, n, p, 0);
}

/* --- events: Xid critical errors from the state's xid_events, each seq handed out once ------------- */

static int delivered(unsigned index, unsigned long long seq) {
    for (size_t i = 0; i < g_delivered[index].n; i++)
        if (g_delivered[index].seqs[i] == seq) return 1;
    return 0;
}

static int mark_delivered(unsigned index, unsigned long long seq) {
    seq_set *s = &g_delivered[index];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        unsigned long long *seqs = realloc(s->seqs, cap * sizeof *seqs);
        if (!seqs) return -1;
        s->seqs = seqs;
        s->cap = cap;
    }
    s->seqs[s->n++] = seq;
    return 0;
}

static int valid_set(nvmlEventSet_t set) { return set && set->magic == EVENTSET_MAGIC; }

FAKE_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t r = system_enter(FN_nvmlEventSetCreate);
    if (r == NVML_SUCCESS && !set) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *set = calloc(1, sizeof **set);
        if (!*set) r = NVML_ERROR_MEMORY;
        else (*set)->magic = EVENTSET_MAGIC;
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t r = system_enter(FN_nvmlEventSetFree);
    if (r == NVML_SUCCESS && !valid_set(set)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        set->magic = 0;
        free(set);
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceGetSupportedEventTypes, device, &d);
    if (r == NVML_SUCCESS && !types) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) *types = SUPPORTED_EVENTS;
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlDeviceRegisterEvents, device, &d);
    if (r == NVML_SUCCESS && !valid_set(set)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (types & ~(unsigned long long)SUPPORTED_EVENTS)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) set->types[d->index] |= types;
    return leave(r);
}

static nvmlReturn_t next_event_locked(nvmlEventSet_t set, nvmlEventData_t *data) {
    for (unsigned i = 0; i < g_state->ndevices; i++) {
        if (!(set->types[i] & nvmlEventTypeXidCriticalError)) continue;
        const fake_device *d = &g_state->devices[i];
        for (size_t k = 0; k < d->nxids; k++) {
            if (delivered(i, d->xids[k].seq)) continue;
            if (mark_delivered(i, d->xids[k].seq)) return NVML_ERROR_MEMORY;
            data->device = &g_handles[i];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = d->xids[k].xid;
            data->gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
            data->computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

/* A real nvmlEventSetWait blocks in the kernel until an event comes or the timeout passes, costing
 * its caller no CPU meanwhile. The fake's events come from its state file, so it sleeps on inotify
 * for the file's directory (a writer's rename, close or truncation wakes it) instead of waking every
 * EVENT_POLL_MS: polling cost the agent's Xid thread ~1.3 ms of CPU a second, which a real driver
 * does not. Without inotify it polls as before. -1: no watch. */
static int state_watch(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    if (!path || !*path) return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return -1;
    uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MODIFY | IN_DELETE | IN_ATTRIB;
    if (inotify_add_watch(fd, dir, mask) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void state_wait(int fd, long long ms) {
    if (fd < 0) {
        sleep_ms((unsigned)(ms < EVENT_POLL_MS ? ms : EVENT_POLL_MS));
        return;
    }
    /* at most a second at a time: a caller that points FAKE_NVML_STATE elsewhere meanwhile is seen */
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(ms < 1000 ? ms : 1000)) > 0) {
        char buf[4096];
        while (read(fd, buf, sizeof buf) > 0) {
        }
        /* a file rewritten many times a second (the lab paints phases) wakes the wait no more often
         * than the poll did: each look re-reads the state under the lock the readers need */
        sleep_ms((unsigned)(ms < EVENT_POLL_MS ? ms : EVENT_POLL_MS));
    }
}

static nvmlReturn_t event_wait(enum fake_function fn, nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeoutms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int watch = state_watch(); /* before the first look: a write in between still wakes the wait */
    for (;;) {
        nvmlReturn_t r = system_enter(fn);
        if (r == NVML_SUCCESS && (!valid_set(set) || !data)) r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS) r = next_event_locked(set, data);
        leave(r);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long waited = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000LL;
        if (r != NVML_ERROR_TIMEOUT || waited >= timeoutms) {
            if (watch >= 0) close(watch);
            return r;
        }
        state_wait(watch, (long long)timeoutms - waited);
    }
}

FAKE_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(FN_nvmlEventSetWait, set, data, timeoutms);
}
FAKE_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(FN_nvmlEventSetWait_v2, set, data, timeoutms);
}

/* --- GPM: a sample holds the state's activity percentages at sampling time; a metric reports the
 * mean between the two samples where the state carries integrals (as the real library does), else
 * the later sample's value ---------------------------------------------------------------------------- */

/* "The interval between two nvmlGpmSampleGet() calls should be greater than 100ms due to the internal
 * sample refresh rate" (NVML API reference, GPM functions): the device's ``gpm_min_interval_seconds``,
 * 0.1 unless a unit test that ticks back to back says otherwise. What the real library answers for
 * closer samples is not documented: the fake refuses the whole nvmlGpmMetricsGet (docs/fake-nvml.md). */

static int valid_sample(nvmlGpmSample_t s) { return s && s->magic == GPM_MAGIC; }

static int has_gpm(const fake_device *d) { return d->has_sm_active || d->has_tensor_active || d->has_dram_active; }

/* the metric's slot in a sample, or -1 for one the fake does not know */
static int gpm_slot(unsigned metric_id) {
    switch (metric_id) {
    case NVML_GPM_METRIC_SM_UTIL: return GPM_SM;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: return GPM_TENSOR;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: return GPM_DRAM;
    case NVML_GPM_METRIC_GRAPHICS_UTIL: return GPM_GRAPHICS;
    default: return -1;
    }
}

FAKE_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlGpmQueryDeviceSupport, device, &d);
    if (r == NVML_SUCCESS && !support) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && support->version != NVML_GPM_SUPPORT_VERSION) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) support->isSupportedDevice = has_gpm(d);
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    nvmlReturn_t r = system_enter(FN_nvmlGpmSampleAlloc);
    if (r == NVML_SUCCESS && !sample) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *sample = calloc(1, sizeof **sample);
        if (!*sample) r = NVML_ERROR_MEMORY;
        else (*sample)->magic = GPM_MAGIC;
    }
    return leave(r);
}

FAKE_API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    nvmlReturn_t r = system_enter(FN_nvmlGpmSampleFree);
    if (r == NVML_SUCCESS && !valid_sample(sample)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        sample->magic = 0;
        free(sample);
    }
    return leave(r);
}

static void take_gpm_sample(const fake_device *d, nvmlGpmSample_t sample) {
    /* graphics util is the utilization a kernel ran, kept wherever GPM is */
    const int has[GPM_COUNT] = {d->has_sm_active, d->has_tensor_active, d->has_dram_active, d->has_utilization};
    sample->filled = 1;
    sample->index = d->index;
    sample->at = monotonic_now();
    for (int m = 0; m < GPM_COUNT; m++) {
        enum fake_averaged k = gpm_reading[m];
        sample->has[m] = has[m];
        sample->value[m] = current(d, k);
        sample->has_integral[m] = integrated(d, k) && sample->at >= d->integrals[0].at;
        sample->integral[m] = sample->has_integral[m] ? integral_at(d, k, sample->at) : 0;
    }
}

FAKE_API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    const fake_device *d;
    nvmlReturn_t r = enter(FN_nvmlGpmSampleGet, device, &d);
    if (r == NVML_SUCCESS && !valid_sample(sample)) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !has_gpm(d)) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) take_gpm_sample(d, sample);
    return leave(r);
}

static nvmlReturn_t check_gpm_request(const nvmlGpmMetricsGet_t *mg) {
    if (!mg) return NVML_ERROR_INVALID_ARGUMENT;
    if (mg->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const nvmlGpmSample_t s1 = mg->sample1, s2 = mg->sample2;
    if (mg->numMetrics > FAKE_GPM_METRIC_MAX || !valid_sample(s1) || !valid_sample(s2) || !s1->filled ||
        !s2->filled || s1->index != s2->index)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (s2->index >= g_state->ndevices || g_state->devices[s2->index].lost) return NVML_ERROR_GPU_IS_LOST;
    const fake_device *d = &g_state->devices[s2->index];
    if (d->unsupported[FN_nvmlGpmMetricsGet]) return NVML_ERROR_NOT_SUPPORTED;
    double gap = s2->at > s1->at ? s2->at - s1->at : s1->at - s2->at;
    if (gap <= d->gpm_min_interval_s && d->gpm_min_interval_s > 0) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* With integrals in both samples, the mean between them; else (or for a writer that started over,
 * with integrals lower than before) the later sample's value. */
static double gpm_value(nvmlGpmSample_t s1, nvmlGpmSample_t s2, int m) {
    if (s1->has_integral[m] && s2->has_integral[m] && s2->at > s1->at && s2->integral[m] >= s1->integral[m])
        return (s2->integral[m] - s1->integral[m]) / (s2->at - s1->at);
    return s2->value[m];
}

FAKE_API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *mg) {
    static const char *const names[GPM_COUNT] = {"sm_util", "any_tensor_util", "dram_bw_util", "graphics_util"};
    nvmlReturn_t r = system_enter(FN_nvmlGpmMetricsGet);
    if (r == NVML_SUCCESS) r = check_gpm_request(mg);
    for (unsigned i = 0; r == NVML_SUCCESS && i < mg->numMetrics; i++) {
        nvmlGpmMetric_t *m = &mg->metrics[i];
        int slot = gpm_slot(m->metricId);
        int has = slot >= 0 && mg->sample2->has[slot];
        m->nvmlReturn = has ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        m->value = has ? gpm_value(mg->sample1, mg->sample2, slot) : 0.0;
        m->metricInfo.shortName = slot >= 0 ? (char *)names[slot] : NULL;
        m->metricInfo.longName = m->metricInfo.shortName;
        m->metricInfo.unit = has ? (char *)"%" : NULL;
    }
    return leave(r);
}
