/* xent: softmax cross-entropy, mean over the batch (PyTorch's F.cross_entropy with its
 * default reduction), and the number of correct top-1 predictions.
 *
 * Decision: softmax in double through log-sum-exp, so large logits neither overflow nor
 * lose the loss's low digits; only the first n_valid rows count, so an evaluation batch
 * padded to the prepared batch size reports the right mean and accuracy. */
#include <math.h>
#include <string.h>

#include "worker/nn/layers.h"

int nn_xent_forward(float *probs, double *loss, int *correct, const float *logits,
                    const int32_t *labels, int n, int k, int n_valid, struct err *e)
{
    if (n_valid < 0 || n_valid > n)
        return err_set(e, ERR_INVALID, "n_valid", "xent: %d valid rows of %d", n_valid, n);
    for (int b = 0; b < n_valid; b++)
        if (labels[b] < 0 || labels[b] >= k)
            return err_set(e, ERR_INVALID, "label", "label %d of row %d is outside [0, %d)",
                           (int)labels[b], b, k);
    double total = 0;
    int right = 0;
    for (int b = 0; b < n; b++) {
        const float *z = logits + (size_t)b * k;
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[arg])
                arg = j;
        double sum = 0;
        for (int j = 0; j < k; j++)
            sum += exp((double)z[j] - z[arg]);
        for (int j = 0; j < k; j++)
            probs[(size_t)b * k + j] = (float)(exp((double)z[j] - z[arg]) / sum);
        if (b < n_valid) {
            total += log(sum) + z[arg] - z[labels[b]];
            right += arg == labels[b];
        }
    }
    *loss = n_valid > 0 ? total / n_valid : 0;
    *correct = right;
    return 0;
}

void nn_xent_backward(float *dlogits, const float *probs, const int32_t *labels, int n, int k,
                      int n_valid)
{
    memset(dlogits, 0, (size_t)n * k * sizeof *dlogits);
    for (int b = 0; b < n_valid; b++)
        for (int j = 0; j < k; j++)
            dlogits[(size_t)b * k + j] = (probs[(size_t)b * k + j] -
                                          (j == labels[b] ? 1.0f : 0.0f)) /
                                         (float)n_valid;
}
