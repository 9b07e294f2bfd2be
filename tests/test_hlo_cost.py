"""The matmul FLOP counter (dreamer_parity.hlo_cost) on a known program."""

import jax
import jax.numpy as jnp

from dreamer_parity.hlo_cost import matmul_flops


def test_hlo_matmul_flops_counts_loop_trips():
    def f(x, w, w2):
        def body(i, x):
            x = jnp.tanh(x @ w)
            return jax.lax.fori_loop(0, 3, lambda j, y: jnp.tanh(y @ w2), x)
        return jax.lax.fori_loop(0, 7, body, x) @ jnp.ones((16, 5))

    x, w = jnp.ones((8, 16)), jnp.ones((16, 16))
    hlo = jax.jit(f).lower(x, w, w * 0.1).compile().as_text()
    per_dot = 2 * 8 * 16 * 16
    assert matmul_flops(hlo) == 7 * per_dot + 7 * 3 * per_dot + 2 * 8 * 16 * 5
