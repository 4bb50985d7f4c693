/* train_engines: train_engine_pick (train_engines.h). Decision: the CUDA instance lives in
 * the CUDA engine module (gpu_modules.h), opened here the first time a spec asks for
 * device "cuda" and nowhere else in the training code; a CPU run never opens it. */
#include "worker/train_engines.h"

#include <string.h>

#include "worker/gpu_modules.h"

const struct train_engine_ops *train_engine_pick(const char *device, struct err *e)
{
    if (strcmp(device, "cpu") == 0)
        return &train_engine_cpu;
    if (strcmp(device, "cuda") != 0) {
        err_set(e, ERR_INVALID, "device", "device \"%s\" is unknown (cpu, cuda)", device);
        return NULL;
    }
    return gpu_module_train(e);
}
