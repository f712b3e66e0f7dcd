# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make demo   - create .venv, install, train on the demo corpus, export, classify
#   make test   - create .venv, install with the test extra, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= runs/demo
# TensorFlow's C++ start-up chatter hides the output that matters; 0 brings it back.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test install clean

# The stamp is rebuilt whenever the dependency list changes.
$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(BIN)/.installed

# Trains the default model on the embedded demo corpus (fresh each time),
# exports it, and classifies sentences with the exported SavedModel.
demo: install
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m pipeline.train --model-dir $(DEMO_DIR) --epochs 5
	printf '%s\n' \
	  "our team crushed their team" \
	  "their team crushed our team" \
	  "the food was awful but the staff was lovely" \
	  "the food was lovely but the staff was awful" \
	  "honestly , the movie was good , not boring" \
	  "honestly , the movie was boring , not good" \
	  | $(BIN)/python -m pipeline.predict --model $(DEMO_DIR)/export --format tsv

# Most of the suite's time is single-threaded (tracing graphs, starting the
# processes that tests kill and resume), so one process kept about one of
# CI's 2 cores busy: on the 2-core Zen 3 machine the suite took 18-25 minutes
# in one process (four runs), 8.7-15.4 in two (six fresh clones' .ci/run:
# 9.9-17.4 with the set-up; the machine is shared and its speed varies); on
# the Zen 4 machine, at the issue's reference speed, 7.1-8.1 in two (three
# fresh clones' .ci/run: 8.0-9.2 with the set-up), 8.4-9.1 since the default
# run refits (two fresh clones; 9.6 with the set-up in the second), 10.4
# (11.7 with the set-up) with the weight average and 10.7 (11.9) with the
# 16-step host loop, in slow spells of the host that made the product's
# masked-LM epochs 20-30% slower; 9.1 and 9.8 (10.3 and 11.1 with the
# set-up) for 186 tests with masked-LM in steps of 64, in a calmer hour;
# 10.3 (11.5) for 187 in a slow hour.
# Work-stealing evens out the tests' lengths (from under a second to 3
# minutes). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests

clean:
	rm -rf $(VENV) runs *.egg-info
