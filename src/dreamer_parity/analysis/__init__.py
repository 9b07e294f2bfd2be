"""Analysis of a round: the pre-registered statistics, checks, DVC metrics, plots, report.

Modules (one job each):

``load``         side directories -> :class:`load.Run` tables (records layout)
``published``    the published study's files -> the same tables
``published_tables`` the numbers of the study's Markdown reports (``data/published/tables.csv``)
``stats``        S1, S2, LATE, the decision rule, Welch, bootstrap, power, concordance,
                 the round-3 reading, training-metric windows
``checks``       completion, config, provenance, schedule, episodes, flush/tail checks
``additions``    labelled additions, never the gate: TOST equivalence, rliable IQM / mean /
                 probability of improvement / performance profiles, collapse flags
``published_windows`` diagnosis: a side's training metrics on the study's published
                 2,000-row windows
``reference_check`` diagnosis: a reference that ran against the study's published
                 reference runs on the same evaluation grid
``metrics_out``  ``summary.json`` (flat keys, null + reason) and the plot CSVs
``plots``        the PNG figures (matplotlib, Agg)
``report``       ``results/report.md``
``gate``         the round's gate from params (``gate.*``), against a reference that ran
                 or a published one
``compare``      :func:`compare.analyse` and the CLI of the DVC stage
``windows``      each side's own S2 and training-metric windows (also against a published
                 side): ``windows.json``, ``plots/windows/*.csv``, ``windows.png``
``plots_diff``   two rounds' evaluation, S2 and window curves overlaid, offline (vl-convert);
                 rounds by name, directory or revision
"""
