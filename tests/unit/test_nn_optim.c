/* Unit tests for worker/nn/optim: SGD (momentum, dampening, Nesterov, weight decay), Adam and
 * AdamW against PyTorch 1.13, slice updates, validation, and the learning-rate schedules.
 *
 * The expected values were produced once with Debian's python3-torch 1.13.1:
 *
 *   p0 = [0.5, -1.0, 2.0, 0.125, -0.75]
 *   grads = [[0.1, -0.2, 0.3, -0.4, 0.05], [-0.3, 0.1, 0.2, 0.0, -0.6],
 *            [0.25, 0.25, -0.1, 0.8, 0.3]]
 *   p = torch.tensor(p0, requires_grad=True); opt = torch.optim.X([p], ...)
 *   for g in grads: opt.zero_grad(); p.grad = torch.tensor(g); opt.step(); print(p)
 *
 * and for the schedules, the lr of an SGD(lr=0.1) before each of 12 scheduler.step()s with
 * torch.optim.lr_scheduler LinearLR, StepLR, CosineAnnealingLR and SequentialLR. Printed
 * with 9 (params) or 12 (lrs) significant digits. */
#include <math.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/nn/optim.h"

#define NP 5

static const float p0[NP] = {0.5f, -1.0f, 2.0f, 0.125f, -0.75f};
static const float grads[3][NP] = {{0.1f, -0.2f, 0.3f, -0.4f, 0.05f},
                                   {-0.3f, 0.1f, 0.2f, 0.0f, -0.6f},
                                   {0.25f, 0.25f, -0.1f, 0.8f, 0.3f}};

/* Runs three steps of cfg and compares every parameter after every step with PyTorch's.
 * Tolerance: PyTorch and we do the same float operations in the same order, but the
 * compiler may contract a*b+c into one FMA where PyTorch's kernels do not (or the other
 * way round), which moves the last bit or two: 4 ulps of values near 1 is 5e-7. */
static int optim_check(const struct nn_optim_cfg *cfg, const float want[3][NP])
{
    struct nn_optim o;
    struct err e;
    float p[NP];
    memcpy(p, p0, sizeof p);
    if (nn_optim_init(&o, cfg, NP, &e))
        return -1;
    int bad = 0;
    for (int s = 0; s < 3; s++) {
        nn_optim_step(&o, p, grads[s], cfg->lr);
        for (int i = 0; i < NP; i++)
            if (fabsf(p[i] - want[s][i]) > 5e-7f * fmaxf(1.0f, fabsf(want[s][i]))) {
                fprintf(stderr, "    step %d param %d: %.9g, PyTorch %.9g\n", s + 1, i, p[i],
                        want[s][i]);
                bad = 1;
            }
    }
    nn_optim_cleanup(&o);
    return bad ? -1 : 0;
}

static void test_optim_sgd_plain(void)
{
    static const float want[3][NP] = {
        {0.49000001f, -0.980000019f, 1.97000003f, 0.165000007f, -0.754999995f},
        {0.520000041f, -0.99000001f, 1.95000005f, 0.165000007f, -0.694999993f},
        {0.495000035f, -1.01499999f, 1.96000004f, 0.0850000009f, -0.725000024f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_SGD);
    c.lr = 0.1;
    T_CHECK(optim_check(&c, want) == 0);
}

static void test_optim_sgd_momentum_wd(void)
{
    static const float want[3][NP] = {
        {0.489499986f, -0.978999972f, 1.96800005f, 0.164875001f, -0.75424999f},
        {0.509560466f, -0.969120979f, 1.91723204f, 0.200597629f, -0.697320759f},
        {0.502105355f, -0.984260738f, 1.87962365f, 0.152547389f, -0.675387084f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    T_CHECK(optim_check(&c, want) == 0);
}

/* dampening only applies after the first step (PyTorch clones the first gradient) */
static void test_optim_sgd_dampening(void)
{
    static const float want[3][NP] = {
        {0.49000001f, -0.980000019f, 1.97000003f, 0.165000007f, -0.754999995f},
        {0.502000034f, -0.969000041f, 1.92900002f, 0.201000005f, -0.717499971f},
        {0.495300025f, -0.976600051f, 1.89910007f, 0.177400008f, -0.704750001f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    c.dampening = 0.3;
    T_CHECK(optim_check(&c, want) == 0);
}

static void test_optim_sgd_nesterov(void)
{
    static const float want[3][NP] = {
        {0.480049998f, -0.960099995f, 1.93920004f, 0.200762495f, -0.758074999f},
        {0.527632892f, -0.960265815f, 1.8715955f, 0.232679799f, -0.646077156f},
        {0.495387048f, -0.997954607f, 1.84594071f, 0.109143965f, -0.655733824f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    c.nesterov = 1;
    c.weight_decay = 0.01;
    T_CHECK(optim_check(&c, want) == 0);
}

static void test_optim_adam(void)
{
    static const float want[3][NP] = {
        {0.49000001f, -0.99000001f, 1.99000001f, 0.135000005f, -0.75999999f},
        {0.49494192f, -0.987336636f, 1.98029649f, 0.141700596f, -0.75314045f},
        {0.493974924f, -0.99072814f, 1.97477758f, 0.138300255f, -0.751245141f},
    };
    static const float want_wd[3][NP] = {
        {0.49000001f, -0.99000001f, 1.99000001f, 0.135000005f, -0.74000001f},
        {0.492952466f, -0.983324289f, 1.98012078f, 0.141437307f, -0.732315481f},
        {0.489976048f, -0.981604397f, 1.97160411f, 0.137806624f, -0.728722095f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_ADAM);
    T_CHECK(c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 0);
    c.lr = 0.01;
    T_CHECK(optim_check(&c, want) == 0);
    c.weight_decay = 0.1;
    T_CHECK(optim_check(&c, want_wd) == 0);
}

static void test_optim_adamw(void)
{
    static const float want[3][NP] = {
        {0.489950001f, -0.989899993f, 1.98979998f, 0.134987503f, -0.759925008f},
        {0.494842917f, -0.987137616f, 1.9798975f, 0.141674578f, -0.752989471f},
        {0.493826419f, -0.990430415f, 1.97418058f, 0.138260067f, -0.751018822f},
    };
    static const float want2[3][NP] = {
        {0.487500101f, -0.985000074f, 1.98000002f, 0.134374976f, -0.756249845f},
        {0.490517557f, -0.977963686f, 1.96050286f, 0.140004322f, -0.745178998f},
        {0.486763984f, -0.977344632f, 1.9459058f, 0.134999871f, -0.73989284f},
    };
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_ADAMW);
    T_CHECK(c.weight_decay == 0.01);
    c.lr = 0.01;
    T_CHECK(optim_check(&c, want) == 0);
    c.weight_decay = 0.5;
    c.beta1 = 0.8;
    c.beta2 = 0.99;
    c.eps = 1e-6;
    T_CHECK(optim_check(&c, want2) == 0);
}

/* A step applied slice by slice (as ZeRO shards or DDP buckets do) equals the whole. */
static void test_optim_slices(void)
{
    struct err e;
    for (int type = NN_OPTIM_SGD; type <= NN_OPTIM_ADAMW; type++) {
        struct nn_optim_cfg c = nn_optim_defaults((enum nn_optim_type)type);
        c.momentum = 0.9;
        struct nn_optim whole, parts;
        float a[NP], b[NP];
        memcpy(a, p0, sizeof a);
        memcpy(b, p0, sizeof b);
        T_OK(nn_optim_init(&whole, &c, NP, &e));
        T_OK(nn_optim_init(&parts, &c, NP, &e));
        for (int s = 0; s < 3; s++) {
            nn_optim_step(&whole, a, grads[s], 0.05);
            nn_optim_begin_step(&parts);
            nn_optim_update(&parts, b, grads[s], 3, 2, 0.05);
            nn_optim_update(&parts, b, grads[s], 0, 3, 0.05);
            nn_optim_update(&parts, b, grads[s], 4, 9, 0.05); /* out of range: ignored */
        }
        int same = memcmp(a, b, sizeof a) == 0;
        nn_optim_cleanup(&whole);
        nn_optim_cleanup(&parts);
        T_CHECK_MSG(same, "optimizer %d", type);
    }
}

static void test_optim_validation(void)
{
    struct err e;
    struct nn_optim o;
    struct nn_optim_cfg c = nn_optim_defaults(NN_OPTIM_SGD);
    c.nesterov = 1; /* without momentum */
    T_CHECK(nn_optim_init(&o, &c, 4, &e) != 0);
    T_EQ_STR(e.field, "nesterov");
    c = nn_optim_defaults(NN_OPTIM_ADAM);
    c.beta2 = 1.0;
    T_CHECK(nn_optim_init(&o, &c, 4, &e) != 0);
    T_EQ_STR(e.field, "betas");
    c = nn_optim_defaults(NN_OPTIM_SGD);
    c.lr = -1;
    T_CHECK(nn_optim_init(&o, &c, 4, &e) != 0);
    T_EQ_STR(e.field, "lr");
    c.lr = NAN;
    T_CHECK(nn_optim_init(&o, &c, 4, &e) != 0);
    T_EQ_INT(nn_optim_parse_type("adamw"), NN_OPTIM_ADAMW);
    T_EQ_INT(nn_optim_parse_type("rmsprop"), -1);
    /* plain SGD keeps no state at all */
    c = nn_optim_defaults(NN_OPTIM_SGD);
    T_OK(nn_optim_init(&o, &c, 4, &e));
    T_CHECK(o.state.data == NULL);
    nn_optim_cleanup(&o);
}

static int lr_check(const struct nn_lr_schedule *s, const double want[12])
{
    struct err e;
    if (nn_lr_validate(s, &e))
        return -1;
    int bad = 0;
    for (long t = 0; t < 12; t++) {
        double got = nn_lr_at(s, t);
        if (fabs(got - want[t]) > 1e-11) { /* PyTorch's chained forms drift a few ulps */
            fprintf(stderr, "    t %ld: %.12g, PyTorch %.12g\n", t, got, want[t]);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

static void test_optim_lr_schedules(void)
{
    struct nn_lr_schedule s = {.base_lr = 0.1, .warmup_steps = 4, .warmup_start_factor = 0.25};
    static const double warm[12] = {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1,
                                    0.1,   0.1,     0.1,    0.1,     0.1, 0.1};
    T_CHECK(lr_check(&s, warm) == 0);
    s = (struct nn_lr_schedule){
        .base_lr = 0.1, .decay = NN_LR_STEP, .step_size = 3, .gamma = 0.5};
    static const double step[12] = {0.1,   0.1,   0.1,   0.05,   0.05,   0.05,
                                    0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125};
    T_CHECK(lr_check(&s, step) == 0);
    s = (struct nn_lr_schedule){
        .base_lr = 0.1, .decay = NN_LR_COSINE, .t_max = 10, .eta_min = 0.001};
    static const double cosine[12] = {
        0.1,    0.0975772975566, 0.0905463412216, 0.0795953699885, 0.0657963412216,
        0.0505, 0.0352036587784, 0.0214046300115, 0.0104536587784, 0.00342270244339,
        0.001,  0.00342270244339};
    T_CHECK(lr_check(&s, cosine) == 0);
    s = (struct nn_lr_schedule){.base_lr = 0.1,
                                .warmup_steps = 3,
                                .warmup_start_factor = 1.0 / 3,
                                .decay = NN_LR_COSINE,
                                .t_max = 8};
    static const double warm_cos[12] = {
        0.0333333333333, 0.0555555555556, 0.0777777777778,  0.1,
        0.0961939766256, 0.0853553390593, 0.0691341716183,  0.05,
        0.0308658283817, 0.0146446609407, 0.00380602337444, 0};
    T_CHECK(lr_check(&s, warm_cos) == 0);
    s = (struct nn_lr_schedule){.base_lr = 0.1,
                                .warmup_steps = 2,
                                .warmup_start_factor = 0.5,
                                .decay = NN_LR_STEP,
                                .step_size = 4,
                                .gamma = 0.1};
    static const double warm_step[12] = {0.05, 0.075, 0.1,  0.1,  0.1,   0.1,
                                         0.01, 0.01,  0.01, 0.01, 0.001, 0.001};
    T_CHECK(lr_check(&s, warm_step) == 0);
    struct err e;
    s = (struct nn_lr_schedule){.base_lr = 0.1, .decay = NN_LR_COSINE};
    T_CHECK(nn_lr_validate(&s, &e) != 0);
    T_EQ_STR(e.field, "t_max");
    s = (struct nn_lr_schedule){.base_lr = 0.1, .warmup_steps = 5};
    T_CHECK(nn_lr_validate(&s, &e) != 0);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_optim_sgd_plain);
    TEST_RUN(test_optim_sgd_momentum_wd);
    TEST_RUN(test_optim_sgd_dampening);
    TEST_RUN(test_optim_sgd_nesterov);
    TEST_RUN(test_optim_adam);
    TEST_RUN(test_optim_adamw);
    TEST_RUN(test_optim_slices);
    TEST_RUN(test_optim_validation);
    TEST_RUN(test_optim_lr_schedules);
    return test_end();
}
