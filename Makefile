# A thin front over CMake. The two quick-start targets install what is
# missing first (scripts/install-deps.sh says which packages before it
# installs them): `make demo` trains the tiny SRGAN on 2 processes, `make test`
# runs every test (see README.md), after making or reusing the cached
# MMEditing venv of the `mmedit` tests and the tools venv (TensorBoard,
# onnxruntime) of test_tensorboard and test_export_onnx{,_gan} (which `make demo`
# never needs). Every
# other target only builds: a plain `make` never installs system packages
# (`make deps` does, alone).
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps mmedit-venv tools-venv configure build test asan fuzz bench demo clean

all: build

deps:
	bash scripts/install-deps.sh

configure:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# MMEditing 0.16.1 in a cached venv, the oracle of the tests labelled
# `mmedit` (scripts/make-mmedit-venv.sh). Where it cannot be made, those
# tests skip and say how to make it; under CI (CI=true) that is an error.
mmedit-venv:
	@bash scripts/make-mmedit-venv.sh || { \
	  echo "make: could not make the MMEditing venv: the mmedit tests will skip"; \
	  [ "$$CI" != true ]; }

# TensorBoard's reader and onnxruntime, which check duet's event files and
# ONNX models (scripts/make-tools-venv.sh): without them those checks skip,
# saying so; under CI that is an error.
tools-venv:
	@bash scripts/make-tools-venv.sh || { \
	  echo "make: could not make the tools venv: TensorBoard's reader and onnxruntime checks will skip"; \
	  [ "$$CI" != true ]; }

test: deps
	$(MAKE) --no-print-directory mmedit-venv
	$(MAKE) --no-print-directory tools-venv
	$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j 2

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
asan:
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUET_SANITIZE=ON
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure -L unit -j 2

# libFuzzer on the safetensors, config and image readers, FUZZ_SECONDS
# (default 60) each, from the seeds in fuzz/corpus/ (scripts/fuzz.sh).
fuzz: deps
	bash scripts/fuzz.sh

# The quick start: train the tiny MSRResNet/SRGAN pair on 2 processes on the
# sample photos, then test them next to bicubic (scripts/demo.sh).
demo: deps
	$(MAKE) --no-print-directory build
	bash scripts/demo.sh $(BUILD)

bench: build
	@for b in $(BUILD)/bench_*; do echo "== $$b"; $$b; done

clean:
	rm -rf $(BUILD) $(BUILD)-asan build-fuzz
