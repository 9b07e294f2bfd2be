"""dreamer_parity: a pure-JAX DreamerV3 (the candidate) compared with danijar/dreamerv3
at 29eb964 (the reference) on CartPole-v1, driven by DVC.

Sub-packages: ``candidate`` (our agent and its training loop, all seeds in one jitted
program), ``reference`` (set-up and runner of the unmodified reference), ``analysis`` (the
pre-registered statistics, checks, metrics, plots).  Top-level modules are shared by both
sides: ``params``, ``records``, ``schedule``, ``provenance``, ``cartpole_port``.  What only
the tests and benchmarks use lives beside them (``tests/parity``, ``tests/synthetic.py``,
``benchmarks/lib``).

Docstrings cite the study's documents by name (``PROTOCOL.md``, ``ALGORITHM.md``,
``RUNNING.md``, its pre-registrations ``PREREG2.md`` and ``PREREG3.md``, ``DIAGNOSIS.txt``);
they are not shipped here (README.md, Documents), and the reference's files as
``file.py:line`` at danijar/dreamerv3 29eb964.
"""
