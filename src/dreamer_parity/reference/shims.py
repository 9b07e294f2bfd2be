"""The outside shims that let the unmodified reference run on jax 0.10.2 and 0.11.2.

Reference venv only (this module imports jax when a shim is applied).  The reference at
29eb964 was written for jax 0.4.26; on jax 0.10.2 (``reference.jax: 0.10.2``, the
environment of ``requirements-reference-jax010.lock``) three things stand in its way, and
each is bridged from outside the checkout, in the runner's process, before the reference
or tensorflow-probability is imported.  Nothing is applied on jax 0.4.26.  jax 0.11.2
(``reference.jax: 0.11.2``, ``requirements-reference-jax011.lock``, the GPU machine's
version) stands in the same three ways and takes the same three shims: the name is still
absent, ``jax.jit`` still takes one positional argument, the default is still True
(``tests/test_reference_shims.py`` checks each on both).

``xla_pytype_aval_mappings``
    tensorflow-probability 0.24.0 (and 0.25.0) writes
    ``jax.interpreters.xla.pytype_aval_mappings`` when its jax substrate is imported
    (``tensorflow_probability/python/internal/backend/jax/ops.py``), a name jax 0.10.2 no
    longer has: it fails with AttributeError.  The name is pointed at jax's own mapping,
    ``jax._src.core.pytype_aval_mappings`` (what ``jax.core.pytype_aval_mappings`` also
    names), so tfp's entry lands where jax reads it.  Serves the tfp imports of
    ``dreamerv3/jaxutils.py:9`` and ``dreamerv3/nets.py:5``.

``jit_keyword_shardings``
    ``dreamerv3/jaxagent.py:352-365`` passes the in and out shardings to ``jax.jit``
    positionally, in six calls (``jax.jit(fn, (pm, ps), ps, ...)``), as jax 0.4.26's
    signature allows; jax 0.10.2 takes them only as the keywords ``in_shardings`` and
    ``out_shardings``.  ``jax.jit`` is wrapped so that positional arguments after the
    function become those keywords; every other call passes through unchanged.

``threefry_partitionable_false``
    jax 0.10.2 defaults ``jax_threefry_partitionable`` to True, which changes the bits of
    ``jax.random.split`` and every draw; 0.4.26's default is False.  Set to False, the
    reference's random streams (every draw of the agent comes from the run seed through
    ``jax.random.split``, ``dreamerv3/ninjax.py:176-184``) are 0.4.26's: seed 0's first
    evaluation returns are identical on both.

:data:`SHIMS` holds each one's reason and the reference lines it serves (recorded in
``run.json``, ``environment.shims``); :data:`FOR_JAX` which apply to which environment.
"""

from __future__ import annotations

import functools

__all__ = ["SHIMS", "FOR_JAX", "apply", "threefry_partitionable", "JIT_POSITIONAL"]

#: ``{name: {"reason": one line, "serves": the reference file:line}}``, in the order applied.
SHIMS = {
    "xla_pytype_aval_mappings": {
        "reason": "tensorflow-probability writes jax.interpreters.xla.pytype_aval_mappings at "
                  "import, gone in jax 0.10.2: the name points at jax._src.core's mapping",
        "serves": "dreamerv3/jaxutils.py:9, dreamerv3/nets.py:5",
    },
    "jit_keyword_shardings": {
        "reason": "jax.jit takes shardings only as keywords in jax 0.10.2: positional in and "
                  "out shardings become in_shardings and out_shardings",
        "serves": "dreamerv3/jaxagent.py:352-365",
    },
    "threefry_partitionable_false": {
        "reason": "jax_threefry_partitionable False, 0.4.26's default (0.10.2's is True): "
                  "the random streams of jax 0.4.26",
        "serves": "dreamerv3/ninjax.py:176-184",
    },
}

#: The shims each ``reference.jax`` environment applies.
FOR_JAX = {"0.4.26": (), "0.10.2": tuple(SHIMS), "0.11.2": tuple(SHIMS)}

#: jax 0.4.26's positional parameters of ``jax.jit`` after the function, as far as the
#: reference passes them positionally.
JIT_POSITIONAL = ("in_shardings", "out_shardings")

_MISSING = object()


def _xla_pytype_aval_mappings() -> None:
    import jax.interpreters.xla as xla
    from jax._src import core

    if not hasattr(xla, "pytype_aval_mappings"):
        xla.pytype_aval_mappings = core.pytype_aval_mappings


def _jit_keyword_shardings() -> None:
    import jax

    original = jax.jit
    if getattr(original, "_dreamer_parity_shim", False):
        return

    @functools.wraps(original)
    def jit(fun=_MISSING, *args, **kwargs):
        if len(args) > len(JIT_POSITIONAL):
            raise TypeError(f"jax.jit: at most {len(JIT_POSITIONAL)} positional arguments "
                            f"after the function ({', '.join(JIT_POSITIONAL)}), got {len(args)}")
        for name, value in zip(JIT_POSITIONAL, args):
            if name in kwargs:
                raise TypeError(f"jax.jit: {name} given positionally and as a keyword")
            kwargs[name] = value
        return original(**kwargs) if fun is _MISSING else original(fun, **kwargs)

    jit._dreamer_parity_shim = True
    jit._dreamer_parity_original = original
    jax.jit = jit


def _threefry_partitionable_false() -> None:
    import jax

    jax.config.update("jax_threefry_partitionable", False)


_APPLY = {"xla_pytype_aval_mappings": _xla_pytype_aval_mappings,
          "jit_keyword_shardings": _jit_keyword_shardings,
          "threefry_partitionable_false": _threefry_partitionable_false}


def apply(jax_version: str) -> list[str]:
    """Apply the shims of environment ``jax_version`` in this process (before the
    reference and tensorflow-probability are imported).

    Args:
      jax_version: a value of ``reference.jax`` (:data:`FOR_JAX`).

    Returns:
      The names applied, in order (empty for ``0.4.26``).

    Raises:
      ValueError: an unknown environment, or one whose shims do not fit the installed jax
        (``0.10.2``'s shims on another jax, ``0.11.2``'s likewise).
    """
    if jax_version not in FOR_JAX:
        raise ValueError(f"reference.jax: unknown value {jax_version!r}; expected one of "
                         f"{tuple(FOR_JAX)}")
    names = FOR_JAX[jax_version]
    if names:
        import jax

        if jax.__version__ != jax_version:
            raise ValueError(f"reference.jax {jax_version}: its shims are for jax "
                             f"{jax_version}, but jax {jax.__version__} is installed")
    for name in names:
        _APPLY[name]()
    return list(names)


def threefry_partitionable() -> bool | None:
    """``jax.config.jax_threefry_partitionable`` of this process (jax imported here)."""
    import jax

    value = getattr(jax.config, "jax_threefry_partitionable", None)
    return None if value is None else bool(value)
