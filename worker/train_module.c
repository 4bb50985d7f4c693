/* train_module: see train_module.h. */
#include "worker/train_module.h"

#include <stdio.h>

#include "worker/module/module.h"

static const struct module_spec train_module_spec = {
    .file = "ddpb_train.so",
    .symbol = "ddpb_module_train",
    .field = "workload",
    .what = "the training workload (workload \"train\")",
    .install = "oneDNN, OpenMP and the image libraries: apt-get install libdnnl2 libgomp1 "
               "libpng16-16 libjpeg62-turbo libzstd1 zlib1g",
    .rebuild = "every build makes it beside ddpbench-worker, and ninja install puts it there",
};

const struct train_module *train_module_load(struct err *e)
{
    return module_load(&train_module_spec, e);
}

const struct train_engine_ops *train_module_pick(const char *device, struct err *e)
{
    const struct train_module *m = train_module_load(e);
    return m ? m->pick(device, e) : NULL;
}
