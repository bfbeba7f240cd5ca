# Two commands on a fresh machine with only python3:
#   make run   - create .venv; build the built-in corpus into the default store (unless it holds your own) and
#                serve it with the general model on 127.0.0.1:50051 until Ctrl-C
#   make test  - create .venv and run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[server,ray,dev]'
	touch $@

run: venv
	$(BIN)/nextpara serve

test: venv
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder  # two workers, a test file each, in tests/conftest.py's order: 2 cores

clean:
	rm -rf $(VENV) build *.egg-info
