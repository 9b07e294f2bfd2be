"""Map the reference's parameter names onto the candidate's parameter tree (numpy only).

Reference names are ninjax state keys (danijar/dreamerv3 29eb964), e.g.
``agent/dyn/dyn0/kernel``, ``agent/dyn/dyn0/norm/scale``, ``agent/rew/dist/out/kernel``.
The candidate's tree is ``params[module][layer][leaf]`` with leaf ``kernel|bias|scale``
(``candidate/heads.py``, ``candidate/rssm.py``); the slow critic is ``state["slow_critic"]
[layer][leaf]``.  Rules:

* ``<layer>/norm/scale`` (RMSNorm scale, nets.py:758-763) -> ``<layer>/scale``;
* the output ``Dist`` modules (nets.py:398-443) collapse to the layer ``out``:
  ``dec/out_vector/out``, ``rew/dist/out``, ``con/dist/out``, ``actor/action/out``,
  ``critic/dist/out``, ``slowcritic/dist/out``;
* two-hot padding: the reference's reward head, critic and slow critic have ``bins + 1``
  output columns and drop the last (nets.py:437-443); the candidate has ``bins``.  The map
  drops column ``bins`` of the kernel and bias (:func:`drop_padding`); that column never
  receives a gradient, which the parity tests check.

Every reference parameter maps to exactly one candidate leaf with the same shape (after the
padding drop) and vice versa: :func:`check_coverage` raises ``KeyError``/``ValueError``
naming the first parameter that does not.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MODULES", "PADDED", "ref_to_cand", "drop_padding", "ref_tree", "flatten_tree",
           "check_coverage"]

#: Reference module name -> candidate location (state key, module key or None).
MODULES = {
    "enc": ("params", "enc"), "dyn": ("params", "dyn"), "dec": ("params", "dec"),
    "rew": ("params", "rew"), "con": ("params", "con"), "actor": ("params", "actor"),
    "critic": ("params", "critic"), "slowcritic": ("slow_critic", None),
}
#: Modules whose two-hot output layer carries the reference's padding column.
PADDED = ("rew", "critic", "slowcritic")
_DIST_LAYERS = {"dec": "out_vector", "rew": "dist", "con": "dist", "actor": "action",
                "critic": "dist", "slowcritic": "dist"}


def ref_to_cand(name: str) -> tuple:
    """Candidate path of a reference parameter name.

    Returns (state_key, module or None, layer, leaf), e.g.
    ``"agent/dyn/dyn0/norm/scale" -> ("params", "dyn", "dyn0", "scale")`` and
    ``"agent/slowcritic/dist/out/kernel" -> ("slow_critic", None, "out", "kernel")``.
    Raises KeyError (naming ``name``) for a name outside the trained modules.
    """
    parts = name.split("/")
    if len(parts) < 4 or parts[0] != "agent" or parts[1] not in MODULES:
        raise KeyError(f"namemap: {name!r} is not a parameter of a mapped module")
    mod, rest = parts[1], parts[2:]
    state_key, cmod = MODULES[mod]
    if rest[-2:] == ["norm", "scale"] and len(rest) == 3:
        layer, leaf = rest[0], "scale"
    elif len(rest) == 3 and rest[0] == _DIST_LAYERS.get(mod) and rest[1] == "out":
        layer, leaf = "out", rest[2]
    elif len(rest) == 2:
        layer, leaf = rest
    else:
        raise KeyError(f"namemap: no rule for {name!r}")
    if leaf not in ("kernel", "bias", "scale"):
        raise KeyError(f"namemap: unexpected leaf in {name!r}")
    return state_key, cmod, layer, leaf


def is_padded(name: str) -> bool:
    """True for the kernel/bias of a two-hot output layer with the padding column."""
    _, _, layer, leaf = ref_to_cand(name)
    return name.split("/")[1] in PADDED and layer == "out" and leaf in ("kernel", "bias")


def drop_padding(name: str, value):
    """Value of reference parameter ``name`` in the candidate's layout (padding dropped)."""
    value = np.asarray(value)
    return value[..., :-1] if is_padded(name) else value


def padding_of(name: str, value):
    """The reference's padding column of ``name`` (kernel [U], bias []); ValueError if none."""
    if not is_padded(name):
        raise ValueError(f"namemap: {name!r} has no padding column")
    return np.asarray(value)[..., -1]


def _put(tree, path, value):
    node = tree
    for p in path[:-1]:
        node = node.setdefault(p, {})
    node[path[-1]] = value


def ref_tree(flat: dict) -> dict:
    """Candidate-layout nested dicts from {reference name: array}.

    Returns {"params": {module: {layer: {leaf: array}}}, "slow_critic": {layer: {leaf:
    array}}} (only the state keys present in ``flat``), padding dropped.
    """
    out: dict = {}
    for name, value in flat.items():
        state_key, cmod, layer, leaf = ref_to_cand(name)
        path = [state_key] + ([cmod] if cmod else []) + [layer, leaf]
        _put(out, path, drop_padding(name, value))
    return out


def flatten_tree(tree, prefix: str = "") -> dict:
    """{"a/b/c": leaf} of a nested dict (used to name candidate leaves in reports)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten_tree(v, key))
        else:
            out[key] = v
    return out


def cand_key(name: str) -> str:
    """Flat candidate key ("params/dyn/dyn0/scale") of a reference parameter name."""
    state_key, cmod, layer, leaf = ref_to_cand(name)
    return "/".join([state_key] + ([cmod] if cmod else []) + [layer, leaf])


def check_coverage(ref_shapes: dict, cand_state: dict) -> dict:
    """Check the map is a bijection with matching shapes.

    Args:
      ref_shapes: {reference name: shape tuple} of every reference parameter of the mapped
        modules (slow critic included).
      cand_state: dict with "params" and "slow_critic" (candidate TrainState, a subset, or
        its ``jax.eval_shape``: leaves need only ``.shape``).
    Returns {reference name: candidate flat key}.
    Raises KeyError for an unmapped or missing name, ValueError for a shape mismatch or a
    candidate leaf no reference name maps to.
    """
    cand = flatten_tree({k: cand_state[k] for k in ("params", "slow_critic")})
    mapping = {}
    for name, shape in sorted(ref_shapes.items()):
        key = cand_key(name)
        if key in mapping.values():
            raise ValueError(f"namemap: two reference names map to {key}")
        if key not in cand:
            raise KeyError(f"namemap: {name!r} -> {key} not in the candidate state")
        want = tuple(shape[:-1]) + (shape[-1] - 1,) if is_padded(name) else tuple(shape)
        got = tuple(cand[key].shape)
        if got != want:
            raise ValueError(f"namemap: {name!r} -> {key}: reference shape {tuple(shape)} "
                             f"(candidate layout {want}) vs candidate {got}")
        mapping[name] = key
    extra = sorted(set(cand) - set(mapping.values()))
    if extra:
        raise ValueError(f"namemap: candidate leaves without a reference name: {extra}")
    return mapping
