"""Isolated timing of the reference agent (reference venv; used by
``benchmarks/bench_reference.py``).

Builds the stock ``dreamerv3.Agent`` with the protocol's overrides for a profile (from the
port's spaces, as the runner does), timing the constructor (parameter init, lowering and
compiling ``train`` and ``report``: ``dreamerv3/jaxagent.py:26-93``), then calls the stock
``JAXAgent.train`` on one fixed batch (the agent's own dummy batch with a stored-latent
context, ``jaxagent.py:399-405``) ``--updates`` times, blocking on the new parameters after
each call.  Prints one line ``BENCH {json}``: ``build_compile_s``, ``s_per_update``
(median), ``s_per_update_all`` (list), ``param_count``.

Command line::

    PYTHONPATH=<repo>/src:<checkout> <refvenv>/bin/python benchmarks/lib/bench_agent.py \\
        --profile full --updates 10 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from dreamer_parity.cartpole_port import make_embodied_env
from dreamer_parity.reference.runner import overrides


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args(argv)

    import jax
    import embodied
    import dreamerv3.main as refmain
    from dreamerv3 import agent as agt

    tmp = tempfile.mkdtemp(prefix="refbench-")
    os.chdir(tmp)
    config = embodied.Config(agt.Agent.configs["defaults"]).update(
        overrides(0, a.profile, 20000, logdir=tmp))
    config = config.update(replay_length=config.replay_length or config.batch_length,
                           replay_length_eval=config.replay_length_eval
                           or config.batch_length_eval)
    env = refmain.wrap_env(make_embodied_env(embodied, [0, 0], 0, None), config)
    t0 = time.time()
    agent = agt.Agent(env.obs_space, env.act_space, config)
    build = time.time() - t0
    env.close()
    data = agent._dummy_batch(agent.spaces, (config.batch_size, config.batch_length))
    carry = agent.init_train(config.batch_size)
    times = []
    for i in range(a.warmup + a.updates):
        batch = {**jax.device_put(data, agent.train_sharded),
                 "seed": agent._next_seeds(agent.train_sharded)}
        t0 = time.time()
        _, carry, _ = agent.train(batch, carry)
        jax.block_until_ready(agent.params)
        if i >= a.warmup:
            times.append(time.time() - t0)
    count = int(sum(np.prod(v.shape) for k, v in agent.params.items()
                    if "/opt/" not in k and "slowcritic" not in k and "retnorm" not in k
                    and "valnorm" not in k and "advnorm" not in k and "updater" not in k))
    print("BENCH " + json.dumps({
        "profile": a.profile, "build_compile_s": build,
        "s_per_update": statistics.median(times), "s_per_update_all": times,
        "param_count": count}), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
