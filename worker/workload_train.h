/* workload_train: the training workload (spec workload "train"): a zoo model trained
 * data-parallel with one of the ddp/ strategies on a dataset sharded by rank, every step
 * timed per phase and reported, every epoch evaluated (docs/design.md §13).
 *
 * Decisions:
 * - One trainer struct holds the model, data, strategy and optimizer of a repeat; each
 *   repeat rebuilds them from seed + repeat, so repeats give the spread of both the timings
 *   and the accuracy, and a run is deterministic given its seed.
 * - Phases of a step (report.h struct report_step): data is the time the loader made the
 *   step wait; forward includes the loss; backward is the compute of backward (the hook's
 *   bookkeeping included, its launches are exposed communication); comm is the wall time
 *   some exchange was in flight and comm_exposed the part of it the step spent
 *   launching, waiting or copying, both on the training thread's clock (ddp.h "Timing");
 *   optimizer is the update (for ZeRO without the all-gather, which is communication).
 *   step is the wall time of the whole step.
 * - Statistics the daemon computes skip the first warmup_steps of every repeat.
 * - Train loss and accuracy of an epoch are over the samples all ranks trained on in it
 *   (with dropout and batch statistics of training mode, as PyTorch examples print them);
 *   test figures are over the whole test split, each rank evaluating a disjoint part.
 * - Elastic runs (spec elastic; worker/elastic.h, worker/train_elastic.h): a failure of
 *   the communicator inside the training is not the end: the rank regroups with the
 *   next generation, restores the last commit (taken every commit_every steps and at
 *   every epoch's end) and goes on with a loader and strategy for its new rank and world.
 *   The epoch's figures up to the commit travel in it, so an epoch's samples, loss and
 *   accuracy are the whole epoch's across a resize; steps are numbered by the run's
 *   iteration counter, which redone work does not reuse. The members pass a barrier
 *   before leaving the training, so that a failure at the very end is recovered too.
 *
 * Ownership: everything is borrowed from the caller for the duration of the call. */
#ifndef DDPB_WORKLOAD_TRAIN_H
#define DDPB_WORKLOAD_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "common/spec.h"
#include "worker/comm/comm.h"
#include "worker/heartbeat.h"

/* What a run measured beside its reports. */
struct elastic;

/* Room for every algorithm nn_conv2d_algo_name can name (three today). */
#define TRAIN_CONV_ALGOS_MAX 4

struct train_outcome {
    int64_t device_peak_bytes; /* device "cuda": the most GPU memory in use after a step
                                  (cudaMemGetInfo), over all repeats; -1 on the CPU */
    const char *bf16_path;     /* precision bf16 on the CPU: the path that ran
                              (nn_bf16_path_name: "onednn-native", "emulated-storage");
                              NULL otherwise. Static. */
    /* device "cpu" (the env's cpu_isa, onednn_isa, conv_algos; NULL and 0 otherwise, all
     * static): the ISA level our kernels ran (nn_isa_name), oneDNN's effective ISA, and how
     * many convolution layers of the model ran each algorithm (nn_model_conv_algos) */
    const char *cpu_isa, *onednn_isa;
    struct {
        const char *name;
        int layers;
    } conv_algos[TRAIN_CONV_ALGOS_MAX];
    int nconv_algos;
};

/* Runs every repeat of a train spec on the engine of its device (train_engine.h) and
 * fills out (may be NULL). w is used on every rank (steps) and rank 0 (epochs); hb may be
 * NULL. Device "cuda" trains on the GPU in the spec's precision; c must then move device
 * buffers (NCCL), and the strategy be naive or ddp without compression (ddp_set_device).
 * A pipeline run (spec pipeline > 1, worker/pipeline.h) trades activations over c and
 * exchanges its stage's gradients over stage_c, the communicator of the ranks holding
 * the same stage; NULL otherwise. el: an elastic run's generations (worker/elastic.h;
 * NULL: not elastic), whose communicator (el->comm, which may change during the run:
 * c is then unused) the run trains over, committing and restoring its state across
 * generations. */
int workload_train_run(const struct spec *s, struct comm *c, struct comm *stage_c,
                       struct report_writer *w, struct heartbeat *hb, struct elastic *el,
                       struct train_outcome *out, struct err *e);

/* The gradient bucket sizes (bytes, launch order) of a DDP run of s->coll.buckets_of at
 * its usual input and classes (common/model_table.h), for the collective benchmark: at
 * most cap into sizes, their count into *n. ERR_INVALID naming "buckets_of" for an
 * unknown model. */
int workload_train_model_buckets(const struct spec *s, int64_t *sizes, size_t cap, size_t *n,
                                 struct err *e);

#endif
