# Two commands do all set-up on a fresh machine that has only Python 3.10+:
#   make demo   -> creates .venv, installs worldtune, runs the end-to-end demo on the tiny model
#   make test   -> same install, then the test suite (make test-slow: the end-to-end tests that take minutes)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_OUT ?= demo_out

.PHONY: demo test test-slow install clean bench-cpu

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/worldtune demo --out $(DEMO_OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# the tests marked slow (end-to-end demos, minutes each); CI runs them after `make test`
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache
