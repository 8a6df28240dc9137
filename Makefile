# Entry points: `make demo` (set up, build, run the main job) and `make test` (every test).
BUILD_DIR ?= build
JOBS ?= 2
DEMO_MODEL ?= gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256

CMAKE_ARGS = -G Ninja -DCMAKE_BUILD_TYPE=Release \
             -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache

.PHONY: all setup configure build demo test bench clean

all: build

setup:
	@scripts/bootstrap.sh --check >/dev/null 2>&1 || scripts/bootstrap.sh

$(BUILD_DIR)/build.ninja: | setup
	cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS)

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/bin/megac describe --model $(DEMO_MODEL)
	$(BUILD_DIR)/bin/megac describe --model gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=50257
	$(BUILD_DIR)/bin/megac train --model $(DEMO_MODEL) --data examples/tiny-corpus.npy \
	    --steps 200 --global-batch 8 --micro-batch 4 --lr 3e-3 --lr-schedule cosine \
	    --warmup-steps 10 --min-lr 3e-4 --log-json $(BUILD_DIR)/demo-train.jsonl \
	    --save-weights $(BUILD_DIR)/demo-gpt.safetensors
	$(BUILD_DIR)/bin/megac train --model $(DEMO_MODEL) --data examples/tiny-corpus.npy \
	    --steps 50 --global-batch 8 --micro-batch 2 --lr 3e-3 --ranks 4 --tp 2 --dp 2 --zero 1 \
	    --log-json $(BUILD_DIR)/demo-train-4ranks.jsonl
	$(BUILD_DIR)/bin/megac plan --model gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=50257 \
	    --cluster a100-80g:128x8 --global-batch 1536 --top 3

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD_DIR)/bin/bench-model-build
	/usr/bin/python3 bench/gpt2_124m.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-gpt2-124m
	/usr/bin/python3 bench/train_step.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-train-step --threads $(JOBS)
	/usr/bin/python3 bench/partition_step.py --megac $(BUILD_DIR)/bin/megac --workdir $(BUILD_DIR)/bench-partition-step
	$(BUILD_DIR)/bin/megac compile --model gpt:layers=4,hidden=256,heads=8,seq=128,vocab=512 \
	    --ranks 1 --global-batch 8 --micro-batch 8 -o $(BUILD_DIR)/bench-train-step.mplan
	$(BUILD_DIR)/bin/bench-train-step --plan $(BUILD_DIR)/bench-train-step.mplan --backend cpu \
	    --steps 5 --gpt 4,256,128,512 --peak-tflops 0.23

clean:
	rm -rf $(BUILD_DIR)
