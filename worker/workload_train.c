/* workload_train: the training loop of spec workload "train" (workload_train.h).
 *
 * Decision: the loop, data, strategy, timing and reports are written once for every
 * device; only the model's compute is behind the training engine picked by the spec's
 * device (train_engine.h: nn/ on the CPU, the GPU runner with CUDA). The host nn_model is
 * the graph, parameter registry and initialisation of every engine, so it is built here;
 * the engine runs it. */
#include "worker/workload_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/model_table.h"
#include "common/nvml.h"
#include "common/vocab.h"
#include "worker/comm/wait_note.h"
#include "worker/data/dataset.h"
#include "worker/data/loader.h"
#include "worker/data/mount_stats.h"
#include "worker/data/storage.h"
#include "worker/ddp/ddp.h"
#include "worker/elastic.h"
#include "worker/module/module.h"
#include "worker/nn/isa.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"
#include "worker/observe.h"
#include "worker/pipeline.h"
#include "worker/train_elastic.h"
#include "worker/train_engines.h"
#include "worker/train_module.h"

#define TRAIN_PROGRESS_NS 500000000LL /* rank 0 reports progress at most twice a second */

/* Sums over the samples of an epoch (or an evaluation), combined across ranks. */
struct train_tally {
    double loss_sum; /* per-sample losses summed */
    double correct, count;
};

struct trainer {
    const struct spec *s; /* borrowed */
    const struct spec_train *t;
    struct comm *comm;       /* borrowed */
    struct comm *stage_comm; /* borrowed: a pipeline run's stage replicas, else NULL */
    struct report_writer *w; /* borrowed */
    struct heartbeat *hb;    /* borrowed, may be NULL */
    struct observe *obs;     /* borrowed: usage windows and the trace */
    int repeat;
    uint64_t seed;
    struct nn_model m; /* owned from here down */
    bool have_model;
    struct pipeline pipe; /* a pipeline run: this rank's stage (m is then freed once cut) */
    bool have_pipe;
    struct nn_model *model; /* what the strategy exchanges: &m, or the stage's model */
    struct dataset *train, *test;
    struct data_storage *storage; /* owned: what the file-backed formats read through */
    struct loader *ld;
    int64_t last_cpu_ns, last_read_bytes; /* the loader's and the storage's totals at the
                                             end of the previous step */
    struct ddp ddp;
    bool have_ddp;
    struct nn_optim opt;
    bool have_opt;
    struct nn_lr_schedule sched;
    float *class_sums; /* evaluation: hits per class then samples per class (2 * nclasses),
                          NULL while no evaluation kept them */
    int nclasses;
    float *pad_x; /* evaluation: one padded batch */
    int32_t *pad_y;
    size_t sample_floats;
    int labels_per; /* labels per sample: 1, or a sequence model's tokens */
    int64_t total_steps;
    int64_t last_progress_ns;
    const struct train_engine_ops *ops; /* the spec's device's engine */
    struct train_engine *eng;           /* owned: the model's compute */
    /* Elastic training (worker/elastic.h; NULL el: not elastic). step is the optimizer
     * steps of the repeat (restored with a commit), iter the run's iteration counter
     * (the steps' report numbers: it never goes back). */
    struct elastic *el; /* borrowed */
    int64_t step, iter;
    struct train_commit commit; /* owned: the last commit */
    int64_t pos_epoch, pos_off; /* the data position: the next batch's epoch and the
                                   samples of it consumed over all ranks */
    struct train_tally base;    /* the epoch's figures over all ranks up to the commit */
    double epoch_s_base;        /* the epoch's time before the commit */
    int64_t epoch_start_ns;
    bool resumed_pending; /* the first step of a new generation is not done yet */
    int64_t lost_steps;   /* iterations redone since the commit restored */
    double regroup_ms;    /* from the detection (or growth) to the state restored */
};

/* ---- setting up a repeat -------------------------------------------------------- */

/* The rank's emulated storage (spec dataset.storage; storage.h): a named profile's
 * figures, or custom's from dataset.read_*, and cold mode. */
static int train_open_storage(struct trainer *tr, struct err *e)
{
    const struct spec_dataset *sd = &tr->t->dataset;
    struct data_storage_profile p = {0};
    if (data_mount_dir()) { /* the mount holds the reads to the profile: no caps here */
        snprintf(p.name, sizeof p.name, "local");
        return data_storage_create(&p, &tr->storage, e);
    }
    if (strcmp(sd->storage, "custom") == 0) {
        snprintf(p.name, sizeof p.name, "custom");
        p.read_mbps = sd->read_mbps;
        p.latency_ms = sd->read_latency_ms;
        p.concurrency = sd->read_concurrency;
    } else if (data_storage_profile_get(sd->storage[0] ? sd->storage : "local", &p, e) < 0) {
        return -1;
    }
    p.cold = sd->cold;
    return data_storage_create(&p, &tr->storage, e);
}

static int train_open_data(struct trainer *tr, struct err *e)
{
    const struct spec_dataset *sd = &tr->t->dataset;
    struct data_config dc = {0};
    snprintf(dc.name, sizeof dc.name, "%s", sd->name);
    /* a storage mount (DDPB_STORAGE_MOUNT) is the dataset directory as the profile serves
     * it; its reads so far are the base of the first step's (mount_stats.h) */
    const char *mnt = data_mount_dir();
    snprintf(dc.path, sizeof dc.path, "%s", mnt ? mnt : sd->path);
    snprintf(dc.format, sizeof dc.format, "%s", sd->format[0] ? sd->format : "native");
    if (train_open_storage(tr, e) < 0)
        return -1;
    struct data_storage_stats ms;
    if (mnt && data_mount_stats_read(mnt, &ms, e) < 0)
        return -1;
    tr->last_read_bytes = mnt ? ms.bytes : 0;
    dc.storage = tr->storage;
    const struct model_info *mi = model_table_find(tr->t->model); /* spec-validated */
    if (!mi)
        return err_set(e, ERR_INVALID, "model", "unknown model \"%s\"", tr->t->model);
    int c = mi->c, h = mi->h, w = mi->w; /* no shape given: the model's usual input */
    if (sd->shape.n == 3)
        c = sd->shape.dims[0], h = sd->shape.dims[1], w = sd->shape.dims[2];
    dc.synthetic = (struct data_synthetic_config){
        .c = c,
        .h = h,
        .w = w,
        .classes = sd->classes,
        .samples = sd->samples > 0 ? sd->samples : DATA_SYNTHETIC_SAMPLES,
        .fresh = sd->fresh};
    if (mi->embd >
        0) { /* a transformer: sequences of token ids (synthetic or a file's bytes) */
        dc.seq_len = tr->t->seq_len > 0 ? tr->t->seq_len : mi->w;
        dc.synthetic.tokens = true;
        dc.synthetic.c = dc.synthetic.h = 1;
        dc.synthetic.w = dc.seq_len;
        dc.synthetic.classes = mi->classes;
    }
    dc.augment = sd->augment;
    dc.samples = sd->samples; /* real datasets: the first N training samples; 0 = all */
    if (dataset_open(&dc, DATA_SPLIT_TRAIN, &tr->train, e) < 0)
        return err_prefix(e, "dataset %s (train split)", sd->name);
    if (tr->t->eval && !tr->t->loader_only && strcmp(sd->name, "synthetic") != 0 &&
        dataset_open(&dc, DATA_SPLIT_TEST, &tr->test, e) < 0)
        return err_prefix(e, "dataset %s (test split)", sd->name);
    tr->sample_floats = dataset_sample_floats(tr->train);
    return 0;
}

/* A pipeline run keeps only its stage of the whole model (pipeline.h): the whole one is
 * freed once cut, so a rank holds its stage's parameters and no more. */
static int train_build_stage(struct trainer *tr, struct err *e)
{
    const struct spec_train *t = tr->t;
    struct pipe_config pc = {
        .stages = t->pipeline,
        .micro_batches = t->micro_batches,
        .schedule = (enum pipe_schedule)vocab_find(VOCAB_SCHEDULE, t->schedule),
        .batch = t->batch_size,
        .balance_time = strcmp(t->pipeline_balance, "time") == 0,
        .split = t->pipeline_split};
    if (pipe_init(&tr->pipe, &pc, &tr->m, tr->comm, e) < 0) {
        pipe_cleanup(&tr->pipe);
        return -1;
    }
    tr->have_pipe = true;
    if (pipe_report_profile(&tr->pipe, tr->w, tr->repeat, e) < 0)
        return err_prefix(e, "reporting the layer profile");
    nn_model_destroy(&tr->m);
    tr->have_model = false;
    tr->model = pipe_model(&tr->pipe);
    return 0;
}

static int train_build_model(struct trainer *tr, struct err *e)
{
    const struct dataset *ds = tr->train;
    nn_model_init(&tr->m);
    tr->have_model = true;
    tr->model = &tr->m;
    if (nn_models_build(&tr->m, tr->t->model, ds->c, ds->h, ds->w, ds->classes, NULL, e) < 0 ||
        nn_model_init_params(&tr->m, tr->seed, e) < 0)
        return err_prefix(e, "model %s on %dx%dx%d", tr->t->model, ds->c, ds->h, ds->w);
    tr->labels_per = nn_model_labels_per_sample(&tr->m);
    if (tr->t->pipeline > 1
            ? train_build_stage(tr, e) < 0
            : !(tr->eng = tr->ops->create(
                    &tr->m,
                    &(struct train_engine_cfg){.batch = tr->t->batch_size,
                                               .precision = tr->t->precision,
                                               .cudnn_benchmark = tr->t->cudnn_benchmark,
                                               .loss_scale = tr->t->loss_scale,
                                               .loss_scale_window = tr->t->loss_scale_window},
                    e)))
        return err_prefix(e, "model %s on %dx%dx%d", tr->t->model, ds->c, ds->h, ds->w);
    if (dataset_label_len(ds) != tr->labels_per)
        return err_set(e, ERR_INVALID, "dataset.name",
                       "dataset %s gives %d labels a sample, model %s predicts %d", ds->name,
                       dataset_label_len(ds), tr->t->model, tr->labels_per);
    return 0;
}

/* The data-parallel position of this rank: its replica among the replicas (a pipeline's
 * stages of one replica read the same batches), or its rank among all. */
static void train_data_rank(const struct trainer *tr, int *rank, int *world)
{
    int P = tr->t->pipeline > 1 ? tr->t->pipeline : 1;
    *rank = tr->comm->rank / P;
    *world = tr->comm->world_size / P;
}

static int train_make_loader(struct trainer *tr, struct err *e)
{
    struct loader_config lc;
    loader_config_default(&lc);
    train_data_rank(tr, &lc.rank, &lc.world_size);
    lc.batch_size = tr->t->batch_size;
    lc.seed = tr->seed;
    lc.remainder = LOADER_DROP;
    lc.drop_last_batch = true; /* every step has the prepared batch size on every rank */
    lc.epochs = tr->t->epochs;
    lc.prefetch = tr->t->prefetch;
    lc.workers = tr->t->dataset.workers;
    lc.pin = tr->t->dataset.pin;
    lc.start_epoch = tr->pos_epoch; /* elastic: where the commit restored left off */
    lc.start_offset = tr->pos_off;
    if (loader_create(tr->train, &lc, &tr->ld, e) < 0)
        return err_prefix(e, "training data");
    int64_t per_epoch = loader_batches_per_epoch(tr->ld) / tr->t->accumulate;
    tr->total_steps = tr->t->steps > 0 ? tr->t->steps : per_epoch * tr->t->epochs;
    if (tr->t->steps <= 0 && (tr->pos_epoch > 0 || tr->pos_off > 0)) /* a resumed run */
        tr->total_steps = tr->step + loader_batches_total(tr->ld) / tr->t->accumulate;
    if (tr->total_steps < 1)
        return err_set(e, ERR_INVALID, "batch_size",
                       "an epoch of %lld samples gives rank %d no full step of batch_size %d "
                       "x accumulate %d",
                       (long long)tr->train->n, tr->comm->rank, tr->t->batch_size,
                       tr->t->accumulate);
    if (tr->t->warmup_steps >= tr->total_steps)
        return err_set(e, ERR_INVALID, "warmup_steps",
                       "warmup_steps (%d) leaves none of the run's %lld steps to measure",
                       tr->t->warmup_steps, (long long)tr->total_steps);
    return 0;
}

static int train_make_strategy(struct trainer *tr, bool restoring, struct err *e)
{
    const struct spec_train *t = tr->t;
    struct ddp_config dc = {
        .strategy = (enum ddp_strategy)ddp_strategy_parse(t->strategy),
        .compression = (enum ddp_compression)ddp_compression_parse(t->compression),
        .bucket_bytes = (size_t)t->bucket_mb << 20,
        .fusion_bytes = (size_t)t->fusion_mb << 20,
        .cycle_ms = t->cycle_ms,
    };
    if (ddp_init(&tr->ddp, &dc, tr->have_pipe ? tr->stage_comm : tr->comm, tr->model, e) < 0)
        return err_prefix(e, "strategy %s", t->strategy);
    tr->have_ddp = true;
    const struct spec_optimizer *so = &t->optimizer;
    int type = nn_optim_parse_type(so->type);
    struct nn_optim_cfg oc = nn_optim_defaults(type < 0 ? NN_OPTIM_SGD : type);
    oc.lr = so->lr;
    oc.weight_decay = so->weight_decay;
    oc.momentum = so->momentum;
    oc.nesterov = so->nesterov;
    oc.beta1 = so->beta1;
    oc.beta2 = so->beta2;
    oc.eps = so->eps;
    if (ddp_optim_init(&tr->ddp, &tr->opt, &oc, e) < 0)
        return err_prefix(e, "optimizer");
    tr->have_opt = true;
    if (tr->eng && tr->ops->attach(tr->eng, &tr->ddp, &oc, e) < 0)
        return err_prefix(e, "strategy %s on device %s", t->strategy, tr->ops->device);
    const struct spec_lr_schedule *ls = &t->lr_schedule;
    tr->sched = (struct nn_lr_schedule){.base_lr = so->lr,
                                        .warmup_steps = ls->warmup_steps,
                                        .warmup_start_factor = 1.0 / 3,
                                        .decay = strcmp(ls->decay, "step") == 0 ? NN_LR_STEP
                                                 : strcmp(ls->decay, "cosine") == 0
                                                     ? NN_LR_COSINE
                                                     : NN_LR_CONSTANT,
                                        .step_size = ls->step_size,
                                        .gamma = ls->gamma,
                                        .t_max = (int)(tr->total_steps - ls->warmup_steps > 0
                                                           ? tr->total_steps - ls->warmup_steps
                                                           : 1),
                                        .eta_min = 0};
    if (nn_lr_validate(&tr->sched, e) < 0)
        return err_prefix(e, "lr_schedule");
    if (!restoring && t->broadcast_init && ddp_broadcast_params(&tr->ddp, e) < 0)
        return err_prefix(e, "broadcasting rank 0's initial parameters");
    if (tr->eng)
        tr->ops->params_changed(tr->eng);
    return 0;
}

/* Rank 0 records when each gradient becomes final (report "grads", observe.h), in the
 * order backward finishes the tensors: the reverse of their registration. */
static int train_profile_grads(struct trainer *tr, struct err *e)
{
    if (tr->comm->rank != 0 || tr->have_pipe) /* the profile is of a whole model */
        return 0;
    int nt = 0;
    const struct nn_param *p = nn_model_param_info(tr->model, &nt);
    int64_t *bytes = malloc((size_t)(nt + 1) * sizeof *bytes);
    if (!bytes)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    for (int i = 0; i < nt; i++)
        bytes[nt - 1 - i] = (int64_t)(p[i].len * sizeof(float));
    int rc = observe_grads_begin(tr->obs, bytes, nt, e);
    free(bytes);
    return rc;
}

/* The backward hook: the layer's tensors are final now (for the readiness profile), then
 * the strategy's hook launches what they complete. */
static void train_grad_hook(void *ctx, const struct nn_grad_ready *r)
{
    struct trainer *tr = ctx;
    int nt = tr->obs->grads.nt;
    observe_grads_ready(tr->obs, nt - r->first_param - r->nparams, r->nparams, clock_mono_ns());
    ddp_grad_hook(&tr->ddp, r);
}

static void train_teardown(struct trainer *tr)
{
    train_commit_free(&tr->commit);
    if (tr->have_ddp)
        ddp_cleanup(&tr->ddp);
    if (tr->have_opt)
        nn_optim_cleanup(&tr->opt);
    loader_destroy(tr->ld);
    if (tr->eng) /* before the model it borrows */
        tr->ops->destroy(tr->eng);
    tr->eng = NULL;
    if (tr->have_pipe)
        pipe_cleanup(&tr->pipe);
    tr->have_pipe = false;
    if (tr->have_model)
        nn_model_destroy(&tr->m);
    dataset_destroy(tr->train);
    dataset_destroy(tr->test);
    data_storage_destroy(tr->storage); /* after the datasets that borrow it */
    tr->storage = NULL;
    free(tr->pad_x);
    free(tr->pad_y);
    free(tr->class_sums);
    tr->class_sums = NULL;
    tr->ld = NULL;
    tr->train = tr->test = NULL;
    tr->pad_x = NULL;
    tr->pad_y = NULL;
    tr->have_ddp = tr->have_opt = tr->have_model = false;
}

/* ---- evaluation ------------------------------------------------------------------- */

/* Sums tally over all ranks (float32 is exact for counts below 2^24 samples). */
static int train_tally_reduce(struct trainer *tr, struct train_tally *t, struct err *e)
{
    float v[3] = {(float)t->loss_sum, (float)t->correct, (float)t->count};
    wait_note_begin(tr->comm->note, WAIT_METRICS, COMM_OP_ALLREDUCE, 0, 0, 0);
    int rc = tr->eng ? tr->ops->allreduce_host(tr->eng, tr->comm, v, 3, e)
                     : comm_allreduce(tr->comm, v, v, 3, COMM_FLOAT32, COMM_SUM, e);
    wait_note_end(tr->comm->note);
    if (rc < 0)
        return -1;
    t->loss_sum = v[0], t->correct = v[1], t->count = v[2];
    return 0;
}

/* The classes an evaluation counts per class (test_acc_per_class, issue 33), the same on
 * every rank (the sums are a collective): a classifier's on an engine that hands its logits
 * to the host; 0 for a pipeline (its last stage alone has them), a sequence model (its
 * labels are tokens) or more classes than a report carries. */
static int train_classes_kept(const struct trainer *tr)
{
    int k = nn_model_classes(tr->model);
    bool ok = tr->eng && tr->ops->logits && !tr->have_pipe && tr->labels_per == 1 && k > 0 &&
              k <= REPORT_MAX_CLASSES;
    return ok ? k : 0;
}

/* Adds a batch's n valid rows to the per-class sums: the argmax of each row's logits
 * (the first largest, as nn_xent_forward counts a hit) against its label. */
static void train_classes_count(struct trainer *tr, const int32_t *y, int n)
{
    const float *z = tr->ops->logits(tr->eng);
    int k = tr->nclasses;
    for (int b = 0; b < n; b++) {
        const float *row = z + (size_t)b * k;
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[arg])
                arg = j;
        if (y[b] < 0 || y[b] >= k)
            continue;
        tr->class_sums[y[b]] += arg == y[b];
        tr->class_sums[k + y[b]] += 1;
    }
}

/* Zeroes the per-class sums for an evaluation (allocated once per repeat: owned by tr). */
static int train_classes_begin(struct trainer *tr, struct err *e)
{
    tr->nclasses = train_classes_kept(tr);
    if (tr->nclasses == 0)
        return 0;
    if (!tr->class_sums && !(tr->class_sums = calloc(2 * (size_t)tr->nclasses, sizeof(float))))
        return err_set(e, ERR_NOMEM, NULL, "evaluation: out of memory");
    memset(tr->class_sums, 0, 2 * (size_t)tr->nclasses * sizeof(float));
    return 0;
}

/* Sums the per-class figures over the ranks (float32: exact below 2^24 samples). */
static int train_classes_reduce(struct trainer *tr, struct err *e)
{
    if (tr->nclasses == 0)
        return 0;
    wait_note_begin(tr->comm->note, WAIT_METRICS, COMM_OP_ALLREDUCE, 0, 0, 0);
    int rc = tr->ops->allreduce_host(tr->eng, tr->comm, tr->class_sums, 2 * tr->nclasses, e);
    wait_note_end(tr->comm->note);
    return rc;
}

/* The epoch's test_acc_per_class from the reduced sums: owned array (null for a class the
 * split lacks), or NULL when none was kept (or memory ran out: the epoch goes without). */
static json_t *train_classes_json(const struct trainer *tr)
{
    int k = tr->nclasses;
    json_t *arr = k > 0 && tr->class_sums ? json_array() : NULL;
    for (int c = 0; arr && c < k; c++) {
        float hits = tr->class_sums[c], n = tr->class_sums[k + c];
        json_array_append_new(arr, n > 0 ? json_real((double)hits / n) : json_null());
    }
    return arr;
}

/* This rank's part of the test split (disjoint, the union is the whole split). */
static int train_evaluate(struct trainer *tr, struct train_tally *out, struct err *e)
{
    struct loader_config lc;
    loader_config_default(&lc);
    train_data_rank(tr, &lc.rank, &lc.world_size);
    lc.batch_size = tr->t->batch_size;
    lc.shuffle = false;
    lc.remainder = LOADER_UNEVEN;
    lc.epochs = 1;
    lc.prefetch = tr->t->prefetch;
    lc.workers = tr->t->dataset.workers;
    struct loader *ld = NULL;
    int B = tr->t->batch_size, rc = 0;
    memset(out, 0, sizeof *out);
    if (!tr->pad_x) {
        tr->pad_x = calloc((size_t)B * tr->sample_floats, sizeof *tr->pad_x);
        tr->pad_y = calloc((size_t)B * tr->labels_per, sizeof *tr->pad_y);
        if (!tr->pad_x || !tr->pad_y)
            return err_set(e, ERR_NOMEM, NULL, "evaluation: out of memory");
    }
    if (train_classes_begin(tr, e) < 0)
        return -1;
    if (loader_shard_len(tr->test->n, lc.world_size, lc.rank, LOADER_UNEVEN) > 0 &&
        loader_create(tr->test, &lc, &ld, e) < 0)
        return err_prefix(e, "test data");
    const struct data_batch *b;
    while (ld && (rc = loader_next(ld, &b, e)) == 1) {
        const float *x = b->x;
        const int32_t *y = b->y;
        if (b->n < B) { /* the short last batch, padded; padding rows do not count */
            memcpy(tr->pad_x, b->x, (size_t)b->n * tr->sample_floats * sizeof(float));
            memcpy(tr->pad_y, b->y, (size_t)b->n * tr->labels_per * sizeof(int32_t));
            x = tr->pad_x, y = tr->pad_y;
        }
        double loss = 0;
        int right = 0;
        if (tr->have_pipe) { /* the last stage has the loss; the others only forward */
            if (pipe_eval_batch(&tr->pipe, x, y, b->n, &loss, &right, e) < 0) {
                rc = -1;
                break;
            }
            if (!pipe_is_last(&tr->pipe))
                continue;
            loss /= b->n; /* a mean, as the engine's */
        } else if (tr->ops->forward(tr->eng, x, y, b->n, 0, 0, false, e) < 0 ||
                   tr->ops->wait_loss(tr->eng, &loss, &right, e) < 0) {
            rc = -1;
            break;
        }
        if (tr->nclasses > 0)
            train_classes_count(tr, y, b->n);
        out->loss_sum += loss * b->n;
        out->correct += (double)right / tr->labels_per; /* a sequence's: tokens */
        out->count += b->n;
    }
    loader_destroy(ld);
    if (rc < 0)
        return err_prefix(e, "evaluation");
    if (train_tally_reduce(tr, out, e) < 0 || train_classes_reduce(tr, e) < 0)
        return -1;
    return 0;
}

static int train_end_epoch(struct trainer *tr, int epoch, struct train_tally *tally,
                           double time_s, struct err *e)
{
    struct train_tally test = {0};
    tr->nclasses = 0; /* none unless this epoch's evaluation kept them */
    if (train_tally_reduce(tr, tally, e) < 0 ||
        (tr->test && tr->t->eval && train_evaluate(tr, &test, e) < 0))
        return -1;
    tally->loss_sum += tr->base.loss_sum; /* elastic: the figures up to the last commit */
    tally->correct += tr->base.correct;
    tally->count += tr->base.count;
    time_s += tr->epoch_s_base;
    memset(&tr->base, 0, sizeof tr->base);
    tr->epoch_s_base = 0;
    struct report_epoch ep = {
        .repeat = tr->repeat,
        .epoch = epoch,
        .samples = (int64_t)tally->count,
        .train_loss = tally->count > 0 ? tally->loss_sum / tally->count : -1,
        .train_acc = tally->count > 0 ? tally->correct / tally->count : -1,
        .test_loss = test.count > 0 ? test.loss_sum / test.count : -1,
        .test_acc = test.count > 0 ? test.correct / test.count : -1,
        .time_s = time_s,
        .test_acc_per_class = test.count > 0 ? train_classes_json(tr) : NULL}; /* owned */
    if (tr->comm->rank == 0) {
        log_info("repeat %d epoch %d: train loss %.4f acc %.4f, test loss %.4f acc %.4f, "
                 "%.1f s",
                 tr->repeat, epoch, ep.train_loss, ep.train_acc, ep.test_loss, ep.test_acc,
                 time_s);
        if (report_emit_epoch(tr->w, &ep, e) < 0) {
            json_decref(ep.test_acc_per_class);
            return -1;
        }
    }
    json_decref(ep.test_acc_per_class);
    memset(tally, 0, sizeof *tally);
    return 0;
}

/* The next micro-batch of step `step`: adds its data
 * wait to *data_ns, notes its epoch (and the epoch it ends, if any), and tells the strategy
 * whether this micro-batch ends the optimizer step. */
static int train_next_micro(struct trainer *tr, int64_t step, int micro,
                            const struct data_batch **out, int64_t *data_ns, int *epoch_done,
                            int *epoch_of_step, struct err *e)
{
    const struct data_batch *b = NULL;
    int got = loader_next(tr->ld, &b, e);
    if (got < 0)
        return err_prefix(e, "loading step %lld", (long long)step);
    if (got == 0)
        return err_set(e, ERR_INTERNAL, NULL, "the data ended before step %lld",
                       (long long)step);
    *data_ns += b->wait_ns;
    *epoch_of_step = (int)b->epoch;
    if (tr->pos_epoch != b->epoch) /* the data position a commit records */
        tr->pos_epoch = b->epoch, tr->pos_off = 0;
    tr->pos_off += (int64_t)b->n *
                   (tr->comm->world_size / (tr->t->pipeline > 1 ? tr->t->pipeline : 1));
    if (b->last_in_epoch)
        tr->pos_epoch = b->epoch + 1, tr->pos_off = 0;
    if (b->last_in_epoch)
        *epoch_done = (int)b->epoch;
    /* a pipeline's schedule says which backward ends the step; a loader-only run has no
     * strategy; a calibration (spec calibrate) never synchronises, so neither the hook nor
     * ddp_finish exchanges anything and each rank updates its own replica */
    if (!tr->have_pipe && tr->have_ddp)
        ddp_begin_step(&tr->ddp, micro == tr->t->accumulate - 1 && !tr->t->calibrate);
    *out = b;
    return 0;
}

/* Adds a micro-batch's mean loss and correct count to the step and the epoch; a loss that
 * is not finite ends the run (diverged). */
static int train_count_micro(int64_t step, double loss, int right, int n, int labels_per,
                             struct train_tally *tally, double *loss_sum, struct err *e)
{
    if (!isfinite(loss))
        return err_set(e, ERR_INVALID, "optimizer.lr",
                       "the loss of step %lld is %g: training diverged (lower the "
                       "learning rate)",
                       (long long)step, loss);
    *loss_sum += loss;
    tally->loss_sum += loss * n;
    tally->correct += (double)right / labels_per; /* accuracy per token for a sequence */
    tally->count += n;
    return 0;
}

/* ---- one optimizer step ------------------------------------------------------------- */

static double train_ms(int64_t ns)
{
    return (double)ns / 1e6;
}

/* ---- the trace of a step (observe.h) ------------------------------------------------- */

/* Whether step is in the run's trace window: the first trace_steps after warm-up. */
static bool train_traced(const struct trainer *tr, int64_t step)
{
    return step >= tr->t->warmup_steps &&
           step < (int64_t)tr->t->warmup_steps + tr->s->trace_steps;
}

/* The strategy's part of a traced step: the training thread's communication (launches,
 * waits: the exposed time) as "comm" spans, and each collective's flight. */
static void train_trace_comm(struct trainer *tr)
{
    const struct ddp *d = &tr->ddp;
    for (int i = 0; i < d->nspans; i++)
        if (d->spans[i].exposed)
            observe_trace_span(tr->obs, "comm_exposed", d->spans[i].from_ns, d->spans[i].to_ns);
    for (int i = 0; i < d->nops; i++) {
        const struct ddp_op_rec *r = &d->ops[i];
        observe_trace_op(tr->obs, comm_op_name(r->op), r->bucket, r->bytes, r->algorithm,
                         r->launch_ns, r->end_ns);
    }
}

/* Fills the step's communication figures and wall time from the strategy, sends the
 * step and, where it was traced, its trace: the end of every step, pipeline or not. */
/* The data pipeline's figures of the step just taken: the loader's CPU time and the bytes
 * read from storage since the previous step (both run ahead of the step that consumes
 * their batches, so a step is charged with what the pipeline did while it ran). */
static void train_data_figures(struct trainer *tr, struct report_step *rs)
{
    struct loader_stats ls;
    struct data_storage_stats ss;
    loader_get_stats(tr->ld, &ls);
    data_storage_get_stats(tr->storage, &ss);
    struct err me = {0};
    if (data_mount_dir() && data_mount_stats_read(data_mount_dir(), &ss, &me) < 0)
        ss.bytes = tr->last_read_bytes; /* unreadable this once: nothing counted */
    rs->loader_cpu_ms = train_ms(ls.fill_cpu_ns - tr->last_cpu_ns);
    rs->read_bytes = ss.bytes - tr->last_read_bytes;
    tr->last_cpu_ns = ls.fill_cpu_ns;
    tr->last_read_bytes = ss.bytes;
}

static int train_emit_step(struct trainer *tr, struct report_step *rs, bool traced,
                           int64_t t_start, int64_t t_end, struct err *e)
{
    const struct ddp_step_stats *st = &tr->ddp.st;
    train_data_figures(tr, rs);
    rs->comm_ms = train_ms(st->comm_ns);
    rs->comm_exposed_ms = train_ms(st->exposed_ns);
    rs->step_ms = train_ms(t_end - t_start);
    rs->bytes_sent = (int64_t)st->bytes_sent;
    if (rs->stage >= 0) { /* a pipeline's idle time: what is neither compute nor exposed */
        double busy = rs->data_ms + rs->forward_ms + rs->backward_ms + rs->optimizer_ms +
                      rs->comm_exposed_ms;
        rs->bubble_ms = rs->step_ms > busy ? rs->step_ms - busy : 0;
    }
    if (report_emit_step(tr->w, rs, e) < 0)
        return -1;
    observe_window_step(tr->obs);
    if (!traced)
        return 0;
    observe_trace_span(tr->obs, "step", t_start, t_end);
    train_trace_comm(tr);
    return observe_trace_emit(tr->obs, tr->repeat, rs->step, e);
}

/* The start of a data-parallel or loader-only step: its report's identity (batch_size x
 * accumulate samples, no pipeline) and, when it is in the trace window, its trace begun.
 * Returns whether it is traced. */
static bool train_step_open(struct trainer *tr, int64_t step, struct report_step *rs)
{
    (void)step; /* the report's number is the iteration counter (== step unless elastic) */
    *rs = (struct report_step){.repeat = tr->repeat,
                               .step = tr->iter,
                               .warmup = tr->iter < tr->t->warmup_steps,
                               .samples = tr->t->batch_size * tr->t->accumulate,
                               REPORT_STEP_NO_PIPELINE};
    if (tr->el) {
        rs->gen = tr->el->cur.gen;
        rs->world = tr->comm->world_size;
    }
    bool traced = train_traced(tr, tr->iter);
    if (traced)
        observe_trace_begin(tr->obs);
    return traced;
}

/* Runs step `step` (accumulate micro-batches, the exchange, the update) and reports it.
 * *epoch_done is set to the epoch that ended in it, or -1. Phases are the host clock's
 * around each engine call unless the engine measures them itself (end_step); backward
 * and the optimizer exclude the exposed communication inside them (the hook's launches,
 * ZeRO's all-gather), which comm_exposed counts (ddp.h "Timing"), so the phases add up
 * to the step without counting any time twice. */
static int train_step(struct trainer *tr, int64_t step, struct train_tally *tally,
                      int *epoch_done, int *epoch_of_step, struct err *e)
{
    const struct spec_train *t = tr->t;
    const struct train_engine_ops *ops = tr->ops;
    struct train_engine *en = tr->eng;
    struct report_step rs;
    bool traced = train_step_open(tr, step, &rs);
    ddp_set_trace(&tr->ddp, traced);
    int64_t t_start = clock_mono_ns(), data_ns = 0, fwd_ns = 0, bwd_ns = 0;
    *epoch_done = -1;
    ops->begin_step(en);
    double loss_sum = 0;
    for (int micro = 0; micro < t->accumulate; micro++) {
        const struct data_batch *b = NULL;
        int64_t td = clock_mono_ns(), data_before = data_ns;
        if (train_next_micro(tr, step, micro, &b, &data_ns, epoch_done, epoch_of_step, e) < 0)
            return -1;
        /* the wait is what the data phase counts; the rest of the call is the hand-off */
        observe_trace_span(tr->obs, "data", td, td + (data_ns - data_before));
        double loss = 0;
        int right = 0;
        int64_t t0 = clock_mono_ns();
        if (ops->forward(en, b->x, b->y, b->n, 1, (uint64_t)b->step, tr->train->reuse_batch,
                         e) < 0)
            return err_prefix(e, "forward of step %lld", (long long)step);
        int64_t t1 = clock_mono_ns(), exposed_before_bwd = tr->ddp.st.exposed_ns;
        bool profiled = !rs.warmup && micro == t->accumulate - 1; /* the synchronising one */
        if (profiled)
            observe_grads_backward(tr->obs, t1);
        if (ops->backward(en, train_grad_hook, tr, e) < 0)
            return err_prefix(e, "backward of step %lld", (long long)step);
        int64_t t_bwd = clock_mono_ns();
        int64_t bwd_own = (t_bwd - t1) - (tr->ddp.st.exposed_ns - exposed_before_bwd);
        if (profiled)
            observe_grads_end(tr->obs, bwd_own);
        fwd_ns += t1 - t0;
        bwd_ns += bwd_own;
        observe_trace_span(tr->obs, "forward", t0, t1);
        observe_trace_span(tr->obs, "backward", t1, t_bwd);
        if (ops->wait_loss(en, &loss, &right, e) < 0)
            return err_prefix(e, "loss of step %lld", (long long)step);
        if (train_count_micro(step, loss, right, b->n, tr->labels_per, tally, &loss_sum, e) < 0)
            return -1;
    }
    if (ddp_finish(&tr->ddp, t->accumulate, e) < 0)
        return err_prefix(e, "gradient exchange of step %lld", (long long)step);
    int64_t exposed_before = tr->ddp.st.exposed_ns, t2 = clock_mono_ns();
    bool apply = true;
    rs.loss_scale = ops->loss_scale ? ops->loss_scale(en) : -1;
    if (ops->begin_update(en, &apply, e) < 0)
        return err_prefix(e, "before optimizer step %lld", (long long)step);
    rs.skipped = !apply;
    if (apply && t->clip_grad_norm > 0 &&
        ddp_clip_grad_norm(&tr->ddp, t->clip_grad_norm, &rs.grad_norm, e) < 0)
        return err_prefix(e, "clipping the gradients of step %lld", (long long)step);
    if (apply && ddp_optim_step(&tr->ddp, &tr->opt, nn_lr_at(&tr->sched, (long)step), e) < 0)
        return err_prefix(e, "optimizer step %lld", (long long)step);
    ops->end_update(en, apply);
    const struct ddp_step_stats *st = &tr->ddp.st;
    int64_t t3 = clock_mono_ns();
    observe_trace_span(tr->obs, "optimizer", t2, t3);
    struct train_phases ph = {
        .forward_ms = train_ms(fwd_ns),
        .backward_ms = train_ms(bwd_ns),
        .optimizer_ms = train_ms((t3 - t2) - (st->exposed_ns - exposed_before))};
    if (ops->end_step(en, &ph, e) < 0)
        return err_prefix(e, "step %lld on device %s", (long long)step, ops->device);
    int64_t t_end = clock_mono_ns();
    rs.epoch = *epoch_of_step;
    rs.loss = loss_sum / t->accumulate;
    rs.data_ms = train_ms(data_ns);
    rs.forward_ms = ph.forward_ms;
    rs.backward_ms = ph.backward_ms;
    rs.optimizer_ms = ph.optimizer_ms;
    return train_emit_step(tr, &rs, traced, t_start, t_end, e);
}

/* A step of a loader-only run (spec loader_only): the step's batches from the loader and
 * nothing else, so its time is what the data pipeline takes to supply them and the run's
 * throughput is the pipeline's own. No model runs: the loss reported is 0 and the epochs
 * carry no train figures (null). */
static int train_step_loader(struct trainer *tr, int64_t step, int *epoch_done,
                             int *epoch_of_step, struct err *e)
{
    struct report_step rs;
    bool traced = train_step_open(tr, step, &rs);
    int64_t t_start = clock_mono_ns(), data_ns = 0;
    *epoch_done = -1;
    for (int micro = 0; micro < tr->t->accumulate; micro++) {
        const struct data_batch *b = NULL;
        int64_t td = clock_mono_ns(), before = data_ns;
        if (train_next_micro(tr, step, micro, &b, &data_ns, epoch_done, epoch_of_step, e) < 0)
            return -1;
        observe_trace_span(tr->obs, "data", td, td + (data_ns - before));
    }
    rs.epoch = *epoch_of_step;
    rs.data_ms = train_ms(data_ns);
    rs.forward_ms = rs.backward_ms = rs.optimizer_ms = 0;
    return train_emit_step(tr, &rs, traced, t_start, clock_mono_ns(), e);
}

/* The step's loss, as the mean over the replicas' last stages (the only ranks that have
 * one), on every rank: every rank reports it. */
static int train_pipe_loss(struct trainer *tr, const struct pipe_stats *ps, double *loss,
                           struct err *e)
{
    bool last = pipe_is_last(&tr->pipe);
    float v[2] = {last ? (float)(ps->loss_sum / tr->t->micro_batches) : 0, last ? 1.0f : 0};
    wait_note_begin(tr->comm->note, WAIT_METRICS, COMM_OP_ALLREDUCE, 0, 0, 0);
    int rc = comm_allreduce(tr->comm, v, v, 2, COMM_FLOAT32, COMM_SUM, e);
    wait_note_end(tr->comm->note);
    *loss = v[1] > 0 ? v[0] / v[1] : 0;
    return rc;
}

/* A step of a pipeline run (pipeline.h): the schedule over the step's micro-batches, the
 * strategy's exchange among the stage's replicas, the tied weight's sum, the update. The
 * phases are this rank's own compute; bubble_ms is the rest of the step that is neither
 * compute nor exposed gradient communication: waiting for the other stages and the
 * point-to-point transfers. */
static int train_step_pipe(struct trainer *tr, int64_t step, struct train_tally *tally,
                           int *epoch_done, int *epoch_of_step, struct err *e)
{
    const struct spec_train *t = tr->t;
    struct report_step rs = {.repeat = tr->repeat,
                             .step = step,
                             .warmup = step < t->warmup_steps,
                             .samples = t->batch_size,
                             .stage = tr->pipe.stage,
                             .gen = -1,
                             .world = -1,
                             .grad_norm = -1,
                             .loss_scale = -1};
    bool traced = train_traced(tr, step);
    if (traced)
        observe_trace_begin(tr->obs);
    ddp_set_trace(&tr->ddp, traced);
    int64_t t_start = clock_mono_ns(), data_ns = 0;
    *epoch_done = -1;
    const struct data_batch *b = NULL;
    if (train_next_micro(tr, step, 0, &b, &data_ns, epoch_done, epoch_of_step, e) < 0)
        return -1;
    observe_trace_span(tr->obs, "data", t_start, t_start + data_ns);
    struct pipe_stats ps;
    if (pipe_train_step(&tr->pipe, b->x, b->y, (uint64_t)b->step, &tr->ddp, ddp_grad_hook,
                        &tr->ddp, tr->obs, &ps, e) < 0)
        return err_prefix(e, "step %lld", (long long)step);
    if (ddp_finish(&tr->ddp, t->micro_batches, e) < 0)
        return err_prefix(e, "gradient exchange of step %lld", (long long)step);
    if (pipe_sync_tied(&tr->pipe, &ps, e) < 0)
        return err_prefix(e, "step %lld", (long long)step);
    int64_t exposed_before = tr->ddp.st.exposed_ns, t2 = clock_mono_ns();
    if (ddp_optim_step(&tr->ddp, &tr->opt, nn_lr_at(&tr->sched, (long)step), e) < 0)
        return err_prefix(e, "optimizer step %lld", (long long)step);
    int64_t t3 = clock_mono_ns();
    observe_trace_span(tr->obs, "optimizer", t2, t3);
    double loss = 0;
    if (train_pipe_loss(tr, &ps, &loss, e) < 0)
        return err_prefix(e, "the loss of step %lld", (long long)step);
    double ignored = 0;
    if (pipe_is_last(&tr->pipe) &&
        train_count_micro(step, ps.loss_sum / t->micro_batches, ps.right, t->batch_size,
                          tr->labels_per, tally, &ignored, e) < 0)
        return -1;
    int64_t t_end = clock_mono_ns();
    rs.epoch = *epoch_of_step;
    rs.loss = loss;
    rs.data_ms = train_ms(data_ns);
    rs.forward_ms = train_ms(ps.forward_ns);
    rs.backward_ms = train_ms(ps.backward_ns);
    rs.optimizer_ms = train_ms((t3 - t2) - (tr->ddp.st.exposed_ns - exposed_before));
    rs.p2p_ms = train_ms(ps.p2p_ns);
    rs.p2p_bytes = ps.p2p_bytes;
    return train_emit_step(tr, &rs, traced, t_start, t_end, e);
}

static int train_progress(struct trainer *tr, int64_t done, struct err *e)
{
    if (tr->hb) {
        heartbeat_set_phase(tr->hb, "train repeat %d step %lld/%lld", tr->repeat,
                            (long long)done, (long long)tr->total_steps);
        heartbeat_advance(tr->hb);
    }
    int64_t now = clock_mono_ns();
    if (tr->comm->rank != 0 ||
        (now - tr->last_progress_ns < TRAIN_PROGRESS_NS && done < tr->total_steps))
        return 0;
    tr->last_progress_ns = now;
    int64_t all = tr->total_steps * tr->s->repeats;
    return report_emit_progress_gen(tr->w, "train", tr->repeat * tr->total_steps + done, all,
                                    tr->el ? tr->el->cur.gen : -1, tr->comm->world_size, e);
}

/* What this rank holds at the end of the repeat (report.h struct report_memory). */
static int train_report_memory(struct trainer *tr, struct err *e)
{
    struct ddp_memory dm;
    ddp_memory(&tr->ddp, &tr->opt, &dm);
    struct report_memory rm = {.repeat = tr->repeat,
                               .params_bytes = dm.params,
                               .buffers_bytes = dm.buffers,
                               .grads_bytes = dm.grads,
                               .optimizer_bytes = dm.optimizer,
                               .comm_bytes = dm.comm,
                               .activations_bytes = tr->eng ? tr->ops->activation_bytes(tr->eng)
                                                            : pipe_activation_bytes(&tr->pipe),
                               .peak_rss_bytes = observe_peak_rss_bytes(),
                               .device_peak_bytes = tr->eng ? tr->ops->peak_bytes(tr->eng)
                                                            : -1};
    return report_emit_memory(tr->w, &rm, e);
}

/* A loader-only run's repeat: its steps take batches and nothing else (train_step_loader),
 * epochs still end (their time is the pipeline's), and no model is built. */
static int train_repeat_loader(struct trainer *tr, struct err *e)
{
    if (tr->comm->rank == 0 && tr->repeat == 0)
        log_info("loader only: %s %dx%dx%d (%s, %s storage), batch %d x %d ranks, %d "
                 "workers, %lld steps",
                 tr->train->name, tr->train->c, tr->train->h, tr->train->w,
                 tr->t->dataset.format, tr->t->dataset.storage, tr->t->batch_size,
                 tr->comm->world_size, tr->t->dataset.workers, (long long)tr->total_steps);
    struct train_tally tally = {0};
    observe_window_begin(tr->obs, tr->repeat);
    int64_t epoch_start = clock_mono_ns();
    int epoch = 0;
    for (int64_t step = 0; step < tr->total_steps; step++) {
        int done = -1;
        if (train_step_loader(tr, step, &done, &epoch, e) < 0)
            return -1;
        tr->iter = step + 1;
        if (train_progress(tr, step + 1, e) < 0)
            return -1;
        if (done < 0)
            continue;
        double secs = (double)(clock_mono_ns() - epoch_start) / 1e9;
        if (observe_window_emit(tr->obs, done, e) < 0 ||
            train_end_epoch(tr, done, &tally, secs, e) < 0)
            return err_prefix(e, "end of epoch %d", done);
        epoch_start = clock_mono_ns();
    }
    return observe_window_emit(tr->obs, epoch, e);
}

/* ---- elastic training (worker/elastic.h, train_elastic.h) ------------------------------ */

/* Frees what borrows the communicator (the strategy, its optimizer) and the loader,
 * whose shard is the old world's. In-flight operations of a failed communicator end at
 * once (its stop flag), so nothing here waits out a timeout. */
static void train_elastic_drop(struct trainer *tr)
{
    if (tr->comm)
        atomic_store(&tr->comm->stop, true);
    if (tr->have_ddp)
        ddp_cleanup(&tr->ddp);
    if (tr->have_opt)
        nn_optim_cleanup(&tr->opt);
    tr->have_ddp = tr->have_opt = false;
    loader_destroy(tr->ld);
    tr->ld = NULL;
}

/* The epoch's remainder at the restored position gives the new world no batch: the epoch
 * ends here, with the figures of the commit. */
static int train_elastic_short_epoch(struct trainer *tr, struct train_tally *tally,
                                     struct err *e)
{
    int rank, world;
    train_data_rank(tr, &rank, &world);
    int64_t left = tr->train->n - tr->pos_off;
    if (tr->pos_off == 0 || left / world >= tr->t->batch_size)
        return 0;
    if (train_end_epoch(tr, (int)tr->pos_epoch, tally, 0, e) < 0)
        return err_prefix(e, "end of epoch %lld", (long long)tr->pos_epoch);
    tr->pos_epoch++;
    tr->pos_off = 0;
    return 0;
}

/* Takes the generation root's commit (every member: a collective), then rebuilds the
 * loader and the strategy for this rank and world and loads the state into them. */
static int train_elastic_restore(struct trainer *tr, struct train_tally *tally, struct err *e)
{
    struct elastic *el = tr->el;
    int root = elastic_gen_root(&el->cur);
    int64_t iter_max = 0;
    if (root < 0)
        return err_set(e, ERR_INVALID, "elastic", "generation %d has no member with state",
                       el->cur.gen);
    if (train_commit_share(tr->comm, root, &tr->commit, tr->iter, &iter_max, e) < 0)
        return -1;
    const struct train_commit_head *h = &tr->commit.h;
    if (h->repeat != tr->repeat)
        return err_set(e, ERR_INVALID, "repeats",
                       "elastic: the commit is of repeat %d, this rank is in repeat %d (a "
                       "replacement joins repeat 0 only)",
                       h->repeat, tr->repeat);
    tr->lost_steps = iter_max - h->iter;
    tr->iter = iter_max;
    tr->step = h->step;
    tr->pos_epoch = h->epoch;
    tr->pos_off = h->offset;
    tr->base = (struct train_tally){h->tally[0], h->tally[1], h->tally[2]};
    tr->epoch_s_base = h->epoch_s;
    memset(tally, 0, sizeof *tally);
    el->joiner = false;
    struct nn_lr_schedule sched = tr->sched; /* the run's, whatever the new world's steps */
    bool first = !tr->have_ddp && tr->sched.base_lr == 0;
    if (train_elastic_short_epoch(tr, tally, e) < 0)
        return -1;
    if (tr->t->epochs > 0 && tr->t->steps <= 0 && tr->pos_epoch >= tr->t->epochs) {
        tr->total_steps = tr->step; /* the commit was the run's end */
    } else if (train_make_loader(tr, e) < 0) {
        return -1;
    }
    if (train_make_strategy(tr, true, e) < 0 ||
        train_commit_load(&tr->commit, tr->model->params.data, tr->model->nparams,
                          tr->model->buffers.data, tr->model->nbuffers, &tr->ddp, &tr->opt,
                          e) < 0)
        return -1;
    if (!first)
        tr->sched = sched;
    if (tr->eng)
        tr->ops->params_changed(tr->eng);
    tr->epoch_start_ns = clock_mono_ns();
    tr->resumed_pending = true;
    double ms = (double)(clock_mono_ns() - el->since_ns) / 1e6;
    tr->regroup_ms = ms;
    if (tr->comm->rank == 0 && elastic_emit(el, "regroup", h->iter, -1, ms, el->peer, e) < 0)
        return -1;
    return 0;
}

/* Leaves the generation (failed: after a failure, else to grow) for the next one with
 * the state of its root's last commit. */
static int train_elastic_switch(struct trainer *tr, struct train_tally *tally, bool failed,
                                struct err *e)
{
    train_elastic_drop(tr);
    for (;;) {
        if (elastic_next(tr->el, failed, e) < 0)
            return -1;
        tr->comm = tr->el->comm;
        if (tr->el->left)
            return err_set(e, ERR_ABORTED, NULL, "elastic: this slot is not in generation %d",
                           tr->el->cur.gen);
        if (train_elastic_restore(tr, tally, e) == 0)
            return 0;
        if (!elastic_recoverable(e))
            return -1;
        log_warn("elastic: %s", e->msg);
        train_elastic_drop(tr);
        failed = true;
    }
}

/* The commit (every commit_every steps, at every epoch end): the epoch's figures since
 * the last one summed over the ranks with rank 0's word on growth in the same
 * allreduce, then the state (ZeRO's shards gathered). Switches generation when the next
 * one is published. The start's commit (start: before the first step, every rank's state
 * the same and the optimizer's zeros) has nothing to sum or gather: no communication,
 * so it cannot fail with a peer, and a failure before the first due commit has it to
 * go back to. */
static int train_elastic_commit(struct trainer *tr, struct train_tally *tally, bool start,
                                struct err *e)
{
    bool grow = false;
    float v[4] = {(float)tally->loss_sum, (float)tally->correct, (float)tally->count, 0};
    if (!start && elastic_next_exists(tr->el, &grow, e) < 0)
        return -1;
    v[3] = grow ? 1.0f : 0.0f;
    if (!start && comm_allreduce(tr->comm, v, v, 4, COMM_FLOAT32, COMM_SUM, e) < 0)
        return err_prefix(e, "elastic commit");
    struct train_commit_head h = {
        .repeat = tr->repeat,
        .epoch = (int32_t)tr->pos_epoch,
        .step = tr->step,
        .iter = tr->iter,
        .offset = tr->pos_off,
        .opt_step = tr->opt.step,
        .tally = {tr->base.loss_sum + v[0], tr->base.correct + v[1], tr->base.count + v[2]},
        .epoch_s = tr->epoch_s_base + (double)(clock_mono_ns() - tr->epoch_start_ns) / 1e9};
    if (train_commit_save(&tr->commit, &h, tr->model->params.data, tr->model->nparams,
                          tr->model->buffers.data, tr->model->nbuffers, &tr->ddp, &tr->opt,
                          start, e) < 0)
        return err_prefix(e, "elastic commit");
    tr->base = (struct train_tally){h.tally[0], h.tally[1], h.tally[2]};
    tr->epoch_s_base = h.epoch_s;
    tr->epoch_start_ns = clock_mono_ns();
    memset(tally, 0, sizeof *tally);
    if (v[3] > 0.5f) {
        log_info("elastic: generation %d is published: growing at step %lld",
                 tr->el->cur.gen + 1, (long long)tr->iter);
        return train_elastic_switch(tr, tally, false, e);
    }
    return 0;
}

/* After a step of an elastic run: "resumed" after a new generation's first, and the
 * commit when one is due. */
static int train_elastic_after_step(struct trainer *tr, struct train_tally *tally,
                                    bool epoch_ended, struct err *e)
{
    if (tr->resumed_pending && tr->comm->rank == 0 &&
        elastic_emit(tr->el, "resumed", tr->commit.h.iter, tr->lost_steps, tr->regroup_ms, -1,
                     e) < 0)
        return -1;
    tr->resumed_pending = false;
    if (epoch_ended || tr->step % tr->s->elastic.commit_every == 0)
        return train_elastic_commit(tr, tally, false, e);
    return 0;
}

/* One data-parallel step, its progress and, when it ended one, the epoch. */
static int train_one(struct trainer *tr, struct train_tally *tally, int *epoch, int *done,
                     struct err *e)
{
    *done = -1;
    if ((tr->have_pipe ? train_step_pipe(tr, tr->step, tally, done, epoch, e)
                       : train_step(tr, tr->step, tally, done, epoch, e)) < 0)
        return -1;
    tr->step++;
    tr->iter++;
    if (train_progress(tr, tr->step, e) < 0)
        return -1;
    if (*done < 0)
        return 0;
    double secs = (double)(clock_mono_ns() - tr->epoch_start_ns) / 1e9;
    if (observe_window_emit(tr->obs, *done, e) < 0 ||
        train_end_epoch(tr, *done, tally, secs, e) < 0)
        return err_prefix(e, "end of epoch %d", *done);
    tr->epoch_start_ns = clock_mono_ns();
    return 0;
}

/* Builds the repeat's data, model, loader and strategy; a replacement of an elastic run
 * takes the loader, strategy and state from its generation's commit instead. */
static int train_setup(struct trainer *tr, struct train_tally *tally, struct err *e)
{
    if (train_open_data(tr, e) < 0 || train_build_model(tr, e) < 0)
        return -1;
    if (tr->el && tr->el->joiner)
        return train_elastic_restore(tr, tally, e);
    return train_make_loader(tr, e) < 0 || train_make_strategy(tr, false, e) < 0 ? -1 : 0;
}

static int train_repeat(struct trainer *tr, struct err *e)
{
    if (tr->t->loader_only)
        return train_open_data(tr, e) < 0 || train_make_loader(tr, e) < 0
                   ? -1
                   : train_repeat_loader(tr, e);
    struct train_tally tally = {0};
    if (train_setup(tr, &tally, e) < 0)
        return -1;
    if (tr->comm->rank == 0 && tr->repeat == 0)
        log_info("training %s (%zu parameters) on %s %dx%dx%d, %s, batch %d x %d ranks, "
                 "%lld steps",
                 tr->t->model, nn_model_param_count(tr->model), tr->train->name, tr->train->c,
                 tr->train->h, tr->train->w, tr->t->strategy, tr->t->batch_size,
                 tr->comm->world_size, (long long)tr->total_steps);
    if (train_profile_grads(tr, e) < 0)
        return -1;
    observe_window_begin(tr->obs, tr->repeat);
    if (!tr->resumed_pending)
        tr->epoch_start_ns = clock_mono_ns();
    int epoch = (int)tr->pos_epoch;
    /* steps since the last epoch ended: the same on every rank (a pipeline's first stages
     * count no samples) */
    bool pending = tr->pos_off > 0;
    /* an elastic run commits its starting state, so a failure has one to go back to */
    if (tr->el && !tr->resumed_pending && train_elastic_commit(tr, &tally, true, e) < 0)
        return -1;
    for (;;) {
        int done = -1, rc = 0;
        if (tr->step < tr->total_steps) {
            pending = true;
            rc = train_one(tr, &tally, &epoch, &done, e);
            if (rc == 0 && tr->el)
                rc = train_elastic_after_step(tr, &tally, done >= 0, e);
        } else if (!tr->el) {
            break;
        } else if ((rc = comm_barrier(tr->comm, e)) == 0) {
            /* elastic: every member has trained every step before any leaves the
             * training, so a failure now finds them all here to restore together */
            break;
        }
        if (rc < 0 && !(tr->el && elastic_recoverable(e)))
            return -1;
        if (rc < 0) {
            log_warn("elastic: %s", e->msg);
            if (train_elastic_switch(tr, &tally, true, e) < 0)
                return -1;
            epoch = (int)tr->pos_epoch;
            pending = tr->pos_off > 0;
            continue;
        }
        if (done >= 0)
            pending = false;
    }
    if (observe_window_emit(tr->obs, epoch, e) < 0) /* the steps after the last epoch end */
        return -1;
    /* epochs mode with accumulation: the micro-batches that do not fill a last step are
     * left out, so the last epoch ends here (every rank has the same count) */
    if (tr->t->epochs > 0 && pending) {
        double secs = (double)(clock_mono_ns() - tr->epoch_start_ns) / 1e9;
        if (train_end_epoch(tr, epoch, &tally, secs, e) < 0)
            return err_prefix(e, "end of epoch %d", epoch);
    }
    if (observe_grads_emit(tr->obs, tr->repeat, e) < 0)
        return -1;
    return train_report_memory(tr, e);
}

/* The CPU engine's choices for the run's env: the ISA levels and the model's (a pipeline's
 * stage's) convolution algorithms; m NULL when the repeat failed before building one. */
static void train_outcome_cpu(struct train_outcome *out, const struct nn_model *m)
{
    out->cpu_isa = nn_isa_name(nn_isa_get());
    out->onednn_isa = nn_isa_onednn_name();
    if (!m)
        return;
    struct nn_conv_algo_count algos[TRAIN_CONV_ALGOS_MAX];
    out->nconv_algos = nn_model_conv_algos(m, algos, TRAIN_CONV_ALGOS_MAX);
    for (int i = 0; i < out->nconv_algos; i++) {
        out->conv_algos[i].name = algos[i].name;
        out->conv_algos[i].layers = algos[i].layers;
    }
}

int workload_train_run(const struct spec *s, struct comm *c, struct comm *stage_c,
                       struct report_writer *w, struct heartbeat *hb, struct elastic *el,
                       struct train_outcome *out, struct err *e)
{
    if (out)
        *out = (struct train_outcome){.device_peak_bytes = -1};
    /* what the device cannot do (precision on the CPU, ...) was refused with the spec
     * (spec_from_json applies the submit-time rules); what this build lacks is refused here */
    const struct train_engine_ops *ops = train_engine_pick(s->device, e);
    if (!ops)
        return -1;
    nn_set_threads(s->train.threads);
    struct observe obs;
    observe_init(&obs, w, strcmp(s->device, "cuda") == 0 ? GPU_NVML_DEFAULT_LIB : NULL);
    int rc = 0;
    for (int r = 0; rc == 0 && r < s->repeats; r++) {
        struct trainer tr = {.s = s,
                             .t = &s->train,
                             .comm = c,
                             .stage_comm = stage_c,
                             .w = w,
                             .hb = hb,
                             .obs = &obs,
                             .repeat = r,
                             .seed = (uint64_t)s->seed + (uint64_t)r,
                             .ops = ops,
                             .el = el};
        if (el) /* a generation change replaced the communicator */
            tr.comm = el->comm;
        rc = train_repeat(&tr, e);
        int64_t peak = tr.eng ? ops->peak_bytes(tr.eng) : -1;
        if (out && peak > out->device_peak_bytes)
            out->device_peak_bytes = peak;
        if (out && tr.have_model && nn_model_bf16_path(&tr.m) != NN_BF16_OFF)
            out->bf16_path = nn_bf16_path_name(nn_model_bf16_path(&tr.m));
        if (out && strcmp(s->device, "cpu") == 0)
            train_outcome_cpu(out, tr.model);
        train_teardown(&tr);
    }
    observe_cleanup(&obs);
    return rc;
}

int workload_train_model_buckets(const struct spec *s, int64_t *sizes, size_t cap, size_t *n,
                                 struct err *e)
{
    const struct model_info *mi = model_table_find(s->coll.buckets_of);
    if (!mi)
        return err_set(e, ERR_INVALID, "buckets_of", "buckets_of: unknown model \"%s\"",
                       s->coll.buckets_of);
    struct nn_model m;
    nn_model_init(&m);
    int rc = nn_models_build(&m, mi->name, mi->c, mi->h, mi->w, mi->classes, NULL, e);
    if (rc == 0) {
        struct ddp_config dc = {.strategy = DDP_DDP,
                                .bucket_bytes = (size_t)s->train.bucket_mb << 20};
        *n = (size_t)ddp_bucket_sizes(&m, &dc, sizes, (int)cap);
    }
    nn_model_destroy(&m);
    return rc < 0 ? err_prefix(e, "buckets_of") : 0;
}

/* The training module's entry (train_module.h; module.h: one symbol, unique across
 * modules). */
const struct train_module ddpb_module_train = {
    .abi = MODULE_ABI,
    .run = workload_train_run,
    .pick = train_engine_pick,
    .model_buckets = workload_train_model_buckets,
};
