/*
 * A fake libnvidia-ml.so.1 for the nvidia plugin's tests: no GPU, no driver.
 *
 * It exports the NVML entry points the plugin calls through nvidia-ml-py
 * (pynvml), with the binding's struct layouts, so that the binding's own
 * ctypes code runs unchanged. What it reports comes from a scenario file named
 * by FAKE_NVML_SCENARIO, re-read whenever that file changes (inode, size or
 * mtime), so a test can make a GPU vanish or an event fire under a live
 * stream. tests/support/fakenvml.py writes the file from a Python dict
 * (and tests/support/nvidia_profiles.py holds one per class of GPU); one record
 * per line, fields separated by tabs:
 *
 *   init    <nvml return code of nvmlInit>      (9: driver not loaded, 4: no permission)
 *   driver  <version of the library on disk>    (what a process loads)
 *   kernel  <version of the loaded kernel module> (default: the driver's)
 *   root    <0 | 1>                             is the caller privileged (default 1)
 *   interrupts <n>                              the next n event waits end early
 *   gpus    <device count>
 *   dev     <gpuN | gpuN/migM>  <key>  <value>        a device property
 *   error   <function>  <* | system | gpuN | gpuN/migM>  <code>  <times, 0: always>
 *   event   <seq>  <gpuN>  <event type mask>  <event data>  <gi>  <ci>
 *
 * Device properties are plain key/value pairs; a getter whose key is absent
 * answers NVML_ERROR_NOT_SUPPORTED, and "lost 1" on a GPU makes every call on
 * it (and on its MIG devices) answer NVML_ERROR_GPU_IS_LOST. An event set
 * delivers the events whose seq is above the highest seq present when it was
 * created, in seq order, for the GPUs and types registered with it.
 *
 * What real GPUs do beyond that is modelled from a few class facts on the GPU
 * (keys "arch": compute capability x 10, "ecc_capable", "ecc_mode",
 * "mig_capable", "mig_mode", "integrated") and the node ("root", "driver",
 * "kernel"). Each rule says where it comes from: "nvml.h" is NVIDIA's header
 * (CUDA 12.6, and 12.9/13.x where a newer driver is named; read from
 * NVIDIA/go-nvml gen/nvml/nvml.h), "issue 19" the NVML expert's comparison of
 * this fake with real GPUs that the rules answer.
 *
 * Without a scenario file nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED.
 * Device commands that succeed (the clock resets) are appended to the file
 * FAKE_NVML_CALLS names, if set.
 *
 * Built with -DFAKE_NVML_PRE_R450 it lacks nvmlEventSetWait_v2, as drivers
 * before R450 do: the binding's event wait then answers FUNCTION_NOT_FOUND.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 8
#define MAX_MIGS 7
#define MAX_KEYS 64
#define MAX_FAULTS 32
#define MAX_EVENTS 64
#define MAX_SETS 16
#define NO_INSTANCE 0xFFFFFFFFu

/* nvml.h: NVML_INIT_FLAG_NO_GPUS, "Don't fail nvmlInit() when no GPUs are found". */
#define INIT_FLAG_NO_GPUS 1u

/* nvml.h event types. */
#define EVENT_SINGLE_BIT_ECC 0x1ULL
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_PSTATE 0x4ULL
#define EVENT_XID 0x8ULL
#define EVENT_MIG_CONFIG_CHANGE 0x100ULL
#define EVENT_GPU_UNAVAILABLE 0x4000ULL
#define EVENT_GPU_RECOVERY_ACTION 0x8000ULL
#define ECC_EVENTS (EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC)

/* nvml.h: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_VALUE_TYPE_UNSIGNED_INT. */
#define FI_GPU_RECOVERY_ACTION 230u
#define VALUE_TYPE_UNSIGNED_INT 1

/* nvml.h: nvmlMemoryErrorType_t, nvmlEccCounterType_t, nvmlMemoryLocation_t. */
#define VOLATILE_ECC 0
#define LOCATION_L1_CACHE 0
#define LOCATION_L2_CACHE 1
#define LOCATION_DRAM 2

/* Architectures by compute capability x 10. */
#define ARCH_AMPERE 80

/* The first driver branch whose nvml.h (CUDA 12.9) has the GPU-unavailable and
 * recovery-action events and the recovery-action field. */
#define DRIVER_WITH_RECOVERY 575

/* Layouts as nvidia-ml-py declares them (pynvml.py). */
struct device {
    int gpu;
    int mig; /* -1: the GPU itself */
};
typedef struct device *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned long long bar1Total, bar1Free, bar1Used;
} nvmlBAR1Memory_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

struct event_set {
    int in_use, busy, generation;
    unsigned long long mask[MAX_GPUS];
    long last_seq;
};
typedef struct event_set *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* The scenario as last read. */
struct kv {
    char key[40];
    char value[120];
};
struct node {
    int present, nkeys;
    struct kv keys[MAX_KEYS];
};
struct fault {
    char function[64], target[24];
    int code, times; /* times: 0 always, >0 that many more, <0 spent */
};
struct event {
    long seq;
    int gpu;
    unsigned long long type, data;
    unsigned int gi, ci;
};

static struct {
    int init_code;
    char driver[80], kernel[80];
    int root, interrupts;
    int gpu_count;
    struct node nodes[MAX_GPUS][MAX_MIGS + 1]; /* [g][0]: GPU g, [g][1 + m]: its MIG m */
    int nfaults;
    struct fault faults[MAX_FAULTS];
    int nevents;
    struct event events[MAX_EVENTS];
} sc;

static struct device handles[MAX_GPUS][MAX_MIGS + 1];
static struct event_set sets[MAX_SETS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int generation; /* counts the times NVML was shut down to zero */
static int waits_running;
static int loaded;
static struct stat seen;
/* The version this copy of the library was built as: the scenario's driver
 * when it was loaded. A driver upgrade changes the kernel module, not the
 * copy a process already mapped. */
static char library_version[80];

static void reload(void);

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

__attribute__((constructor)) static void load(void) {
    for (int g = 0; g < MAX_GPUS; g++)
        for (int m = 0; m <= MAX_MIGS; m++)
            handles[g][m] = (struct device){g, m - 1};
    pthread_mutex_lock(&lock);
    reload();
    copy(library_version, sizeof library_version, sc.driver);
    pthread_mutex_unlock(&lock);
}

/* Undefined behaviour in real NVML is a crash here, loudly. */
static void misuse(const char *what) {
    fprintf(stderr, "fake NVML: %s (undefined in NVML)\n", what);
    fflush(stderr);
    abort();
}

/* ---------------------------------------------------------------- scenario */

static char *next_field(char **rest) {
    char *field = *rest;
    if (field == NULL)
        return "";
    char *tab = strchr(field, '\t');
    if (tab != NULL) {
        *tab = '\0';
        *rest = tab + 1;
    } else {
        *rest = NULL;
    }
    return field;
}

/* "gpu2" -> (2, -1); "gpu2/mig1" -> (2, 1); 0 when malformed. */
static int parse_target(const char *text, int *gpu, int *mig) {
    *mig = -1;
    int n = sscanf(text, "gpu%d/mig%d", gpu, mig);
    if (n < 1 || *gpu < 0 || *gpu >= MAX_GPUS || *mig >= MAX_MIGS)
        return 0;
    if (n == 1)
        *mig = -1;
    return 1;
}

static void parse_line(char *line) {
    char *rest = line;
    const char *kind = next_field(&rest);
    int gpu, mig;
    if (strcmp(kind, "init") == 0) {
        sc.init_code = atoi(next_field(&rest));
    } else if (strcmp(kind, "driver") == 0) {
        copy(sc.driver, sizeof sc.driver, next_field(&rest));
    } else if (strcmp(kind, "kernel") == 0) {
        copy(sc.kernel, sizeof sc.kernel, next_field(&rest));
    } else if (strcmp(kind, "root") == 0) {
        sc.root = atoi(next_field(&rest));
    } else if (strcmp(kind, "interrupts") == 0) {
        sc.interrupts = atoi(next_field(&rest));
    } else if (strcmp(kind, "gpus") == 0) {
        sc.gpu_count = atoi(next_field(&rest));
        if (sc.gpu_count > MAX_GPUS)
            sc.gpu_count = MAX_GPUS;
    } else if (strcmp(kind, "dev") == 0) {
        if (!parse_target(next_field(&rest), &gpu, &mig))
            return;
        struct node *node = &sc.nodes[gpu][mig + 1];
        if (node->nkeys == MAX_KEYS)
            return;
        node->present = 1;
        struct kv *kv = &node->keys[node->nkeys++];
        copy(kv->key, sizeof kv->key, next_field(&rest));
        copy(kv->value, sizeof kv->value, next_field(&rest));
    } else if (strcmp(kind, "error") == 0 && sc.nfaults < MAX_FAULTS) {
        struct fault *f = &sc.faults[sc.nfaults++];
        copy(f->function, sizeof f->function, next_field(&rest));
        copy(f->target, sizeof f->target, next_field(&rest));
        f->code = atoi(next_field(&rest));
        f->times = atoi(next_field(&rest));
    } else if (strcmp(kind, "event") == 0 && sc.nevents < MAX_EVENTS) {
        struct event *e = &sc.events[sc.nevents++];
        e->seq = atol(next_field(&rest));
        e->gpu = atoi(next_field(&rest));
        e->type = strtoull(next_field(&rest), NULL, 0);
        e->data = strtoull(next_field(&rest), NULL, 0);
        e->gi = (unsigned)strtoul(next_field(&rest), NULL, 0);
        e->ci = (unsigned)strtoul(next_field(&rest), NULL, 0);
    }
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Re-read the scenario if its file changed; called with the lock held. */
static void reload(void) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) {
        if (!loaded || seen.st_ino != 0) {
            memset(&sc, 0, sizeof sc);
            sc.init_code = NVML_ERROR_DRIVER_NOT_LOADED;
            memset(&seen, 0, sizeof seen);
            loaded = 1;
        }
        return;
    }
    if (loaded && same_file(&st, &seen))
        return;
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return;
    memset(&sc, 0, sizeof sc);
    copy(sc.driver, sizeof sc.driver, "0.0");
    sc.root = 1;
    sc.gpu_count = -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, file)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        parse_line(line);
    }
    free(line);
    fclose(file);
    if (sc.kernel[0] == '\0')
        copy(sc.kernel, sizeof sc.kernel, sc.driver);
    if (sc.gpu_count < 0) {
        sc.gpu_count = 0;
        for (int g = 0; g < MAX_GPUS; g++)
            if (sc.nodes[g][0].present)
                sc.gpu_count = g + 1;
    }
    for (int g = 0; g < sc.gpu_count; g++)
        sc.nodes[g][0].present = 1;
    seen = st;
    loaded = 1;
}

/* ------------------------------------------------------------------ lookup */

static int is_handle(const struct device *d) {
    const struct device *first = &handles[0][0];
    const struct device *end = first + MAX_GPUS * (MAX_MIGS + 1);
    return d >= first && d < end;
}

static struct node *node_of(const struct device *d) {
    return &sc.nodes[d->gpu][d->mig + 1];
}

static const char *value_of(const struct device *d, const char *key) {
    const struct node *node = node_of(d);
    for (int i = 0; i < node->nkeys; i++)
        if (strcmp(node->keys[i].key, key) == 0)
            return node->keys[i].value;
    return NULL;
}

/* A class fact of the GPU a device belongs to (its own for a GPU, the parent's for a MIG device). */
static long fact(const struct device *d, const char *key, long fallback) {
    const char *value = value_of(&handles[d->gpu][0], key);
    return value != NULL ? strtol(value, NULL, 0) : fallback;
}

static int is_mig(const struct device *d) {
    return d->mig >= 0;
}

static int mig_enabled(const struct device *d) {
    return fact(d, "mig_capable", 0) && fact(d, "mig_mode", 0) == 1;
}

static int driver_branch(void) {
    return atoi(library_version);
}

static int present(const struct device *d) {
    return d->gpu < sc.gpu_count && node_of(d)->present;
}

static int is_lost(const struct device *d) {
    return fact(d, "lost", 0) == 1;
}

static int target_matches(const char *target, const struct device *d) {
    if (strcmp(target, "*") == 0)
        return 1;
    if (d == NULL)
        return strcmp(target, "system") == 0;
    int gpu, mig;
    return parse_target(target, &gpu, &mig) && gpu == d->gpu && mig == d->mig;
}

static int injected(const char *function, const struct device *d) {
    for (int i = 0; i < sc.nfaults; i++) {
        struct fault *f = &sc.faults[i];
        if (f->times < 0 || strcmp(f->function, function) != 0 || !target_matches(f->target, d))
            continue;
        if (f->times > 0 && --f->times == 0)
            f->times = -1;
        return f->code;
    }
    return NVML_SUCCESS;
}

/* nvml.h, NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM detects a driver/library
 * version mismatch". After a driver upgrade the kernel module is the new
 * version while a running process still has the old library mapped; every call
 * fails until that process loads the library afresh (issue 19). */
static int version_mismatch(void) {
    return loaded && sc.init_code == NVML_SUCCESS && strcmp(library_version, sc.kernel) != 0;
}

/* Take the lock and vet a call; the caller releases with finish(). */
static nvmlReturn_t begin(const char *function, const struct device *d, int needs_device) {
    pthread_mutex_lock(&lock);
    reload();
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (version_mismatch())
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    if (needs_device && (d == NULL || !is_handle(d)))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d != NULL && !present(d))
        return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t fault = injected(function, d);
    if (fault != NVML_SUCCESS)
        return fault;
    if (d != NULL && is_lost(d))
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t finish(nvmlReturn_t rc) {
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Under the lock: the value of a key, or NOT_SUPPORTED when the device lacks it. */
static nvmlReturn_t read_ull(nvmlDevice_t d, const char *key, unsigned long long *out) {
    const char *value = value_of(d, key);
    if (value == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = strtoull(value, NULL, 0);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_ull(const char *function, nvmlDevice_t d, const char *key,
                            unsigned long long *out) {
    nvmlReturn_t rc = begin(function, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    return finish(read_ull(d, key, out));
}

static nvmlReturn_t get_uint(const char *function, nvmlDevice_t d, const char *key,
                             unsigned int *out) {
    unsigned long long value = 0;
    nvmlReturn_t rc = get_ull(function, d, key, out == NULL ? NULL : &value);
    if (rc == NVML_SUCCESS)
        *out = (unsigned int)value;
    return rc;
}

/* A per-GPU reading a MIG device handle does not give (issue 19, nvml.h's MIG
 * notes): only identity, memory and instance IDs are per instance. */
static nvmlReturn_t get_gpu_uint(const char *function, nvmlDevice_t d, const char *key,
                                 unsigned int *out) {
    if (d != NULL && is_handle(d) && is_mig(d)) {
        nvmlReturn_t rc = begin(function, d, 1);
        return finish(rc != NVML_SUCCESS ? rc : NVML_ERROR_NOT_SUPPORTED);
    }
    return get_uint(function, d, key, out);
}

static nvmlReturn_t get_string(const char *function, nvmlDevice_t d, const char *key, char *buf,
                               unsigned int size) {
    nvmlReturn_t rc = begin(function, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *value = value_of(d, key);
    if (value == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if (buf == NULL || strlen(value) + 1 > size)
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    copy(buf, size, value);
    return finish(NVML_SUCCESS);
}

/* -------------------------------------------------------------- life cycle */

/* nvml.h, nvmlInitWithFlags / NVML_INIT_FLAG_NO_GPUS: without the flag,
 * initialising on a node whose driver is loaded but finds no GPU fails with
 * NVML_ERROR_GPU_NOT_FOUND (28, "No GPUs were found"). */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    pthread_mutex_lock(&lock);
    reload();
    nvmlReturn_t rc = sc.init_code;
    if (rc == NVML_SUCCESS && version_mismatch())
        rc = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS && sc.gpu_count == 0 && !(flags & INIT_FLAG_NO_GPUS))
        rc = NVML_ERROR_GPU_NOT_FOUND;
    if (rc == NVML_SUCCESS)
        initialized++;
    return finish(rc);
}

nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    if (!initialized)
        return finish(NVML_ERROR_UNINITIALIZED);
    /* Issue 19: nvmlShutdown while another thread waits on an event set is
     * undefined (nvml.h promises thread safety for calls, not for tearing the
     * library down under one). */
    if (waits_running > 0)
        misuse("nvmlShutdown while nvmlEventSetWait runs in another thread");
    if (--initialized == 0) {
        generation++;
        for (int i = 0; i < MAX_SETS; i++)
            sets[i].in_use = 0;
    }
    return finish(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
        return "GPU requires restart";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_DEPRECATED:
        return "Deprecated";
    case NVML_ERROR_NOT_READY:
        return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND:
        return "GPU not found";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int size) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (version == NULL || strlen(library_version) + 1 > size)
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    copy(version, size, library_version);
    return finish(NVML_SUCCESS);
}

/* ----------------------------------------------------------------- handles */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc == NVML_SUCCESS)
        *count = (unsigned int)sc.gpu_count;
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    reload();
    int known = index < (unsigned)sc.gpu_count;
    pthread_mutex_unlock(&lock);
    if (!known) {
        nvmlReturn_t rc = begin(__func__, NULL, 0);
        return finish(rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlDevice_t d = &handles[index][0];
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        *device = d;
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    reload();
    nvmlDevice_t found = NULL;
    for (int g = 0; g < sc.gpu_count && found == NULL; g++)
        for (int m = -1; m < MAX_MIGS && found == NULL; m++) {
            nvmlDevice_t d = &handles[g][m + 1];
            const char *value = present(d) ? value_of(d, "uuid") : NULL;
            if (uuid != NULL && value != NULL && strcmp(value, uuid) == 0)
                found = d;
        }
    pthread_mutex_unlock(&lock);
    nvmlReturn_t rc = begin(__func__, found, 0);
    if (rc == NVML_SUCCESS && found == NULL)
        rc = NVML_ERROR_NOT_FOUND;
    if (rc == NVML_SUCCESS)
        *device = found;
    return finish(rc);
}

/* ---------------------------------------------------------- identification */

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int size) {
    return get_string(__func__, d, "uuid", uuid, size);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int size) {
    return get_string(__func__, d, "name", name, size);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    return get_gpu_uint(__func__, d, "minor", minor);
}

/* nvml.h: NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0" and the legacy
 * "%04X:%02X:%02X.0": NVML writes bus IDs in upper case, where sysfs (and so
 * Nomad's NUMA topology) uses lower case. The scenario gives the numbers. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *bus_id = value_of(&handles[d->gpu][0], "pci_bus_id");
    if (bus_id == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    memset(pci, 0, sizeof *pci);
    unsigned int function = 0;
    sscanf(bus_id, "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &function);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0",
             pci->domain & 0xffff, pci->bus, pci->device);
    const char *id = value_of(&handles[d->gpu][0], "pci_device_id");
    pci->pciDeviceId = id != NULL ? (unsigned)strtoul(id, NULL, 0) : 0;
    return finish(NVML_SUCCESS);
}

/* ----------------------------------------------------------- static facts */

static nvmlReturn_t memory_rule(nvmlDevice_t d) {
    /* nvml.h, nvmlDeviceGetMemoryInfo: "the integrated GPU (iGPU) does not use
     * a dedicated framebuffer ... NVML_ERROR_NOT_SUPPORTED will be returned". */
    if (fact(d, "integrated", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    /* nvml.h, nvmlDeviceGetMemoryInfo and nvmlDeviceGetBAR1MemoryInfo: "In MIG
     * mode, if device handle is provided, the API returns aggregate
     * information, only if the caller has appropriate privileges." */
    if (!is_mig(d) && mig_enabled(d) && !sc.root)
        return NVML_ERROR_NO_PERMISSION;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        rc = memory_rule(d);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *total = value_of(d, "memory_total");
    const char *used = value_of(d, "memory_used");
    if (total == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    memory->total = strtoull(total, NULL, 0);
    memory->used = used != NULL ? strtoull(used, NULL, 0) : 0;
    memory->free = memory->total - memory->used;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlBAR1Memory_t *bar1) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        rc = memory_rule(d);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *total = value_of(d, "bar1_total");
    const char *used = value_of(d, "bar1_used");
    if (total == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    bar1->bar1Total = strtoull(total, NULL, 0);
    bar1->bar1Used = used != NULL ? strtoull(used, NULL, 0) : 0;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return get_gpu_uint(__func__, d, "pcie_width", width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *generation) {
    return get_gpu_uint(__func__, d, "pcie_gen", generation);
}

static const char *clock_name(int type) {
    static const char *names[] = {"graphics", "sm", "mem", "video"};
    return type >= 0 && type < 4 ? names[type] : NULL;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    char key[40];
    if (clock_name(type) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "max_clock_%s", clock_name(type));
    return get_gpu_uint(__func__, d, key, mhz);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    char key[40];
    if (clock_name(type) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "clock_%s", clock_name(type));
    return get_gpu_uint(__func__, d, key, mhz);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *milliwatts) {
    return get_gpu_uint(__func__, d, "power_limit", milliwatts);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *milliwatts) {
    return get_gpu_uint(__func__, d, "power_usage", milliwatts);
}

/* Recorded nvidia-smi -q -x of driver 595 (a GeForce RTX 3080 and an RTX 4000
 * Ada, in telegraf's nvidia_smi test data) show display_mode as "Requested
 * functionality has been deprecated": nvmlDeviceGetDisplayMode answers
 * NVML_ERROR_DEPRECATED from that branch on. */
#define DRIVER_WITHOUT_DISPLAY_MODE 595

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, unsigned int *mode) {
    if (driver_branch() >= DRIVER_WITHOUT_DISPLAY_MODE) {
        nvmlReturn_t rc = begin(__func__, d, 1);
        return finish(rc != NVML_SUCCESS ? rc : NVML_ERROR_DEPRECATED);
    }
    return get_gpu_uint(__func__, d, "display_mode", mode);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode) {
    return get_gpu_uint(__func__, d, "persistence_mode", mode);
}

/* -------------------------------------------------------------------- MIG */

/* nvml.h, nvmlDeviceGetMigMode: "NVML_ERROR_NOT_SUPPORTED If device doesn't
 * support MIG mode"; the pending mode equals the current one here. */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (is_mig(d) || !fact(d, "mig_capable", 0))
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if (current == NULL || pending == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = (unsigned)fact(d, "mig_mode", 0);
    return finish(NVML_SUCCESS);
}

/* nvml.h, nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not
 * supported or enabled" (SUCCESS, not an error); A100 and H100 hold 7. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (is_mig(d) || count == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    *count = mig_enabled(d) ? MAX_MIGS : 0;
    return finish(NVML_SUCCESS);
}

/* nvml.h, nvmlDeviceGetMigDeviceHandleByIndex: NOT_FOUND "if no valid MIG
 * device was found at index"; "Handles may be reused and their properties can
 * change" after a reconfiguration: here slot m always has the same handle,
 * whichever instance the scenario puts there. */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *mig) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (is_mig(d))
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (!fact(d, "mig_capable", 0))
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if (index >= MAX_MIGS)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (!mig_enabled(d) || !sc.nodes[d->gpu][index + 1].present)
        return finish(NVML_ERROR_NOT_FOUND);
    nvmlDevice_t found = &handles[d->gpu][index + 1];
    rc = injected(__func__, found);
    if (rc == NVML_SUCCESS)
        *mig = found;
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (!is_mig(d))
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    *parent = &handles[d->gpu][0];
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig_handle) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        *is_mig_handle = is_mig(d);
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    return get_uint(__func__, d, "gi", id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    return get_uint(__func__, d, "ci", id);
}

/* ----------------------------------------------------------------- status */

/* nvml.h, utilization, encoder and decoder: "On MIG-enabled GPUs, querying
 * ... is not currently supported" (through the parent or a MIG handle). */
static nvmlReturn_t utilization_rule(nvmlDevice_t d) {
    return is_mig(d) || mig_enabled(d) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        rc = utilization_rule(d);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *gpu = value_of(d, "util_gpu");
    const char *memory = value_of(d, "util_memory");
    if (gpu == NULL || memory == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    util->gpu = (unsigned)strtoul(gpu, NULL, 0);
    util->memory = (unsigned)strtoul(memory, NULL, 0);
    return finish(NVML_SUCCESS);
}

static nvmlReturn_t codec_utilization(const char *function, nvmlDevice_t d, const char *key,
                                      unsigned int *util, unsigned int *period_us) {
    nvmlReturn_t rc = begin(function, d, 1);
    if (rc == NVML_SUCCESS)
        rc = utilization_rule(d);
    unsigned long long value = 0;
    if (rc == NVML_SUCCESS)
        rc = read_ull(d, key, &value);
    if (rc == NVML_SUCCESS) {
        *util = (unsigned)value;
        *period_us = 167000;
    }
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *util,
                                             unsigned int *period_us) {
    return codec_utilization(__func__, d, "util_encoder", util, period_us);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *util,
                                             unsigned int *period_us) {
    return codec_utilization(__func__, d, "util_decoder", util, period_us);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *celsius) {
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_gpu_uint(__func__, d, "temperature", celsius);
}

/* nvml.h, nvmlDeviceGetTotalEccErrors and nvmlDeviceGetMemoryErrorCounter:
 * "Only applicable to devices with ECC. Requires ECC Mode to be enabled."
 * GeForce cards have no ECC (issue 19). In MIG mode "Querying volatile errors
 * using device handles is currently not supported", and a MIG handle gives
 * only uncorrectable volatile counts outside DRAM. */
static nvmlReturn_t ecc_rule(nvmlDevice_t d, int error_type, int counter_type, int location) {
    if (!fact(d, "ecc_capable", 0) || !fact(d, "ecc_mode", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    if (is_mig(d))
        return error_type == 1 && counter_type == VOLATILE_ECC && location >= 0 &&
                       location != LOCATION_DRAM
                   ? NVML_SUCCESS
                   : NVML_ERROR_NOT_SUPPORTED;
    if (mig_enabled(d) && counter_type == VOLATILE_ECC)
        return NVML_ERROR_NOT_SUPPORTED;
    /* nvml.h, nvmlMemoryLocation_t: DRAM and SRAM are the "Turing+" locations
     * and nvmlEccErrorCounts_t is deprecated because "Different GPU families
     * can have different memory error counters": Ampere and Hopper report no
     * L1/L2 cache locations (issue 19). */
    if ((location == LOCATION_L1_CACHE || location == LOCATION_L2_CACHE) &&
        fact(d, "arch", ARCH_AMPERE) >= ARCH_AMPERE)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static const char *error_type_name(int type) {
    return type == 0 ? "corrected" : type == 1 ? "uncorrected" : NULL;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t d, int error_type, int counter_type,
                                             int location, unsigned long long *count) {
    static const char *locations[] = {"l1", "l2", "dram", "rf", "tex", "shm", "cbu", "sram"};
    char key[40];
    if (error_type_name(error_type) == NULL || location < 0 || location > 7)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ecc_%s_%s", error_type_name(error_type), locations[location]);
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        rc = ecc_rule(d, error_type, counter_type, location);
    if (rc == NVML_SUCCESS)
        rc = read_ull(d, key, count);
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type,
                                         unsigned long long *count) {
    char key[40];
    if (error_type_name(error_type) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ecc_%s_total", error_type_name(error_type));
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        rc = ecc_rule(d, error_type, counter_type, -1);
    if (rc == NVML_SUCCESS)
        rc = read_ull(d, key, count);
    return finish(rc);
}

/* nvml.h, nvmlDeviceGetRetiredPagesPendingStatus: "For Kepler or newer fully
 * supported devices"; it needs ECC memory, and from Ampere on row remapping
 * replaces page retirement (NVIDIA's GPU memory error management guide), so
 * only ECC GPUs before Ampere answer. */
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, unsigned int *pending) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS && (is_mig(d) || !fact(d, "ecc_capable", 0) ||
                               fact(d, "arch", ARCH_AMPERE) >= ARCH_AMPERE))
        rc = NVML_ERROR_NOT_SUPPORTED;
    unsigned long long value = 0;
    if (rc == NVML_SUCCESS)
        rc = read_ull(d, "retired_pages_pending", &value);
    if (rc == NVML_SUCCESS)
        *pending = (unsigned)value;
    return finish(rc);
}

/* nvml.h, nvmlDeviceGetRemappedRows: "For Ampere or newer fully supported
 * devices"; "NVML_ERROR_NOT_SUPPORTED If MIG is enabled or if the device
 * doesn't support this feature" (no ECC memory: GeForce, issue 19). */
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrected,
                                       unsigned int *uncorrected, unsigned int *pending,
                                       unsigned int *failure) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (is_mig(d) || mig_enabled(d) || !fact(d, "ecc_capable", 0) ||
        fact(d, "arch", ARCH_AMPERE) < ARCH_AMPERE)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    const char *keys[] = {"remapped_rows_corrected", "remapped_rows_uncorrected",
                          "remapped_rows_pending", "remapped_rows_failure"};
    unsigned int *outs[] = {corrected, uncorrected, pending, failure};
    int any = 0;
    for (int i = 0; i < 4; i++) {
        const char *value = value_of(d, keys[i]);
        any |= value != NULL;
        *outs[i] = value != NULL ? (unsigned)strtoul(value, NULL, 0) : 0;
    }
    return finish(any ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
}

/* nvml.h (CUDA 12.9, driver 575): NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, the
 * action the driver asks for (nvmlDeviceGpuRecoveryAction_t: 0 none, 1 GPU
 * reset, 2 node reboot, 3 drain P2P, 4 drain and reset). An older driver
 * answers the field with NOT_SUPPORTED in its nvmlReturn; the call itself
 * succeeds. Other fields are not modelled. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (values == NULL || count < 0)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = 0;
        v->latencyUsec = 0;
        if (v->fieldId == FI_GPU_RECOVERY_ACTION && !is_mig(d) &&
            driver_branch() >= DRIVER_WITH_RECOVERY) {
            v->valueType = VALUE_TYPE_UNSIGNED_INT;
            v->value.ullVal = 0;
            v->value.uiVal = (unsigned)fact(d, "recovery_action", 0);
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return finish(NVML_SUCCESS);
}

/* -------------------------------------------------- processes and commands */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* nvml.h, nvmlDeviceGetComputeRunningProcesses_v3: the caller passes its array's
 * size in *count; a NULL array or one too small gets INSUFFICIENT_SIZE and the
 * size needed, no process at all SUCCESS with *count 0. The device's key
 * "processes" says how many run (pids 4000, 4001 ...). */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (count == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    const char *value = value_of(d, "processes");
    unsigned int running = value != NULL ? (unsigned)strtoul(value, NULL, 0) : 0;
    if (running == 0) {
        *count = 0;
        return finish(NVML_SUCCESS);
    }
    if (infos == NULL || *count < running) {
        *count = running;
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < running; i++)
        infos[i] = (nvmlProcessInfo_t){4000 + i, 0, NO_INSTANCE, NO_INSTANCE};
    *count = running;
    return finish(NVML_SUCCESS);
}

/* Each device command that succeeded is appended to the file FAKE_NVML_CALLS
 * names (if any), "<function> gpuN", so a test sees what was done. */
static void record_call(const char *function, const struct device *d) {
    const char *path = getenv("FAKE_NVML_CALLS");
    if (path == NULL)
        return;
    FILE *file = fopen(path, "a");
    if (file == NULL)
        return;
    fprintf(file, "%s gpu%d\n", function, d->gpu);
    fclose(file);
}

/* nvml.h, Device Commands: each needs root (NO_PERMISSION otherwise); on a
 * GPU of an older architecture than the command's, NOT_SUPPORTED. */
static nvmlReturn_t device_command(const char *function, nvmlDevice_t d, long since_arch) {
    nvmlReturn_t rc = begin(function, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (is_mig(d) || fact(d, "arch", 0) < since_arch)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if (!sc.root)
        return finish(NVML_ERROR_NO_PERMISSION);
    record_call(function, d);
    return finish(NVML_SUCCESS);
}

/* nvml.h: "For Volta or newer fully supported devices." */
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t d) {
    return device_command(__func__, d, 70);
}

/* nvml.h: "For Ampere or newer fully supported devices." */
nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t d) {
    return device_command(__func__, d, ARCH_AMPERE);
}

/* nvml.h: "For Fermi or newer non-GeForce fully supported devices and Maxwell
 * or newer GeForce devices" (deprecated, to be removed in CUDA 14). */
nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t d) {
    return device_command(__func__, d, 50);
}

/* ----------------------------------------------------------------- events */

/* Issue 19: event-set operations are not thread-safe. nvml.h calls NVML
 * thread-safe in general; the fake takes the strict reading: two threads in
 * operations on one set at once, a set used after nvmlShutdown or after
 * nvmlEventSetFree, abort the process. Called with the lock held. */
static struct event_set *use_set(nvmlEventSet_t set, const char *function) {
    char what[160];
    int index = (int)(set - sets);
    if (set == NULL)
        return NULL;
    if (index < 0 || index >= MAX_SETS || !set->in_use || set->generation != generation) {
        snprintf(what, sizeof what, "%s on an event set that was freed or shut down", function);
        misuse(what);
    }
    if (set->busy) {
        snprintf(what, sizeof what, "%s while another thread uses the same event set", function);
        misuse(what);
    }
    return set;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    struct event_set *created = NULL;
    for (int i = 0; i < MAX_SETS && created == NULL; i++)
        if (!sets[i].in_use)
            created = &sets[i];
    if (created == NULL)
        return finish(NVML_ERROR_UNKNOWN);
    memset(created, 0, sizeof *created);
    created->in_use = 1;
    created->generation = generation;
    for (int i = 0; i < sc.nevents; i++)
        if (sc.events[i].seq > created->last_seq)
            created->last_seq = sc.events[i].seq;
    *set = created;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    struct event_set *s = use_set(set, __func__);
    if (s == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    s->in_use = 0;
    return finish(NVML_SUCCESS);
}

/* nvml.h, nvmlDeviceGetSupportedEventTypes and nvmlDeviceRegisterEvents:
 * XID and P-state events everywhere; "ECC events are available only on
 * ECC-enabled devices"; MIG-change events only where MIG exists; the
 * GPU-unavailable and recovery-action events from the driver whose nvml.h
 * added them. The mask tells what the GPU can do (ECC capable), registration
 * checks what it does now (ECC enabled): nvml.h states the ECC condition for
 * registration only. "supported_events" overrides the mask. */
static unsigned long long supported_events(const struct device *d) {
    const char *value = value_of(&handles[d->gpu][0], "supported_events");
    if (value != NULL)
        return strtoull(value, NULL, 0);
    unsigned long long mask = EVENT_XID | EVENT_PSTATE;
    if (fact(d, "ecc_capable", 0))
        mask |= ECC_EVENTS;
    if (fact(d, "mig_capable", 0))
        mask |= EVENT_MIG_CONFIG_CHANGE;
    if (driver_branch() >= DRIVER_WITH_RECOVERY)
        mask |= EVENT_GPU_UNAVAILABLE | EVENT_GPU_RECOVERY_ACTION;
    return mask;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        *types = supported_events(d);
    return finish(rc);
}

/* nvml.h: "If function reports NVML_ERROR_NOT_SUPPORTED, event set can still
 * be used. None of the requested eventTypes are registered in that case":
 * one unsupported bit and nothing of the mask is registered. */
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      nvmlEventSet_t set) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    struct event_set *s = use_set(set, __func__);
    if (s == NULL || is_mig(d))
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~supported_events(d))
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if ((types & ECC_EVENTS) && !fact(d, "ecc_mode", 0))
        return finish(NVML_ERROR_NOT_SUPPORTED);
    s->mask[d->gpu] |= types;
    return finish(NVML_SUCCESS);
}

#ifndef FAKE_NVML_PRE_R450
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* nvml.h, nvmlEventSetWait_v2: returns TIMEOUT "if no event arrived in
 * specified timeout or interrupt arrived" (so it may end early: "interrupts"),
 * GPU_IS_LOST "if a GPU has fallen off the bus" (a lost GPU registered with
 * the set). "In MIG mode ... In absence of required privileges, only the
 * events which affect all the instances (i.e. whole device) are reported."
 * The set is busy for the whole wait: see use_set(). */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    struct event_set *s = use_set(set, __func__);
    if (s == NULL || data == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    s->busy = 1;
    waits_running++;
    for (;;) {
        const struct event *next = NULL;
        for (int g = 0; g < sc.gpu_count && rc == NVML_SUCCESS; g++)
            if (s->mask[g] && is_lost(&handles[g][0]))
                rc = NVML_ERROR_GPU_IS_LOST;
        if (rc == NVML_SUCCESS && sc.interrupts > 0) {
            sc.interrupts--;
            rc = NVML_ERROR_TIMEOUT;
        }
        for (int i = 0; i < sc.nevents && rc == NVML_SUCCESS; i++) {
            const struct event *e = &sc.events[i];
            int wanted = e->gpu >= 0 && e->gpu < MAX_GPUS && (s->mask[e->gpu] & e->type);
            int visible = sc.root || e->gi == NO_INSTANCE;
            if (wanted && e->seq > s->last_seq && !visible)
                s->last_seq = e->seq; /* dropped: the caller may not see it */
            else if (wanted && e->seq > s->last_seq && (next == NULL || e->seq < next->seq))
                next = e;
        }
        if (next != NULL) {
            s->last_seq = next->seq;
            data->device = &handles[next->gpu][0];
            data->eventType = next->type;
            data->eventData = next->data;
            data->gpuInstanceId = next->gi;
            data->computeInstanceId = next->ci;
            break;
        }
        if (rc != NVML_SUCCESS)
            break;
        if (now_ms() >= deadline) {
            rc = NVML_ERROR_TIMEOUT;
            break;
        }
        pthread_mutex_unlock(&lock);
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&lock);
        reload();
        rc = version_mismatch() ? NVML_ERROR_LIB_RM_VERSION_MISMATCH : injected(__func__, NULL);
    }
    s->busy = 0;
    waits_running--;
    return finish(rc);
}
#endif /* Drivers before R450 have no nvmlEventSetWait_v2 (the binding calls only it). */

/* ---------------------------------------------------------- test support */

/* The size of one of the structs above, so a test can compare it with the
 * binding's ctypes definition; 0 for an unknown name. Not an NVML call. */
unsigned int fakeNvmlSizeof(const char *name) {
    static const struct {
        const char *name;
        unsigned int size;
    } sizes[] = {
        {"nvmlMemory_t", sizeof(nvmlMemory_t)},
        {"nvmlBAR1Memory_t", sizeof(nvmlBAR1Memory_t)},
        {"nvmlUtilization_t", sizeof(nvmlUtilization_t)},
        {"nvmlPciInfo_t", sizeof(nvmlPciInfo_t)},
        {"nvmlEventData_t", sizeof(nvmlEventData_t)},
        {"nvmlFieldValue_t", sizeof(nvmlFieldValue_t)},
        {"nvmlValue_t", sizeof(nvmlValue_t)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, name) == 0)
            return sizes[i].size;
    return 0;
}
