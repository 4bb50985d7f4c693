/* add: the residual connection, out = a + b (then ReLU for ResNet's block end).
 *
 * Decision: one implementation for both paths. The operation is elementwise, so it runs on
 * the physical buffers whatever layout the two inputs share (padding lanes hold zeros and
 * stay zero); the model makes sure both inputs have the same layout. A oneDNN binary
 * primitive would do the same single pass. */
#include "worker/nn/layers.h"

void nn_add_forward(float *out, const float *a, const float *b, size_t n, int relu)
{
    if (relu) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float v = a[i] + b[i];
            out[i] = v > 0 ? v : 0;
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
    }
}

void nn_add_backward(float *da, float *db, const float *dout, const float *out, size_t n,
                     int relu)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = !relu || out[i] > 0 ? dout[i] : 0;
        if (da)
            da[i] = g;
        if (db)
            db[i] = g;
    }
}
