"""The candidate on an accelerator's machine (TPU or GPU): the logic behind
``benchmarks/accel_check.py`` and ``benchmarks/gpu_call.py`` (docs/CANDIDATE.md#accelerators).

One job a module: ``wheelsets`` (the wheels each machine gets: fetched here, installed there),
``options`` (the check's command line and its checks), ``phases`` (what one phase measures,
in a child process of its own), ``outcome`` (a child's outcome, the device-CPU differences,
the summary and its table), ``check`` (the parent: the phases in order inside the budget, the
JSON), ``deadline`` (how many seeds one program finishes before a deadline), ``rate`` (a
run's own programs timed, what the GPU call sizes its batch from), ``precompile`` (the run's
programs compiled here for a GPU this machine only describes) and ``mirror`` (the GPU call's
mirror-column probe of the reference's heads).  None imports jax at import
time: the phases' children do.
"""
