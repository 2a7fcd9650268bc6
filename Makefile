# `make run` / `make test` set up .venv/ themselves (idempotent: the install
# step re-runs only when requirements.txt or setup.py changed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
RUN_ARGS ?=
# Test processes (pytest-xdist): one per core by default.
TEST_JOBS ?= auto
UV_PIN := uv==0.13.9
UV_INSTALL := $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --compile-bytecode

.PHONY: install run test notebook tensorboard clean

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

test: install
	$(VENV)/bin/python -m pytest -q -n $(TEST_JOBS) --dist loadfile tests

# Jupyter on notebooks/, its kernel the project's .venv ("tff_algos"); the
# server has an environment of its own (requirements-jupyter.txt).
JUPYTER := .venv-jupyter
notebook: install $(JUPYTER)/.installed
	$(VENV)/bin/python -m ipykernel install --prefix $(JUPYTER) --name tff_algos --display-name "tff_algos (.venv)" >/dev/null
	$(JUPYTER)/bin/jupyter notebook --notebook-dir=notebooks --MultiKernelManager.default_kernel_name=tff_algos

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
