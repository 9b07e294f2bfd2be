"""Support code of the benchmarks (imported as ``benchmarks.lib`` with the repository root
on ``sys.path``): ``train_step`` (a synthetic batch and the timing of one candidate train
step), ``hlo_cost`` (matmul FLOPs from optimised HLO), ``bench_agent`` (the reference
agent's isolated update time; a script run under the reference venv)."""
