/* module: see module.h. */
#include "worker/module/module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddpb_config.h"

/* The directory of the running program into out ("" when /proc/self/exe is unreadable). */
static void module_exe_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    out[0] = '\0';
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, cap, "%s", exe);
}

/* The build tree's worker/ for a program inside that build tree (a unit test in tests/),
 * else "": an installed or bundled worker takes only its own modules, never those of the
 * tree it was built in, so deleting one of its modules is seen as missing. */
static const char *module_build_dir(const char *exe_dir)
{
    const char *dir = DDPB_BUILD_MODULE_DIR;
    const char *slash = strrchr(dir, '/');
    size_t root = slash ? (size_t)(slash - dir) : 0; /* the build root: dir less "/worker" */
    bool inside = root > 0 && strlen(exe_dir) >= root && memcmp(exe_dir, dir, root) == 0 &&
                  (exe_dir[root] == '/' || exe_dir[root] == '\0');
    return inside ? dir : "";
}

int module_find(const char *file, char *out, size_t cap)
{
    char exe_dir[PATH_MAX];
    module_exe_dir(exe_dir, sizeof exe_dir);
    const char *dirs[] = {exe_dir, DDPB_MODULE_DIR, module_build_dir(exe_dir)};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!dirs[i][0])
            continue;
        int n = snprintf(out, cap, "%s/%s", dirs[i], file);
        if (n > 0 && (size_t)n < cap && access(out, R_OK) == 0)
            return 0;
    }
    out[0] = '\0';
    return -1;
}

const void *module_load(const struct module_spec *m, struct err *e)
{
    char path[PATH_MAX];
    if (module_find(m->file, path, sizeof path) < 0) {
        err_set(e, ERR_INVALID, m->field,
                "%s is not installed: no %s beside the worker or in %s (%s)", m->what, m->file,
                DDPB_MODULE_DIR, m->rebuild);
        return NULL;
    }
    /* RTLD_NOLOAD first: a module already loaded is not opened twice */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (!h)
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *why = dlerror();
        err_set(e, ERR_INVALID, m->field, "%s cannot be loaded from %s: %s (install it: %s)",
                m->what, path, why ? why : "unknown error", m->install);
        return NULL;
    }
    const int *entry = dlsym(h, m->symbol);
    if (!entry) {
        err_set(e, ERR_INVALID, m->field, "%s: %s has no symbol %s (%s)", m->what, path,
                m->symbol, m->rebuild);
        return NULL;
    }
    if (*entry != MODULE_ABI) {
        err_set(e, ERR_INVALID, m->field,
                "%s: %s was built for module ABI %d, this worker needs %d (%s)", m->what, path,
                *entry, MODULE_ABI, m->rebuild);
        return NULL;
    }
    return entry;
}
