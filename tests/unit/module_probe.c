/* module_probe: test_module's loadable modules, built three ways from this one file:
 * a good one (its entry's ABI is MODULE_ABI), one with another ABI (-DPROBE_ABI_SKEW)
 * and one without the entry symbol (-DPROBE_NO_ENTRY). Every module's entry has a name of
 * its own, as the real ones do: module_load opens them RTLD_GLOBAL. */
#include "worker/module/module.h"

struct probe_entry {
    int abi;
    int (*twice)(int);
};

static int probe_twice(int x)
{
    return 2 * x;
}

#ifndef PROBE_NO_ENTRY
#ifdef PROBE_ABI_SKEW /* its own symbol: modules loaded global must not collide */
const struct probe_entry ddpb_module_probe_skew = {MODULE_ABI + 1, probe_twice};
#else
const struct probe_entry ddpb_module_probe = {MODULE_ABI, probe_twice};
#endif
#else
const struct probe_entry ddpb_module_other = {MODULE_ABI, probe_twice};
#endif
