# doppler_lab: `make demo` runs the main job, `make test` runs the test suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-all lint format reports reports-quick bench gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# the notebook filter (and its file-system monitor: git status stays clean after a notebook is
# run in place) is set on every run: a checkout made before it moved keeps working
venv: $(STAMP)
	-@git config filter.doppler-nbclean.clean "$(abspath $(BIN))/python -m doppler_lab.house.nbclean"
	-@git config filter.doppler-nbclean.smudge cat
	-@case "$$(git config --get core.fsmonitor)" in ""|*doppler_lab.house.nbclean*) \
		git config core.fsmonitor "$(abspath $(BIN))/python -P -m doppler_lab.house.nbclean --fsmonitor" \
		&& (git update-index -q --refresh >/dev/null 2>&1 || true) ;; \
		*) echo "core.fsmonitor is already set: git status may call a notebook run in place modified" ;; esac

demo: venv
	$(BIN)/doppler-lab demo --out reports/demo

test: venv
	$(BIN)/python -m pytest -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow or not slow"

lint: $(STAMP)
	$(BIN)/ruff check doppler_lab tests
	$(BIN)/ruff format --check doppler_lab tests

format: $(STAMP)
	$(BIN)/ruff format doppler_lab tests
	$(BIN)/ruff check --fix doppler_lab tests

# the site kept in git: reports/site (runs of the same code version and parameters are reused)
reports: $(STAMP)
	$(BIN)/doppler-lab report --out reports/site --keep-going

reports-quick: $(STAMP)
	$(BIN)/doppler-lab report --out reports/quick --keep-going --quick

bench: $(STAMP)
	$(BIN)/doppler-lab bench sim
	$(BIN)/doppler-lab bench quality
	$(BIN)/doppler-lab bench policy

gpu-check: $(STAMP)
	$(BIN)/doppler-lab gpu-check

clean:
	-@case "$$(git config --get core.fsmonitor)" in *doppler_lab.house.nbclean*) git config --unset core.fsmonitor ;; esac
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
