# The candidate's packages on a TPU machine with its own package index; source it first:
#
#   . benchmarks/device_env.sh && PYTHONPATH=src:$PYTHONPATH python3 -m ...
#
# The machine has Python 3.11 with jax, jaxlib 0.10.2 and numpy 2.4.6 (requirements.lock's
# pins) on its PYTHONPATH, and its own package index, which PIP_INDEX_URL names (a URL or a
# file:// folder; the script refuses to start without it).  This installs,
# once per machine, into $HOME/dreamer-parity-deps (appended to PYTHONPATH, so that the jax a
# package brings along never hides the machine's):
#   - from that index, at requirements.lock's versions: flax, optax, matplotlib, six, pandas
#     and flatbuffers (jax.export's serialization, which the candidate's program store uses),
#     and what they need;
#   - from the wheels in .accel-wheels/ (`make accel-wheels` here, brought along with the
#     checkout): gymnax, gymnasium, farama-notifications, seaborn and PyYAML (the index holds
#     6.0.3, the lock pins 6.0.4), without deps (python3 -m dreamer_parity.wheels install).
# A marker named after the checksum of requirements.lock and this file skips the install on a
# machine that already has them (the candidate's compilation cache and checkpoints live in
# $HOME too, under ~/.cache/dreamer-parity: kept as long as the machine's $HOME is).
# Returns non-zero, naming what failed, when an install fails.

_dp_deps="$HOME/dreamer-parity-deps"
_dp_mark="$_dp_deps/.installed-$(cat requirements.lock benchmarks/device_env.sh | cksum | cut -d' ' -f1)"
_dp_pins() {  # NAME... -> NAME==VERSION from requirements.lock (case-insensitive)
  for n in "$@"; do
    grep -i -E "^${n}==" requirements.lock || { echo "device_env: requirements.lock pins no $n" >&2; return 1; }
  done
}
if [ ! -f "$_dp_mark" ]; then
  [ -n "${PIP_INDEX_URL:-}" ] || { echo "device_env: PIP_INDEX_URL: unset (the machine's package index)" >&2; return 1; }
  _dp_t0=$(date +%s)
  mkdir -p "$_dp_deps"
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
      --disable-pip-version-check --no-compile --index-url "$PIP_INDEX_URL" \
      --target "$_dp_deps" $(_dp_pins flax optax matplotlib six pandas flatbuffers) \
    || { echo "device_env: install from the machine's index failed" >&2; return 1; }
  ls .accel-wheels/*.whl >/dev/null 2>&1 \
    || { echo "device_env: no .accel-wheels/*.whl: run 'make accel-wheels' and bring .accel-wheels along" >&2; return 1; }
  PYTHONPATH=src python3 -m dreamer_parity.wheels install --target "$_dp_deps" .accel-wheels/*.whl \
    || { echo "device_env: install of .accel-wheels failed" >&2; return 1; }
  touch "$_dp_mark"
  echo "device_env: installed into \$HOME/dreamer-parity-deps in $(( $(date +%s) - _dp_t0 )) s" >&2
else
  echo "device_env: packages already installed on this machine" >&2
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$_dp_deps"
unset _dp_t0 _dp_mark
