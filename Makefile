# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian 12
# machine: both install what is missing (scripts/setup-deps) first.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all setup configure build install test demo bench sanitize valgrind fuzz clean

all: build

setup:
	bash scripts/setup-deps

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Installs bin/weft and the docs under PREFIX (default /usr/local, which needs
# root; make install PREFIX=$$HOME/.local needs none). README, "Install".
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

test: setup
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Quiet: the set-up and the build go to $(BUILD)/demo-build.log, printed only
# when they fail; then the demo itself.
demo:
	@mkdir -p $(BUILD)
	@{ bash scripts/setup-deps && cmake -S . -B $(BUILD) $(CMAKE_FLAGS) && cmake --build $(BUILD) -j $(JOBS); } \
	  >$(BUILD)/demo-build.log 2>&1 || { cat $(BUILD)/demo-build.log; \
	  echo "make demo: the set-up or the build failed (log above, in $(BUILD)/demo-build.log)"; exit 1; }
	@echo "built $(BUILD)/weft (set-up and build log: $(BUILD)/demo-build.log)"
	@bash scripts/demo $(BUILD)/weft

bench: setup
	$(MAKE) build
	bash scripts/bench $(BUILD)

sanitize: setup
	cmake -S . -B build-asan -DWEFT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS)

valgrind: setup
	$(MAKE) build
	bash scripts/valgrind-suite $(BUILD)

# libFuzzer campaigns over every reader of untrusted input (docs/fuzzing.md):
# FUZZ_SECONDS per harness (default 60), corpora grown in build-fuzz/corpus.
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/setup-deps --fuzz
	CC=clang cmake -S . -B build-fuzz -DWEFT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS)
	bash scripts/fuzz build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-nocuda build-gpu
