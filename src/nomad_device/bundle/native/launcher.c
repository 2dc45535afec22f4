/*
 * The first bytes of a bundle that brings its own interpreter: CPython's
 * runtime with a main() of our own.
 *
 * The bundle file is this executable followed by the payload and, last, a
 * small zip (the "boot zip": the encodings package, the bootstrap and the
 * standard-library modules it needs to unpack). Python imports from that zip
 * by the file's name as /proc/self/exe gives it, which is the very file the
 * kernel is running (the bootstrap reads the payload through /proc/self/exe
 * itself). The bootstrap then settles the cache and points sys.path at the
 * unpacked library.
 *
 * Nothing here reads the environment: isolated mode, no site, no user site,
 * no bytecode writing, UTF-8 mode (the plugin speaks hclog JSON whatever the
 * node's locale).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One hclog line, for the rare failure before Python is up. */
static void fatal(const char *what)
{
    struct timespec now;
    struct tm tm;
    char stamp[40];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr,
            "{\"@level\":\"error\",\"@message\":\"cannot start plugin bundle: %s\","
            "\"@module\":\"nomad-device-bundle\",\"@timestamp\":\"%s.%06ldZ\"}\n",
            what, stamp, now.tv_nsec / 1000);
}

static int check(PyStatus status, PyConfig *config)
{
    if (!PyStatus_Exception(status)) {
        return 0;
    }
    if (config != NULL) {
        PyConfig_Clear(config);
    }
    if (PyStatus_IsExit(status)) {
        return status.exitcode;
    }
    fatal(status.err_msg ? status.err_msg : "the interpreter did not start");
    return 1;
}

int main(int argc, char **argv)
{
    PyPreConfig preconfig;
    PyConfig config;
    int code;

    /* open(), not access(): under qemu-user only open() sees the emulated file. */
    int self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (self < 0) {
        fatal("/proc/self/exe cannot be read (is /proc mounted?)");
        return 1;
    }
    close(self);
    /* The file's own name where it still has one: qemu-user answers stat() on
       /proc/self/exe with ELOOP, and zipimport stats its path. */
    char path[4096] = "/proc/self/exe";
    ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
    struct stat st;
    if (length <= 0 || (size_t)length >= sizeof path - 1) {
        strcpy(path, "/proc/self/exe");
    } else {
        path[length] = '\0';
        if (path[0] != '/' || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            strcpy(path, "/proc/self/exe"); /* replaced meanwhile ("... (deleted)") */
        }
    }
    PyPreConfig_InitIsolatedConfig(&preconfig);
    preconfig.utf8_mode = 1;
    if ((code = check(Py_PreInitializeFromBytesArgs(&preconfig, argc, argv), NULL))) {
        return code;
    }
    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    config.write_bytecode = 0;
    config.pathconfig_warnings = 0;
    config.parse_argv = 0;
    if ((code = check(PyConfig_SetBytesArgv(&config, argc, argv), &config))) {
        return code;
    }
    config.module_search_paths_set = 1;
    wchar_t *zip = Py_DecodeLocale(path, NULL);
    if (zip == NULL) {
        PyConfig_Clear(&config);
        fatal("the bundle's path cannot be decoded");
        return 1;
    }
    code = check(PyWideStringList_Append(&config.module_search_paths, zip), &config);
    PyMem_RawFree(zip);
    if (code) {
        return code;
    }
    if ((code = check(PyConfig_SetString(&config, &config.run_command,
                                         L"import _nomad_bundle_boot as b\nb.main(True)\n"),
                      &config))) {
        return code;
    }
    if ((code = check(Py_InitializeFromConfig(&config), &config))) {
        return code;
    }
    PyConfig_Clear(&config);
    return Py_RunMain();
}
