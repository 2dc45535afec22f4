/*
 * A fake libnvidia-ml.so.1 for the nvidia plugin's tests: no GPU, no driver.
 *
 * It exports the NVML entry points the plugin calls through nvidia-ml-py
 * (pynvml), with the binding's struct layouts, so that the binding's own
 * ctypes code runs unchanged. What it reports comes from a scenario file named
 * by FAKE_NVML_SCENARIO, re-read whenever that file changes (inode, size or
 * mtime), so a test can make a GPU vanish or an event fire under a live
 * stream. tests/nvidia_plugin/fakenvml.py writes the file from a Python dict; one
 * record per line, fields separated by tabs:
 *
 *   init    <nvml return code of nvmlInit>          (9: driver not loaded)
 *   driver  <driver version string>
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
 * Without a scenario file nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED.
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
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 8
#define MAX_MIGS 7
#define MAX_KEYS 64
#define MAX_FAULTS 32
#define MAX_EVENTS 64
#define NO_INSTANCE 0xFFFFFFFFu
#define DEFAULT_EVENTS 0x10bULL /* single/double-bit ECC, XID, MIG config change */

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

struct event_set {
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
    char driver[80];
    int gpu_count;
    struct node nodes[MAX_GPUS][MAX_MIGS + 1]; /* [g][0]: GPU g, [g][1 + m]: its MIG m */
    int nfaults;
    struct fault faults[MAX_FAULTS];
    int nevents;
    struct event events[MAX_EVENTS];
} sc;

static struct device handles[MAX_GPUS][MAX_MIGS + 1];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int loaded;
static struct stat seen;

__attribute__((constructor)) static void number_handles(void) {
    for (int g = 0; g < MAX_GPUS; g++)
        for (int m = 0; m <= MAX_MIGS; m++)
            handles[g][m] = (struct device){g, m - 1};
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

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void parse_line(char *line) {
    char *rest = line;
    const char *kind = next_field(&rest);
    int gpu, mig;
    if (strcmp(kind, "init") == 0) {
        sc.init_code = atoi(next_field(&rest));
    } else if (strcmp(kind, "driver") == 0) {
        copy(sc.driver, sizeof sc.driver, next_field(&rest));
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

static int present(const struct device *d) {
    return d->gpu < sc.gpu_count && node_of(d)->present;
}

static int is_lost(const struct device *d) {
    const struct device *gpu = &handles[d->gpu][0];
    const char *lost = value_of(gpu, "lost");
    return lost != NULL && strcmp(lost, "1") == 0;
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

/* Take the lock and vet a call; the caller releases with finish(). */
static nvmlReturn_t begin(const char *function, const struct device *d, int needs_device) {
    pthread_mutex_lock(&lock);
    reload();
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
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

static nvmlReturn_t get_ull(const char *function, nvmlDevice_t d, const char *key,
                            unsigned long long *out) {
    nvmlReturn_t rc = begin(function, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *value = value_of(d, key);
    if (value == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    if (out == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    *out = strtoull(value, NULL, 0);
    return finish(NVML_SUCCESS);
}

static nvmlReturn_t get_uint(const char *function, nvmlDevice_t d, const char *key,
                             unsigned int *out) {
    unsigned long long value = 0;
    nvmlReturn_t rc = get_ull(function, d, key, out == NULL ? NULL : &value);
    if (rc == NVML_SUCCESS)
        *out = (unsigned int)value;
    return rc;
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

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    reload();
    nvmlReturn_t rc = sc.init_code;
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
    initialized--;
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
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int size) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (version == NULL || strlen(sc.driver) + 1 > size)
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    copy(version, size, sc.driver);
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
    return get_uint(__func__, d, "minor", minor);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    const char *bus_id = value_of(d, "pci_bus_id");
    if (bus_id == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    memset(pci, 0, sizeof *pci);
    copy(pci->busId, sizeof pci->busId, bus_id);
    unsigned int function = 0;
    sscanf(bus_id, "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x",
             pci->domain & 0xffff, pci->bus, pci->device, function);
    const char *id = value_of(d, "pci_device_id");
    pci->pciDeviceId = id != NULL ? (unsigned)strtoul(id, NULL, 0) : 0;
    return finish(NVML_SUCCESS);
}

/* ----------------------------------------------------------- static facts */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    nvmlReturn_t rc = begin(__func__, d, 1);
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
    return get_uint(__func__, d, "pcie_width", width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *generation) {
    return get_uint(__func__, d, "pcie_gen", generation);
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
    return get_uint(__func__, d, key, mhz);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    char key[40];
    if (clock_name(type) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "clock_%s", clock_name(type));
    return get_uint(__func__, d, key, mhz);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *milliwatts) {
    return get_uint(__func__, d, "power_limit", milliwatts);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *milliwatts) {
    return get_uint(__func__, d, "power_usage", milliwatts);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, unsigned int *mode) {
    return get_uint(__func__, d, "display_mode", mode);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode) {
    return get_uint(__func__, d, "persistence_mode", mode);
}

/* -------------------------------------------------------------------- MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t rc = get_uint(__func__, d, "mig_mode", current);
    if (rc == NVML_SUCCESS)
        *pending = *current;
    return rc;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (d->mig >= 0 || value_of(d, "mig_mode") == NULL)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    *count = MAX_MIGS;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *mig) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (d->mig >= 0)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= MAX_MIGS || !sc.nodes[d->gpu][index + 1].present)
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
    if (d->mig < 0)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    *parent = &handles[d->gpu][0];
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        *is_mig = d->mig >= 0;
    return finish(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    return get_uint(__func__, d, "gi", id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    return get_uint(__func__, d, "ci", id);
}

/* ----------------------------------------------------------------- status */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    nvmlReturn_t rc = begin(__func__, d, 1);
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

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *util,
                                             unsigned int *period_us) {
    nvmlReturn_t rc = get_uint(__func__, d, "util_encoder", util);
    if (rc == NVML_SUCCESS)
        *period_us = 167000;
    return rc;
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *util,
                                             unsigned int *period_us) {
    nvmlReturn_t rc = get_uint(__func__, d, "util_decoder", util);
    if (rc == NVML_SUCCESS)
        *period_us = 167000;
    return rc;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *celsius) {
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(__func__, d, "temperature", celsius);
}

static const char *error_type_name(int type) {
    return type == 0 ? "corrected" : type == 1 ? "uncorrected" : NULL;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t d, int error_type, int counter_type,
                                             int location, unsigned long long *count) {
    static const char *locations[] = {"l1", "l2", "dram", "rf", "tex", "shm", "cbu", "sram"};
    char key[40];
    (void)counter_type;
    if (error_type_name(error_type) == NULL || location < 0 || location > 7)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ecc_%s_%s", error_type_name(error_type), locations[location]);
    return get_ull(__func__, d, key, count);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type,
                                         unsigned long long *count) {
    char key[40];
    (void)counter_type;
    if (error_type_name(error_type) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ecc_%s_total", error_type_name(error_type));
    return get_ull(__func__, d, key, count);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, unsigned int *pending) {
    return get_uint(__func__, d, "retired_pages_pending", pending);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrected,
                                       unsigned int *uncorrected, unsigned int *pending,
                                       unsigned int *failure) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
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

/* ----------------------------------------------------------------- events */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    struct event_set *created = calloc(1, sizeof *created);
    if (created == NULL)
        return finish(NVML_ERROR_UNKNOWN);
    for (int i = 0; i < sc.nevents; i++)
        if (sc.events[i].seq > created->last_seq)
            created->last_seq = sc.events[i].seq;
    *set = created;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t rc = begin(__func__, NULL, 0);
    if (rc == NVML_SUCCESS)
        free(set);
    return finish(rc);
}

static unsigned long long supported_events(const struct device *d) {
    const char *value = value_of(&handles[d->gpu][0], "supported_events");
    return value != NULL ? strtoull(value, NULL, 0) : DEFAULT_EVENTS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc == NVML_SUCCESS)
        *types = supported_events(d);
    return finish(rc);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      nvmlEventSet_t set) {
    nvmlReturn_t rc = begin(__func__, d, 1);
    if (rc != NVML_SUCCESS)
        return finish(rc);
    if (set == NULL)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~supported_events(d))
        return finish(NVML_ERROR_NOT_SUPPORTED);
    set->mask[d->gpu] |= types;
    return finish(NVML_SUCCESS);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        nvmlReturn_t rc = begin(__func__, NULL, 0);
        if (rc != NVML_SUCCESS)
            return finish(rc);
        if (set == NULL || data == NULL)
            return finish(NVML_ERROR_INVALID_ARGUMENT);
        const struct event *next = NULL;
        for (int i = 0; i < sc.nevents; i++) {
            const struct event *e = &sc.events[i];
            int wanted = e->gpu >= 0 && e->gpu < MAX_GPUS && (set->mask[e->gpu] & e->type);
            if (wanted && e->seq > set->last_seq && (next == NULL || e->seq < next->seq))
                next = e;
        }
        if (next != NULL) {
            set->last_seq = next->seq;
            data->device = &handles[next->gpu][0];
            data->eventType = next->type;
            data->eventData = next->data;
            data->gpuInstanceId = next->gi;
            data->computeInstanceId = next->ci;
            return finish(NVML_SUCCESS);
        }
        finish(NVML_SUCCESS);
        if (now_ms() >= deadline)
            return NVML_ERROR_TIMEOUT;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

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
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, name) == 0)
            return sizes[i].size;
    return 0;
}
