"""Support code of the benchmarks (imported as ``benchmarks.lib`` with the repository root
on ``sys.path``): ``cli`` (argument types and the validated parameters of a benchmark run),
``bench_agent`` (the reference agent's isolated update time; a script run under the
reference venv)."""
