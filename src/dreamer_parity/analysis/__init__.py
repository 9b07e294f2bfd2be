"""Analysis of a round: the pre-registered statistics, checks, DVC metrics, plots, report.

Modules (one job each):

``load``         side directories -> :class:`load.Run` tables (records layout)
``published``    the published study's files -> the same tables
``stats``        S1, S2, LATE, the decision rule, Welch, bootstrap, power, concordance,
                 the round-3 reading, training-metric windows
``checks``       completion, config, provenance, schedule, episodes, flush/tail checks
``metrics_out``  ``summary.json`` (flat keys, null + reason) and the plot CSVs
``plots``        the PNG figures (matplotlib, Agg)
``report``       ``results/report.md``
``compare``      :func:`compare.analyse` and the CLI of the DVC stage
``learning_check`` the round-1 candidate at full size against the published references
                 (the gate against pair E's reference; the DVC stage ``learning_check``)
``synthetic``    consistent synthetic runs for tests and the benchmark
"""
