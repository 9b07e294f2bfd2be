"""The reference optimizer step in float64 numpy, for decomposing parity differences.

One update of the chain AGC -> RMS scaling -> momentum -> scale(-lr) -> warm-up factor of
danijar/dreamerv3 29eb964 (jaxutils.py:431-457, 508-527, 660-713; ALGORITHM.md section 13),
per tensor, from (param, grad, nu, mu, count).  XLA:CPU flushes float32 denormals to zero,
so a second moment ``0.999 nu + 0.001 g^2`` below the smallest normal float32 is set to 0
here as well (the update is then ``g / eps``).  Used by the parity tests to check that the
candidate's optimizer applied to the candidate's own gradients gives the candidate's
moments and parameters, so that the remaining moment/parameter differences from the
reference are explained by the (separately checked) gradient differences.
"""

from __future__ import annotations

import numpy as np

__all__ = ["step"]

TINY32 = float(np.finfo(np.float32).tiny)


def step(param, grad, nu, mu, count, lr, warmup=0, agc=0.3, pmin=1e-3, beta1=0.9,
         beta2=0.999, eps=1e-20):
    """One update of one tensor; returns (new_param, new_nu, new_mu) as float64 arrays.

    ``count`` is the number of previous updates (0 for the first); arrays of equal shape.
    """
    p = np.asarray(param, np.float64)
    g = np.asarray(grad, np.float64)
    unorm = np.linalg.norm(g.ravel())
    pnorm = np.linalg.norm(p.ravel())
    u = g / max(1.0, unorm / (agc * max(pmin, pnorm)))
    t = count + 1
    nu = beta2 * np.asarray(nu, np.float64) + (1 - beta2) * u * u
    nu = np.where(np.abs(nu) < TINY32, 0.0, nu)
    u = u / (np.sqrt(nu / (1 - beta2 ** t)) + eps)
    mu = beta1 * np.asarray(mu, np.float64) + (1 - beta1) * u
    u = mu / (1 - beta1 ** t)
    scale = 1.0 if warmup <= 0 else min(max(count / warmup, 0.0), 1.0)
    return p - lr * scale * u, nu, mu
