"""dreamer_parity: a pure-JAX DreamerV3 (the candidate) compared with danijar/dreamerv3
at 29eb964 (the reference) on CartPole-v1, driven by DVC.

Sub-packages: ``candidate`` (our agent and its vmapped training loop), ``reference``
(set-up and runner of the unmodified reference), ``parity`` (per-update parity
fixtures), ``analysis`` (the pre-registered statistics, checks, metrics, plots).
Top-level modules are shared by both sides: ``params``, ``records``, ``schedule``,
``provenance``, ``cartpole_port``.
"""
