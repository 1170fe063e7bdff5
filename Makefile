# Thin wrapper over CMake.  `make check` and `make build` install missing
# Debian packages first (deploy/install-deps.sh), so a fresh machine needs
# nothing else.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The test switches (common/fa_failpoint.h): compiled into $(BUILD), which
# `make check` tests; never into a release (CMake's default is OFF).
TEST_HOOKS ?= ON

.PHONY: all deps build check check-large check-deploy bench soak fuzz sanitize demo clean

all: build

deps:
	@./deploy/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DFEDAGG_TEST_HOOKS=$(TEST_HOOKS) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

check: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE large $(CTEST_FLAGS)

# Tests at sizes beyond the CI suite's time (ctest label large): a
# federation round of a model over 2^31 bytes; tens of minutes, ~10 GB of
# memory and ~25 GB of disk.
check-large: build
	cd $(BUILD) && ctest --output-on-failure -L large $(CTEST_FLAGS)

# Deployment as users deploy it (tests/deploy/check-deploy.sh, as root): the
# images built with podman from a clean clone and run as a federation across
# container networks with faults and an upgrade, the Kubernetes manifests
# rendered, schema-validated and run with podman kube play, the systemd units
# started by systemd.  Installs the deploy set (podman, debootstrap, kubectl,
# npm) first; ~10 minutes on 2 cores, more on the first run (base image).
check-deploy: build
	@./deploy/install-deps.sh deploy
	./tests/deploy/check-deploy.sh $(BUILD)

# A 3-region federation on loopback (deploy/demo.sh): ~3 minutes on 2 cores.
demo: build
	./deploy/demo.sh $(BUILD)

bench: build
	./benchmarks/run-all.sh $(BUILD)

# The federation under random SIGKILLs and relay impairments for
# SOAK_SECONDS (180), then its checks (tests/soak/soak.sh; SOAK_SEED replays).
SOAK_SECONDS ?= 180
soak: build
	SOAK_SECONDS=$(SOAK_SECONDS) ./tests/soak/soak.sh $(BUILD)

# libFuzzer targets, built with clang into build-fuzz/fuzz/.
fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFEDAGG_FUZZ=ON -DFEDAGG_CUDA=OFF
	cmake --build build-fuzz -j $(JOBS)
	./tests/fuzz/run-all.sh build-fuzz/fuzz $(FUZZ_SECONDS)

# The unit tests under ASan + UBSan, built as a release is: without the test
# switches (tests that need them skip, those that show they are ignored run).
sanitize: deps
	cmake -S . -B build-asan -DFEDAGG_SANITIZE=ON -DFEDAGG_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug \
		-DFEDAGG_TEST_HOOKS=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -L 'unit|fuzz'

clean:
	rm -rf $(BUILD) build-asan build-fuzz demo-out
