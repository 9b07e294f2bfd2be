"""The candidate: a pure-JAX DreamerV3 following danijar/dreamerv3 at 29eb964.

One module per part of the algorithm (section numbers of ALGORITHM.md):

* :mod:`.config`   hyper-parameters (configs.yaml; section 0)
* :mod:`.nets`     layers: Linear + RMSNorm + SiLU, block linear, init, symlog (section 2)
* :mod:`.dists`    categorical with unimix, straight-through samples, KL, Bernoulli
* :mod:`.twohot`   the symexp two-hot distribution of reward and critic (section 6)
* :mod:`.rssm`     the block-GRU RSSM, its prior/posterior and KL losses (section 5)
* :mod:`.heads`    encoder, decoder, reward, continue, actor and critic heads (sections 3-4, 7, 10)
* :mod:`.returns`  lambda returns and the return normaliser (sections 10-11)
* :mod:`.optim`    the reference optimizer as an optax chain (section 13)
* :mod:`.agent`    init, policy step, losses and the train step (sections 8-12, 14)

The machinery that runs and compiles the agent (training loop, env rows, replay,
evaluation, checkpoints, the command line, program store, seed devices, FLOP counter,
benchmark helpers) is the subpackage :mod:`.runtime`.
"""
