# Thin wrapper around CMake. Quick start:
#   make demo   - build and run the decode runner (tilestack demo, docs/demo.md) on defaults
#   make test   - build Release and ASan+UBSan, run the whole test suite on both
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
BUILD    ?= build
ASAN     ?= build-asan
PREFIX   ?= /usr/local
CMAKE    ?= cmake

.PHONY: all deps build build-asan demo test bench install clean

all: build

deps:
	@./scripts/ensure_deps.sh

build: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

# The sanitizer build keeps line tables only (-g1): variable tracking cost ~10 % of its compile
# time, and stack traces need no more.
build-asan: deps
	@$(CMAKE) -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG' -DTS_SANITIZE=ON -DTS_BUILD_TOOLS=OFF >/dev/null
	@$(CMAKE) --build $(ASAN) -j $(JOBS)

demo: build
	@./$(BUILD)/tilestack demo

test: build build-asan
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		./scripts/run_tests.sh $(BUILD) $(ASAN)

bench: build
	@./$(BUILD)/tilestack bench all

install: build
	@$(CMAKE) --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN)
