# Two entry points (README): `make run` (the round in params.yaml) and `make test`.
# Both create .venv from requirements.lock on first use and are idempotent.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.lock | cut -d' ' -f1)

export DVC_NO_ANALYTICS := 1
export JAX_PLATFORMS ?= cpu

.PHONY: plots-template setup venv round head reference-setup reference-setup-jax010 reference-setup-jax011 run smoke test bench bench-ratio clean-venv parity-fixtures params-check round-tags accel-wheels gpu-wheels gpu-programs tpu-reference gpu-reference

# The venv, then a git tag per kept round of docs/rounds/index.yaml whose commit the clone holds
# (tags are not cloned with the branch), so that `dvc metrics diff <round> <round>` takes round
# names in every clone; a tag that points elsewhere is left, with its one line (make round-tags
# FORCE=1 moves it).
venv: $(STAMP)
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  $(PY) -m dreamer_parity.rounds tag --available >/dev/null || true; fi

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	@rm -f $(VENV)/.installed-*; touch $@

reference-setup: $(STAMP)
	$(PY) -m dreamer_parity.reference.setup

# The reference's second environment, jax 0.10.2 (reference.jax: 0.10.2): refvenv-jax010 from
# requirements-reference-jax010.lock beside the default one (about a minute from PyPI).
reference-setup-jax010: $(STAMP)
	$(PY) -m dreamer_parity.reference.setup --jax 0.10.2

# The third, jax 0.11.2 (reference.jax: 0.11.2, the GPU machine's version): refvenv-jax011 from
# requirements-reference-jax011.lock, made with Python 3.12 (PATH, pyenv or
# $DREAMER_PARITY_PYTHON312).
reference-setup-jax011: $(STAMP)
	$(PY) -m dreamer_parity.reference.setup --jax 0.11.2

# params.yaml validated first, with the one line every entry point prints (exit 2).
params-check:
	@$(PY) -m dreamer_parity.params check --file params.yaml >/dev/null

# The reference set-up is needed only when params.yaml runs a reference seed here
# (reference.source: run; docs/SIDES.md); a published reference side comes with the repository.
# The environment is the one reference.jax names (0.4.26: reference-setup; 0.10.2, 0.11.2:
# that one too).
setup: venv
	@if [ "$$($(PY) -m dreamer_parity.sides runs-here reference)" = yes ]; \
	  then $(MAKE) --no-print-directory reference-setup; \
	  J="$$($(PY) -m dreamer_parity.params show --key reference | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["jax"])')"; \
	  if [ "$$J" != 0.4.26 ]; then $(PY) -m dreamer_parity.reference.setup --jax "$$J"; fi; fi

# Stage commands call `python` from PATH (dvc.yaml, README.md): .venv/bin goes first.
DVC := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc

# `make run` restores before it recomputes: what the store (dvc remote) holds for unchanged
# inputs is pulled, and only stages whose inputs changed run.  `make run FORCE=1` reruns
# every stage of the round (dvc repro -f).
ifeq ($(FORCE),1)
REPRO_FLAGS := -f
else
REPRO_FLAGS := --pull
endif

run: venv params-check setup
	$(DVC) repro $(REPRO_FLAGS)

# The smoke round (both sides run at tiny widths: needs the reference set-up) as an
# experiment in the workspace; -f replaces an earlier `smoke` experiment.  Afterwards the
# workspace holds the smoke round: `make head` returns to HEAD.
smoke: venv params-check reference-setup
	$(DVC) exp run -f -n smoke $$($(PY) -m dreamer_parity.params smoke-overrides)
	$(DVC) metrics diff HEAD smoke

# A kept round of docs/rounds/index.yaml in the workspace: its params.yaml, read through the
# migration of older parameter files (dreamer_parity.params.migrate), then `dvc repro`
# recomputes it from its kept runs (no training).  `make head` returns to the committed
# round: params.yaml, dvc.lock and the tracked files of metrics/ and results/ from HEAD, what
# a round left there that HEAD does not have removed, then `dvc pull`.
round: venv
	@test -n "$(ROUND)" || { echo "error: ROUND: name a kept round (python -m dreamer_parity.rounds list)" >&2; exit 2; }
	$(PY) -m dreamer_parity.rounds switch $(ROUND)
	$(DVC) repro

head: venv
	$(PY) -m dreamer_parity.rounds back
	$(DVC) pull

# The suite runs without the reference too: tests that need it skip with the set-up command.
# The reference environments are set up first (jax 0.4.26, 0.10.2, 0.11.2); one that cannot
# be made (no network, no python3.11 or python3.12) leaves its tests skipped, each saying why.
test: venv
	-$(PY) -m dreamer_parity.reference.setup
	-$(PY) -m dreamer_parity.reference.setup --jax 0.10.2
	-$(PY) -m dreamer_parity.reference.setup --jax 0.11.2
	$(PY) -m pytest -q tests

bench: venv reference-setup
	$(PY) benchmarks/bench_candidate.py
	$(PY) benchmarks/bench_reference.py
	$(PY) benchmarks/bench_analysis.py

# The 3x speed target judged by the median of 3 alternated candidate/reference pairings
# (about 15-20 minutes of both cores once the caches are warm; needs reference-setup).
bench-ratio: venv reference-setup
	$(PY) benchmarks/pair_ratio.py --pairs 3

# DVC's HTML template with Vega inline (.dvc/plots/offline.html, plots.html_template in
# .dvc/config): `dvc plots show` and `dvc plots diff` render without network.  Rebuilt from
# the npm packages at these versions (needs npm and the npm registry).
VEGA_PACKAGES := vega@5.33.1 vega-lite@5.23.0 vega-embed@6.29.0
plots-template:
	@d=$$(mktemp -d) && (cd $$d && npm pack -q $(VEGA_PACKAGES) >/dev/null) && \
	  python3 tools/vega_template.py $$d; s=$$?; rm -rf $$d; exit $$s

# A git tag per kept round of docs/rounds/index.yaml (FORCE=1 moves a tag that differs),
# so that `dvc metrics diff <round> <round>` takes round names (docs/rounds/README.md).
round-tags: venv
	$(PY) -m dreamer_parity.rounds tag $(if $(FORCE),--force)

# The wheels an accelerator machine lacks and the TPU machine's index does not hold (gymnax,
# what it needs, seaborn; about 2.1 MiB) into the git-ignored .accel-wheels/, to be copied
# there with the working tree for benchmarks/device_env.sh and benchmarks/accel_check.py.
accel-wheels: venv
	$(PY) benchmarks/accel_check.py --download-wheels

# The wheels the GPU machine (provenance.VERSION_SETS gpu-h200: Python 3.12, jax 0.11.2) lacks,
# for CPython 3.12: the lines of requirements-gpu-cpu312.lock marked "# shipped" (gymnax and
# what it imports) and this project's own wheel, into the git-ignored .gpu-wheels/; prints
# their total size.  benchmarks/gpu_call.py installs them there (docs/CANDIDATE.md#gpu).
gpu-wheels: venv
	$(PY) benchmarks/accel_check.py --download-wheels --versions gpu-h200

# What the reference needs on a TPU machine, into the git-ignored .tpu-ref/, to be copied
# there with the working tree: the wheels that machine lacks for reference.jax 0.10.2 and the
# export of the reference checkout (docs/REFERENCE_RUN.md, "On the TPU machine").
tpu-reference: venv
	$(PY) -m dreamer_parity.device_reference --prepare .tpu-ref

# The run's programs compiled here for the GPU machine's H200, without a GPU
# (dreamer_parity.accel.precompile): .gpu-programs/ with the GPU call's smoke seed and the
# round's batches of 8, 16, 24 and 32 seeds (23 MiB in all; about 20 minutes of two cores),
# copied there with .gpu-wheels/; benchmarks/gpu_call.py loads them instead of compiling.
# The compiler is jax 0.11.2's CUDA plugin, in a Python 3.12 environment of its own
# (.venv-gpu-compile/: requirements-gpu-cpu312.lock and the plugin, about 400 MB).
GPU_JAX = $(shell sed -n 's/^jax==//p' requirements-gpu-cpu312.lock)
.venv-gpu-compile/.complete: requirements-gpu-cpu312.lock | venv
	rm -rf .venv-gpu-compile
	$$($(PY) -c 'from dreamer_parity.reference.setup import find_python; print(find_python("3.12") or "python3.12")') -m venv .venv-gpu-compile
	.venv-gpu-compile/bin/python -m pip install -q --no-deps --only-binary=:all: \
	  --disable-pip-version-check -r requirements-gpu-cpu312.lock \
	  jax-cuda13-plugin==$(GPU_JAX) jax-cuda13-pjrt==$(GPU_JAX)
	touch $@

gpu-programs: .venv-gpu-compile/.complete
	JAX_PLATFORMS=cpu PYTHONPATH=src .venv-gpu-compile/bin/python -m dreamer_parity.accel.precompile --out .gpu-programs --smoke
	JAX_PLATFORMS=cpu PYTHONPATH=src .venv-gpu-compile/bin/python -m dreamer_parity.accel.precompile --out .gpu-programs --seeds 8 16 24 32

# The same for the GPU machine (an NVIDIA H200, Python 3.12, jax 0.11.2): .gpu-ref/ with the
# CPython 3.12 wheels of reference.jax 0.11.2 that its image lacks, and the export.
gpu-reference: venv
	$(PY) -m dreamer_parity.device_reference --machine gpu-h200 --prepare .gpu-ref

clean-venv:
	rm -rf $(VENV)

# Regenerate tests/fixtures/parity/*.npz from the reference (about 10 min; the tests never need it).
parity-fixtures: reference-setup
	$(PY) tests/parity/regen.py
