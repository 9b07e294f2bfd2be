"""What runs and compiles the candidate agent (:mod:`dreamer_parity.candidate`).

Training (the ``candidate`` stage):

* :mod:`.run`        the command line: all seeds of a params file, outputs per seed
* :mod:`.loop`       the synchronous training loop, all seeds in one jitted program
* :mod:`.env`        gymnax CartPole-v1 with the protocol's row semantics
* :mod:`.replay`     on-device replay with the reference's item and online-queue rules
* :mod:`.evaluate`   evaluation episodes at each evaluation point
* :mod:`.recording`  records, episodes and S2 built on the host
* :mod:`.checkpoint` resumable checkpoints in the per-user cache

Compilation:

* :mod:`.program_store` the run's programs exported once and reloaded
* :mod:`.executables` the run's programs compiled beforehand (for a GPU), loaded
* :mod:`.seedmesh`   one host device per seed on CPU
* :mod:`.seedmap`    vmap over seeds, batched or one seed at a time
"""
