# Entry points: `make demo` (set up, build, run the main job) and `make test` (every test).
BUILD_DIR ?= build
JOBS ?= 2

CMAKE_ARGS = -G Ninja -DCMAKE_BUILD_TYPE=Release \
             -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache

ASAN_DIR ?= build-asan

.PHONY: all setup configure build demo test sanitize bench clean

all: build

setup:
	@scripts/bootstrap.sh --check >/dev/null 2>&1 || scripts/bootstrap.sh

$(BUILD_DIR)/build.ninja: | setup
	cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS)

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) sanitize

# The MLIR-free parsers, their unit tests and fuzz drivers under ASan + UBSan (tests/sanitize).
sanitize: setup
	cmake -S tests/sanitize -B $(ASAN_DIR) -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD_DIR)/bin/bench-model-build
	$(BUILD_DIR)/bin/bench-param-init
	$(BUILD_DIR)/bin/bench-pipeline-schedule
	/usr/bin/python3 bench/gpt2_124m.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-gpt2-124m
	/usr/bin/python3 bench/hf_gpt2_124m.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-hf-gpt2-124m --threads $(JOBS)
	/usr/bin/python3 bench/data_prep.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-data-prep --mb 100
	/usr/bin/python3 bench/train_step.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-train-step --threads $(JOBS)
	/usr/bin/python3 bench/partition_step.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-partition-step
	/usr/bin/python3 bench/plan_search.py --megac $(BUILD_DIR)/bin/megac
	/usr/bin/python3 bench/hostile_inputs.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-hostile
	/usr/bin/python3 bench/published_runs.py --megac $(BUILD_DIR)/bin/megac
	/usr/bin/python3 bench/cpu_cost_model.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-cpu-cost-model
	$(BUILD_DIR)/bin/megac compile --model gpt:layers=4,hidden=256,heads=8,seq=128,vocab=512 \
	    --ranks 1 --global-batch 8 --micro-batch 8 -o $(BUILD_DIR)/bench-train-step.mplan
	$(BUILD_DIR)/bin/bench-train-step --plan $(BUILD_DIR)/bench-train-step.mplan --backend cpu \
	    --steps 5 --gpt 4,256,128,512 --peak-tflops 0.23

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
