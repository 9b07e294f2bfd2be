"""Parity of the candidate's train step with the reference's (imported as ``parity`` from
the tests): ``make_fixtures`` records the reference (reference venv), ``regen`` launches it
(``make parity-fixtures``), ``namemap``, ``harness``, ``compare``, ``decode`` and ``optref``
replay and check the recorded steps on the candidate (``tests/test_parity.py``)."""
