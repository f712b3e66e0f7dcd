# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make demo   - create .venv, install, train on the demo corpus, export, classify
#   make test   - create .venv, install with the test extra, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= runs/demo

.PHONY: demo test install clean

# The stamp is rebuilt whenever the dependency list changes.
$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m pipeline.demo --model-dir $(DEMO_DIR)

test: install
	$(BIN)/python -m pytest tests

clean:
	rm -rf $(VENV) runs *.egg-info
