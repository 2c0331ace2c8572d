# The README's two commands are `make train-tiny` and `make test`; both set up .venv on first use.
# The checkout is on .venv's path (make develop), so commands work without PYTHONPATH, as the README writes them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Test processes for `make test` and `make test-fast` (pytest-xdist); the suite is timed on 2 cores with 2. The
# groups go out in tests/conftest.py's order (longest first), not xdist's (most tests first).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
TINY_MODEL := playground/Pretrained_models/Cosmos-Predict2.5-tiny
TINY_DATA := playground/Datasets/robotwin_tiny

.PHONY: venv develop tiny-assets tiny-dataset train-tiny test test-fast typecheck test-patched bench rehearsal sim-env sim-system-packages libero-env test-libero

venv: $(VENV)/.installed

# torch 2.7.1 from PyPI is a CUDA build that also runs on CPU; DS_BUILD_OPS=0 keeps DeepSpeed from compiling ops.
$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	DS_BUILD_OPS=0 $(VENV)/bin/pip install -q -r requirements.txt
	$(MAKE) develop
	touch $@

# Puts this checkout on the environment's path (a .pth file; offline, no build backend): `accelerate launch
# DiT4DiT/training/train.py ...`, as the README writes it, imports the package from any folder.
develop:
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'dit4dit.pth').write_text('$(CURDIR)\n')"

# Rewritten when the tool changes, so a checkout never trains on an older snapshot than its code writes.
$(TINY_MODEL)/model_index.json: DiT4DiT/tools/tiny_cosmos.py | venv
	PYTHONPATH=. $(PY) -m DiT4DiT.tools.tiny_cosmos --out $(TINY_MODEL) --overwrite

$(TINY_DATA)/.complete: | venv
	PYTHONPATH=. $(PY) -m DiT4DiT.tools.tiny_robotwin --out $(TINY_DATA) --overwrite
	touch $@

tiny-assets: $(TINY_MODEL)/model_index.json $(TINY_DATA)/.complete

# Tiny synthetic datasets for any mixture: make tiny-dataset MIX=libero_all [K=2] [VERSION=v3.0]
tiny-dataset: | venv
	$(PY) -m DiT4DiT.tools.tiny_dataset --data_mix $(MIX) --out playground/Datasets/$(MIX)_tiny --overwrite \
		$(if $(K),--datasets $(K)) $(if $(VERSION),--lerobot_version $(VERSION))

# The main job on the embedded tiny defaults, through the real launcher (CPU host: CPU launch configuration).
train-tiny: tiny-assets
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/train_8p.sh $(ARGS)

# DeepSpeed compiles its shared-memory collective op the first time a CPU run starts its engine (about two CPU
# minutes); the tests' DeepSpeed launches load it from here (tests/conftest.py): built once per environment. With
# the tests' PATH: ninja decides whether the op is current from its own log, and the log of another ninja (Debian's
# 1.11 against the venv's 1.13) reads as "command line changed", so the first DeepSpeed test compiled it again.
DS_SHM_OP := $(VENV)/torch-extensions/deepspeed_shm_comm/deepspeed_shm_comm.so

$(DS_SHM_OP): $(VENV)/.installed
	PATH="$(abspath $(VENV))/bin:$$PATH" TORCH_EXTENSIONS_DIR="$(abspath $(VENV))/torch-extensions" $(PY) -c \
		"from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"

# Every test (docs/testing.md): unit, in-process, and the slow tier that launches processes.
test: venv $(DS_SHM_OP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

# The fast tier: unit and in-process tests, no subprocess; what to run while editing.
test-fast: venv
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -m "not slow" $(XDIST) $(PYTEST_ARGS)

# The type checker as pyproject.toml's [tool.mypy] sets it (strict packages, the modules not yet clean); the fast
# tier runs it too (tests/test_typecheck.py).
typecheck: venv
	$(PY) -m mypy

# The NPU patch applied to a fresh export of HEAD, then the 100-step CPU smoke run on the patched tree.
test-patched: venv
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/ci_patched_smoke.sh

bench: tiny-assets
	PYTHONPATH=. $(PY) bench/bench_model.py
	PYTHONPATH=. $(PY) bench/bench_data.py
	PYTHONPATH=. $(PY) bench/bench_train.py
	PYTHONPATH=. $(PY) bench/bench_serving.py

# The real job at full size on this CPU (not CI), for each of the four shipped configs (REHEARSAL_ARGS=--config_yaml
# NAME for one): about 6 GB of random-weight snapshot, 14-20 GiB of RAM, tens of minutes per config.
# REHEARSAL_ARGS=--smoke checks the script on a test-size snapshot. ORIGINAL=a checkout of the
# original DiT4DiT (ORIGINAL_PYTHON: an interpreter its framework imports with) also times its steps against ours.
rehearsal: | venv
	PYTHONPATH=. $(PY) bench/full_size_rehearsal.py $(if $(ORIGINAL),--original $(ORIGINAL)) \
		$(if $(ORIGINAL_PYTHON),--original_python $(ORIGINAL_PYTHON)) $(REHEARSAL_ARGS)

# Meta-World's own environment (docs/closed-loop.md): the simulator and our client, no torch; its pins (mujoco 3.3,
# numpy 2) never meet the training environment's. Headless rendering needs EGL or OSMesa from the system.
SIM_VENV := .venv-metaworld
SIM_DEBS := libegl1 libgl1-mesa-dri libosmesa6

# Built once per requirements file and Python under SIM_ENV_CACHE and linked here, so a fresh checkout (CI) reuses
# it instead of spending minutes in pip; `make sim-env SIM_ENV_CACHE=` builds it in place. .installed holds the
# key it was built for; flock: one build at a time.
SIM_ENV_CACHE ?= $(HOME)/.cache/dit4dit
SIM_KEY := $(shell { cat requirements-metaworld.txt; $(PYTHON) -VV; } 2>&1 | sha256sum | cut -c1-12)
SIM_BUILD = $(if $(SIM_ENV_CACHE),$(SIM_ENV_CACHE)/venv-metaworld-$(SIM_KEY),$(CURDIR)/$(SIM_VENV))

sim-env: $(SIM_VENV)/.installed

$(SIM_VENV)/.installed: requirements-metaworld.txt
	$(MAKE) sim-system-packages
	mkdir -p $(dir $(SIM_BUILD))
	flock $(SIM_BUILD).lock sh -c '[ "$$(cat $(SIM_BUILD)/.installed 2>/dev/null)" = $(SIM_KEY) ] || { \
		rm -rf $(SIM_BUILD) && $(PYTHON) -m venv $(SIM_BUILD) && \
		$(SIM_BUILD)/bin/pip install -q -r requirements-metaworld.txt && echo $(SIM_KEY) > $(SIM_BUILD)/.installed; }'
	$(if $(SIM_ENV_CACHE),[ -L $(SIM_VENV) ] || rm -rf $(SIM_VENV); ln -sfn $(SIM_BUILD) $(SIM_VENV))
	touch $@

# Installs the rendering libraries where it can (root with apt-get); elsewhere it names them and goes on, since
# either EGL or OSMesa is enough.
sim-system-packages:
	@missing=$$(for p in $(SIM_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; } || \
		echo "warning: could not install $$missing; headless rendering needs EGL (libegl1) or OSMesa (libosmesa6)"; \
	else echo "warning: install $$missing (Debian) for headless rendering: sudo apt-get install $$missing"; fi

# LIBERO's own environment (docs/closed-loop.md): the simulator (mujoco 2.3.7, numpy 1.26), our client and the
# original eval_libero.py's imports, no torch. The original's client also imports torch to read a run's config: a
# .pth file puts the training environment's packages after .venv-libero's own, so its pins win where both have one.
LIBERO_VENV := .venv-libero

libero-env: $(LIBERO_VENV)/.installed

$(LIBERO_VENV)/.installed: requirements-libero.txt
	$(MAKE) sim-system-packages
	$(PYTHON) -m venv $(LIBERO_VENV)
	$(LIBERO_VENV)/bin/pip install -q -r requirements-libero.txt
	$(LIBERO_VENV)/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], \
		'dit4dit-training-env.pth').write_text(sysconfig.get_paths(vars={'base': '$(abspath $(VENV))'})['purelib'] + '\n')"
	touch $@

# One short LIBERO episode through our adapter and one through the original's client (DIT4DIT_ORIGINAL=its
# checkout); not part of `make test`: the environment is 2.2 GB.
test-libero: libero-env
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q tests/test_closed_loop_libero.py $(PYTEST_ARGS)
