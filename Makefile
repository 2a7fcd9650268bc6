# `make run` / `make test` set up .venv/ themselves (idempotent: the install
# step re-runs only when requirements.txt or setup.py changed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
RUN_ARGS ?=
# Test processes (pytest-xdist): one per core by default.
TEST_JOBS ?= auto
# `make check`'s test processes: one. A second would start a second TFF
# runtime and import TensorFlow again, which costs more than it gains on two
# minutes of tests: 153 s with one, 225 s with two (a 2-core machine running
# other jobs).
CHECK_JOBS ?= 1
UV_PIN := uv==0.13.9
UV_INSTALL := $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --compile-bytecode

.PHONY: install run test check lint format notebook notebook-run tensorboard clean

install: $(STAMP)

$(STAMP): requirements.txt setup.py
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || { echo "error: TFF 0.87 needs Python 3.11; set PYTHON=/path/to/python3.11" >&2; exit 2; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	# uv downloads, installs and byte-compiles in parallel; pip stays in the
	# venv for the user.
	$(VENV)/bin/python -m pip install -q $(UV_PIN)
	# Everything but TFF, with jax/jaxlib at 0.4.13 (TFF's pin 0.4.14 is gone).
	grep -v '^tensorflow-federated' requirements.txt > $(VENV)/requirements-no-tff.txt
	$(UV_INSTALL) -r $(VENV)/requirements-no-tff.txt
	$(UV_INSTALL) --no-deps $$(grep '^tensorflow-federated' requirements.txt)
	$(UV_INSTALL) --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: install
	$(VENV)/bin/python run_experiment.py --algo=fedprox $(RUN_ARGS)

# Lint and format check first: a finding fails in seconds, not after pytest.
test: lint
	$(VENV)/bin/python -m pytest -q -n $(TEST_JOBS) --dist loadfile tests

# The fast set while developing (docs/guide/testing.md): lint, then the tests
# marked fast, failing unless they ran code of every module of the package
# (--reach-every-module, tests/conftest.py).
check: lint
	$(VENV)/bin/python -m pytest -q -n $(CHECK_JOBS) --dist loadfile -m fast --reach-every-module tests

# ruff (ruff.toml): lint and check the formatting, changing nothing.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Rewrites the code as ruff formats it, then applies ruff's safe lint fixes.
format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Jupyter on notebooks/, its kernel the project's .venv ("tff_algos"); the
# server has an environment of its own (requirements-jupyter.txt).
# NOTEBOOK_ARGS: more flags for Jupyter (e.g. --port=8889 --no-browser).
JUPYTER := .venv-jupyter
NOTEBOOK_ARGS ?=
# Jupyter refuses to start as root unless told to.
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
KERNEL := $(JUPYTER)/share/jupyter/kernels/tff_algos/kernel.json
notebook: install $(KERNEL)
	$(JUPYTER)/bin/jupyter notebook --notebook-dir=notebooks --MultiKernelManager.default_kernel_name=tff_algos $(AS_ROOT) $(NOTEBOOK_ARGS)

# One notebook top to bottom, headless: make notebook-run
# NOTEBOOK=notebooks/02_stragglers.ipynb writes the executed copy, with its
# outputs, to runs/notebooks/.
NOTEBOOK ?= notebooks/01_compose_fedprox.ipynb
notebook-run: install $(KERNEL)
	$(JUPYTER)/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.kernel_name=tff_algos --ExecutePreprocessor.timeout=-1 --output-dir=runs/notebooks $(NOTEBOOK_ARGS) $(NOTEBOOK)

$(KERNEL): $(JUPYTER)/.installed $(STAMP)
	$(VENV)/bin/python -m ipykernel install --prefix $(JUPYTER) --name tff_algos --display-name "tff_algos (.venv)" >/dev/null

$(JUPYTER)/.installed: requirements-jupyter.txt
	test -x $(JUPYTER)/bin/python || $(PYTHON) -m venv $(JUPYTER)
	$(JUPYTER)/bin/python -m pip install -q --upgrade pip
	$(JUPYTER)/bin/python -m pip install -q -r requirements-jupyter.txt
	touch $@

# TensorBoard over every run folder under runs/ (http://localhost:6006).
tensorboard: install
	$(VENV)/bin/tensorboard --logdir runs/

clean:
	rm -rf $(VENV) $(JUPYTER) *.egg-info
