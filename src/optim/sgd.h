/* sgd.h — the optimizer every method applies: SGD with (Nesterov) momentum and weight decay
 * (Jin et al. 2016 §4.2: µ = 0.9 Nesterov, λ = 1e-4), and the step-size schedule α_t.
 *
 * Update, in PyTorch's formulation (torch.optim.SGD, nesterov=True), for each element:
 *   g ← ∇ + λ·θ          (weight decay on every parameter, as torch.optim.SGD does)
 *   v ← µ·v + g           (v starts at 0, so the first step has v = g)
 *   d ← g + µ·v  (Nesterov)   or   d ← v  (heavy ball)
 *   θ ← θ − α·d
 * For constant α this is Sutskever et al.'s Nesterov momentum re-parametrised at the look-ahead
 * point; docs/methods.md gives the equivalence. */
#ifndef DSGD_SGD_H
#define DSGD_SGD_H

#include <stddef.h>

#include "config/config.h"

/* α for the (0-based) step t of a run of `iterations` steps, W = warmup:
 *   "constant":  α_0
 *   "step":      α_0 · factor^k, k = #{i : steps[i] <= t}  (steps[i] = s: from the (s+1)-th
 *                step on, i.e. after s steps are done; so every s < iterations)
 *   "cosine":    α_0 · ½(1 + cos(π max(t − W, 0)/(iterations − W)))
 * then, during warm-up (t < W), multiplied by (t+1)/W. */
double alpha_at(const experiment *e, long t);

/* One update of n parameters in place (see above). theta, grad, v: (n). Returns 1 if every
 * updated parameter is finite, 0 if any is NaN or ±Inf (the caller stops the run). */
int sgd_update(float *theta, const float *grad, float *v, size_t n, float alpha, float mu, float lambda,
               int nesterov);

#endif
