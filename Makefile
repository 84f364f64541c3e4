# Thin wrapper over CMake. `make run` and `make test` work on a fresh Debian 12 machine.
BUILD_DIR    ?= build
SAN_DIR      ?= build-sanitize
CONFIG       ?= etc/kvlane.toml
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=

.PHONY: all bootstrap build run test sanitize clean

all: build

bootstrap:
	@./scripts/bootstrap

$(BUILD_DIR)/CMakeCache.txt: | bootstrap
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: bootstrap $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/kvlaned --config $(CONFIG)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

sanitize: bootstrap
	cmake -S . -B $(SAN_DIR) -DKVLANE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build $(SAN_DIR) -j $(JOBS)
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR)
