"""Hyper-parameters of the candidate agent (one frozen dataclass).

Defaults follow the reference's ``configs.yaml`` at danijar/dreamerv3 29eb964 (lines 91-146,
see ALGORITHM.md section 0) with the widths of the ``full`` profile
(:data:`dreamer_parity.params.PROFILES`).  The config is hashable, so it can be a static
argument of ``jax.jit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Mapping

from dreamer_parity.params import DECODES as _DECODES  # the one definition of the values
from dreamer_parity.params import PROFILES

__all__ = ["AgentConfig", "DEFAULT_LOSS_SCALES", "LOSS_TERMS", "OBSERVE_GRADS", "OPT_NORMS",
           "TWOHOT_INDEX", "AUTO_SETTINGS", "resolve"]

#: Values of ``AgentConfig.twohot_index`` (what each means: twohot.index_form).
TWOHOT_INDEX = ("auto", "window", "compare")
#: How the observe scan's gradient is taken (``AgentConfig.observe_grad``; what each means:
#: observe.py).
OBSERVE_GRADS = ("auto", "scan", "remat", "batched")
#: How the optimizer's norms are reduced (``AgentConfig.opt_norms``; optim.py).
OPT_NORMS = ("auto", "tensor", "chunked")
#: The speed settings whose ``auto`` depends on the backend: field -> (its values, the form
#: ``auto`` means on each backend, ``"*"`` standing for any other).  Rationale: ``twohot_index``
#: in twohot.index_form; ``observe_grad`` and ``opt_norms``: the CPU's and the TPU's programs
#: stay as they were, a GPU gets the forms with fewer kernels (docs/PERFORMANCE.md, "GPU").
AUTO_SETTINGS = {
    "twohot_index": (TWOHOT_INDEX, {"cpu": "window", "*": "compare"}),
    "observe_grad": (OBSERVE_GRADS, {"gpu": "batched", "*": "scan"}),
    "opt_norms": (OPT_NORMS, {"gpu": "chunked", "*": "tensor"}),
}


def resolve(field: str, setting: str = "auto", backend: str | None = None) -> str:
    """The form that ``setting`` of ``AgentConfig.<field>`` (a key of :data:`AUTO_SETTINGS`)
    means on ``backend`` (default ``jax.default_backend()``, read when called, so at trace
    time): ``setting`` itself, or for ``"auto"`` the backend's form.

    Raises:
      ValueError: ``setting`` is not one of the field's values (naming the field).
      KeyError: ``field`` is not a key of :data:`AUTO_SETTINGS`.
    """
    values, auto = AUTO_SETTINGS[field]
    if setting not in values:
        raise ValueError(f"AgentConfig.{field}: expected one of {values}, got {setting!r}")
    if setting != "auto":
        return setting
    if backend is None:
        import jax
        backend = jax.default_backend()
    return auto.get(backend, auto["*"])

#: Loss terms in the order they are summed (agent.py:393-394 sums them in dict order).
LOSS_TERMS = ("vector", "reward", "cont", "dyn", "rep", "actor", "critic", "replay_critic")

#: configs.yaml:98 (dec_mlp applies to the vector decoder key).
DEFAULT_LOSS_SCALES = MappingProxyType({
    "vector": 1.0, "reward": 1.0, "cont": 1.0, "dyn": 1.0, "rep": 0.1,
    "actor": 1.0, "critic": 1.0, "replay_critic": 0.3})


@dataclass(frozen=True)
class AgentConfig:
    """All sizes and coefficients of one candidate agent.

    Sizes: ``deter`` D, ``hidden`` (RSSM hidden width), ``stoch`` S latents of ``classes`` K,
    ``blocks`` g of the block GRU (``deter`` must be divisible by ``blocks``), ``units`` of
    every MLP layer, layer counts per module, ``bins`` of the two-hot heads (odd).
    ``decode`` selects the two-hot expectation (:mod:`dreamer_parity.candidate.twohot`).
    Optimizer and actor-critic coefficients as named in the reference config.

    Raises ValueError (one line naming the field) on an inconsistent value.
    """

    deter: int = 512
    hidden: int = 64
    stoch: int = 32
    classes: int = 4
    blocks: int = 8
    units: int = 64
    enc_layers: int = 3
    dec_layers: int = 3
    rew_layers: int = 1
    con_layers: int = 1
    actor_layers: int = 3
    critic_layers: int = 3
    img_layers: int = 2
    obs_layers: int = 1
    bins: int = 255
    obs_dim: int = 4
    num_actions: int = 2
    decode: str = "exact"
    # optimizer (configs.yaml:99)
    lr: float = 4e-5
    warmup: int = 1000
    agc: float = 0.3
    pmin: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-20
    # imagination, returns, actor-critic (configs.yaml:128-146)
    imag_length: int = 15
    horizon: float = 333.0
    return_lambda: float = 0.95
    return_lambda_replay: float = 0.95
    slow_rate: float = 0.02
    slowreg: float = 1.0
    free_nats: float = 1.0
    actent: float = 3e-4
    unimix: float = 0.01
    retnorm_rate: float = 0.01
    retnorm_limit: float = 1.0
    retnorm_lo: float = 5.0
    retnorm_hi: float = 95.0
    # output-layer scales (configs.yaml:122-129; decoder vector head uses the Dist default)
    actor_outscale: float = 0.01
    dec_outscale: float = 0.1
    loss_scales: Mapping[str, float] = field(default_factory=lambda: DEFAULT_LOSS_SCALES)
    # speed only: imagined rows per pass of the reward, continue and critic heads
    # (agent._loss); any positive value, imag_length + 1 or more meaning one pass over the
    # stacked trajectory.  Every value gives the same first update from initialisation;
    # later ones differ by float32 rounding, the heads' weight gradients being summed over
    # the groups in another order (tests).  8 keeps
    # the cold compile near that of one stacked pass (16) and runs about as fast as 1-4
    # (docs/PERFORMANCE.md, levers table)
    head_rows: int = 8
    # speed only: how the two-hot encoding finds a value's bins, "window" (table lookups,
    # cheap on XLA:CPU), "compare" (the 255-wide comparison, no gather: accelerators) or
    # "auto" (by backend, twohot.index_form); both exact: bitwise the same update on
    # XLA:CPU (tests)
    twohot_index: str = "auto"
    # speed only: how the observe scan's gradient is taken (candidate/observe.py): "scan"
    # (JAX differentiates the scan), "remat" (each step recomputed in the backward loop),
    # "batched" (a custom VJP whose backward loop carries only the latents' cotangents;
    # the weight gradients over all rows at once) or "auto" (by backend, AUTO_SETTINGS:
    # "batched" on a GPU, "scan" elsewhere).  The same function and gradient up to float32
    # rounding; the last two cut XLA:GPU's kernels per update (docs/PERFORMANCE.md, "GPU
    # kernels per update")
    observe_grad: str = "auto"
    # speed only: how the optimizer's norms are reduced (optim.py): "tensor" (one
    # reduction per tensor), "chunked" (all tensors in one pass) or "auto" ("chunked" on a
    # GPU, "tensor" elsewhere); float32 summation order only
    opt_norms: str = "auto"

    def __post_init__(self):
        for f in ("deter", "hidden", "stoch", "classes", "blocks", "units", "bins", "obs_dim",
                  "num_actions", "imag_length", "enc_layers", "dec_layers", "rew_layers",
                  "con_layers", "actor_layers", "critic_layers", "img_layers", "obs_layers",
                  "head_rows"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"AgentConfig.{f}: expected a positive integer, got {v!r}")
        if self.deter % self.blocks:
            raise ValueError(f"AgentConfig.deter: {self.deter} is not divisible by blocks={self.blocks}")
        if self.bins % 2 != 1 or self.bins < 3:
            raise ValueError(f"AgentConfig.bins: expected an odd number >= 3, got {self.bins}")
        for f in AUTO_SETTINGS:
            resolve(f, getattr(self, f), "cpu")     # refuses a value not among the field's
        if self.decode not in _DECODES:
            raise ValueError(f"AgentConfig.decode: expected one of {_DECODES}, got {self.decode!r}")
        if self.warmup < 0:
            raise ValueError(f"AgentConfig.warmup: expected >= 0, got {self.warmup}")
        scales = dict(self.loss_scales)
        if set(scales) != set(LOSS_TERMS):
            raise ValueError(f"AgentConfig.loss_scales: expected keys {LOSS_TERMS}, got {sorted(scales)}")
        # Freeze into a hashable, read-only mapping so the config stays a valid jit static arg.
        object.__setattr__(self, "loss_scales", MappingProxyType(scales))

    def __hash__(self):
        vals = tuple(tuple(sorted(getattr(self, f.name).items())) if f.name == "loss_scales"
                     else getattr(self, f.name) for f in fields(self))
        return hash(vals)

    def __eq__(self, other):
        if not isinstance(other, AgentConfig):
            return NotImplemented
        return all((dict(getattr(self, f.name)) == dict(getattr(other, f.name)))
                   if f.name == "loss_scales" else getattr(self, f.name) == getattr(other, f.name)
                   for f in fields(self))

    def resolved(self, backend: str | None = None) -> "AgentConfig":
        """A copy with each setting of :data:`AUTO_SETTINGS` resolved for ``backend``
        (:func:`resolve`): the forms a run traces, as its ``run.json`` names them."""
        return replace(self, **{f: resolve(f, getattr(self, f), backend) for f in AUTO_SETTINGS})

    @classmethod
    def for_profile(cls, profile: str, decode: str = "exact", **overrides) -> "AgentConfig":
        """Config with the widths of ``PROFILES[profile]`` ("full" | "smoke").

        Raises ValueError naming ``profile`` when it is unknown.
        """
        if profile not in PROFILES:
            raise ValueError(f"AgentConfig.for_profile: profile {profile!r} not in {sorted(PROFILES)}")
        return cls(**PROFILES[profile], decode=decode, **overrides)

    @classmethod
    def from_params(cls, params: dict) -> "AgentConfig":
        """Config from a validated params.yaml dict (keys ``profile`` and ``decode``)."""
        for k in ("profile", "decode"):
            if k not in params:
                raise ValueError(f"AgentConfig.from_params: params has no key {k!r}")
        return cls.for_profile(params["profile"], decode=params["decode"])
