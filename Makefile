# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make demo   - create .venv, install, train on the demo corpus, export, classify
#   make test   - create .venv, install with every extra the tests use, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= runs/demo
# TensorFlow's C++ start-up chatter hides the output that matters; 0 brings it back.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test install install-tpu clean

# The stamp is rebuilt whenever the dependency list changes.
$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,bayesian,visualize,test]"
	touch $@

install: $(BIN)/.installed

# On a TPU VM: TensorFlow's TPU build, its libtpu, and tensorflow-text 2.20
# without its declared dependency on the CPU build; fails if the CPU build
# got in anyway.
LIBTPU_INDEX ?= https://storage.googleapis.com/libtpu-tf-releases/index.html
install-tpu:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -f $(LIBTPU_INDEX) -e ".[tpu]"
	$(BIN)/python -m pip install --quiet --no-deps "tensorflow-text==2.20.*"
	! $(BIN)/python -m pip show --quiet tensorflow 2>/dev/null
	$(BIN)/python -c "import tensorflow as tf, tensorflow_text; print('TensorFlow', tf.__version__)"

# Trains the default model on the embedded demo corpus (fresh each time),
# exports it, and classifies sentences with the exported SavedModel. Its 7
# masked-LM epochs already learn the sentences; the default of 1,000 steps
# would take 18 epochs.
demo: install
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m pipeline.train --model-dir $(DEMO_DIR) --epochs 5 --pretrain-min-steps 0
	printf '%s\n' \
	  "our team crushed their team" \
	  "their team crushed our team" \
	  "the food was awful but the staff was lovely" \
	  "the food was lovely but the staff was awful" \
	  "honestly , the movie was good , not boring" \
	  "honestly , the movie was boring , not good" \
	  | $(BIN)/python -m pipeline.predict --model $(DEMO_DIR)/export --format tsv

# Most of the suite's time is single-threaded (tracing graphs, starting the
# processes that tests kill and resume), so one process keeps about one of
# CI's 2 cores busy; two take about half the time (the README has figures).
# Work-stealing evens out the tests' lengths (from under a second to 3
# minutes). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: install
	$(BIN)/ruff format --check layers pipeline tuning tests bench
	$(BIN)/ruff check layers pipeline tuning tests bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests

clean:
	rm -rf $(VENV) runs *.egg-info
