// The --help texts of megac and its subcommands: usage lines, a blank line, the description.
// Flags appends the flags each subcommand takes (tools/megac/Cli.h).
#include "tools/megac/Help.h"

namespace megac::cli {

const char *const kMainHelp =
    R"(megac: a compiler for distributed training of transformer language models

usage: megac <command> [options]

commands:
  import    --model SPEC -o FILE.mlir      write a zoo model's forward graph as mega IR
  describe  --model SPEC | FILE.mlir       parameter count, FLOPs per token, op histogram
  compile   MODEL -o FILE.mplan [--seed N]
                                           lower a model to a single-rank plan
  run       (MODEL | FILE.mplan) --input NAME=FILE.npy ... --output-dir DIR [--seed N]
                                           one forward pass on the CPU; outputs as DIR/NAME.npy
  train     MODEL --data TOKENS.npy --steps N --global-batch B --micro-batch b --lr X ...
                                           AdamW training on the CPU (`megac train --help`)
  data      prep INPUT.txt|INPUT.jsonl --tokenizer byte|gpt2:V.json,M.txt|hf:T.json -o PREFIX
                                           an indexed dataset (PREFIX.bin/.idx) for --data PREFIX
  generate  --load DIR --prompt TEXT [--max-tokens N] [--tokenizer SPEC] [--temperature T ...]
                                           text from a checkpoint (greedy or sampled)
  export    --load DIR --onnx MODEL.onnx -o TRAINED.onnx
                                           a checkpoint's weights written into its ONNX model
  plan      MODEL --ranks N [--tp T --pp P --dp D ...] [--explain] [--json] [-o FILE.mplan]
                                           the partitioned training step's plan, explained
  plan      MODEL --cluster SPEC --global-batch B [--top K]
                                           the planner: the best layouts on a cluster, and why
  calibrate --backend cpu|cuda [--ranks N] [--threads T] [--quick] -o HW.json
                                           measure this machine: a device spec for --cluster

MODEL: --model SPEC, FILE.mlir or FILE.onnx

model specs:
  gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128
  bert:layers=2,hidden=64,heads=4,seq=32,vocab=128
  t5:enc_layers=2,dec_layers=2,hidden=64,heads=4,seq=32,vocab=128
  llama:layers=2,hidden=64,heads=4,kv_heads=2,seq=32,vocab=128
  other keys: ffn= (default 4*hidden; llama: 8/3*hidden rounded up to 256), tied=0|1,
  gelu=erf|tanh, batch=, dtype=f32|f64|bf16|f16, dec_seq= (t5), rope_theta=, norm_eps= (llama),
  padding=1 (gpt, llama: an attention_mask input, 1 token / 0 padding; train --pad-token-id)
  hf:DIR[,seq=S]  a transformers config.json (DIR or the file itself): llama, mistral, qwen2,
  mixtral, qwen2_moe, nemotron, gpt2, built by the zoo, from the folder's safetensors weights
  when it has them; seq is the training sequence length (docs/huggingface.md))";

const char *const kImportHelp =
    R"(usage: megac import (--model SPEC | FILE.onnx | FILE.mlir) -o FILE.mlir
                    [--input-shape NAME=D0xD1x... ...] [--compile-to=input]
                    [--debug-locations]
       megac import --list-ops

writes the forward graph as mega IR; '-o -' writes to stdout. Weights that come with
the model (ONNX initializers) go beside the output as FILE.safetensors, named by the
module attribute mega.weights. --input-shape binds an ONNX input's symbolic dims.
--compile-to=input runs the input pipeline (raise LayerNorm/RMSNorm/GELU/SiLU/
rotary/attention (with grouped k/v heads)/linear/embedding patterns, canonicalize,
CSE). --debug-locations keeps each op's location
(DSL call site and scope, or ONNX node). --list-ops prints the ONNX ops the importer
maps.)";

const char *const kDescribeHelp =
    R"(usage: megac describe (--model SPEC | FILE.mlir) [--function NAME]

prints the model's parameters (count, tensors, bytes), its FLOPs per token (forward, and
training as 3x forward) and the histogram of its ops.)";

const char *const kCompileHelp =
    R"(usage: megac compile (--model SPEC | FILE.mlir | FILE.onnx) -o FILE.mplan
                     [--seed N] [--function NAME] [--input-shape NAME=D0xD1x...]

runs the input pipeline and lowers the model's forward function to a
single-rank plan. Weights that come with the model (ONNX initializers, a .mlir's
mega.weights file) are written beside the plan as FILE.safetensors; parameters
without values are initialized at load time from their init spec and --seed
(default 0). --input-shape binds an ONNX input's symbolic dims.
With a layout (--ranks N --tp T --pp P --dp D ...; `megac plan --help`) it
compiles the training step instead: one program per pipeline stage and the
rank table.)";

const char *const kRunHelp = R"(usage: megac run (--model SPEC | FILE.mlir | FILE.onnx | FILE.mplan)
                 --input NAME=FILE.npy ... --output-dir DIR
                 [--seed N] [--function NAME] [--input-shape NAME=D0xD1x...]
                 [--backend cpu|cuda] [--allow-tf32] [--threads N]

runs one forward pass and writes every output as DIR/NAME.npy; on a GPU
(--backend cuda) by default when one is usable, else on the CPU. --threads N sets the
CPU's BLAS/OpenMP threads (default: the cores of this node).
A model that is not a plan yet is compiled in memory first (see megac compile); a --model
hf:DIR,seq=S folder with model.safetensors or model.safetensors.index.json runs with those
weights (docs/huggingface.md).)";

const char *const kTrainHelp = R"(usage: megac train (FILE.onnx | FILE.mlir | --model SPEC)
                   (--data TOKENS.npy|PREFIX | --data-path [W1] PREFIX1 [W2 PREFIX2 ...])
                   [--seq S] --steps N --global-batch B --micro-batch b --lr X
                   [--objective causal|mlm [--mask-token-id ID]] [--pad-token-id ID]
                   [--lr-schedule constant|cosine] [--warmup-steps W] [--min-lr Y]
                   [--adam-beta1 0.9] [--adam-beta2 0.999] [--adam-eps 1e-8]
                   [--weight-decay 0.01] [--clip-grad 0] [--seed 0]
                   [--moe-aux-loss-coeff 0.01] [--moe-z-loss-coeff 0]
                   [--precision fp32|fp64|bf16|fp16] [--initial-loss-scale 65536]
                   [--loss-scale-window 1000] [--hysteresis 2] [--min-loss-scale 1]
                   [--log-json FILE] [--log-interval N] [--tensorboard-dir DIR]
                   [--logits NAME]
                   [--save-weights FILE.safetensors]
                   [--save-hf DIR [--hf-shard-size 5GB]] [--allow-missing NAME]...
                   [--save-grads FILE.safetensors] [--trace FILE.json [--trace-steps N]]
                   [--save DIR [--save-interval N] [--keep-last N [--keep-steps A,B,...]]]
                   [--load DIR [--finetune] [--no-load-optim] [--no-load-rng]]
                   [--exit-signal-handler | --no-exit-signal-handler]
                   [--exit-duration-in-mins M]
                   [--eval-data TOKENS.npy|PREFIX --eval-interval N [--eval-iters K]]
                   [--split TRAIN,VALID,TEST]
                   [--ranks N] [--tp T] [--pp P] [--dp D] [--cp C] [--cp-comm-type all_gather|p2p] [--vpp V]
                   [--sequence-parallel] [--zero 0-3] [--reshard-after-forward on|off]
                   [--recompute none|selective|full]
                   [--schedule 1f1b|gpipe|zb-h1|zb-h2|zbv] [--bucket-size N] [--threads N] [--comm-timeout SECONDS] [--oversubscribe]
                   [--backend cpu|cuda] [--allow-tf32] [--overlap on|off]
                   [--emulate-link BYTES_PER_S,LATENCY_S]

trains the model with AdamW (torch.optim.AdamW; weight decay on parameters of rank >= 2
only) on one or more CPU ranks and prints one line per step (a live progress line on a
terminal).

ranks and layout: --ranks N runs N ranks: megac re-executes itself under
`mpirun -np N` (adding --allow-run-as-root as root, and --oversubscribe when N exceeds the
cores or --oversubscribe is given); a job started by mpirun directly is detected. The ranks
form the mesh <pp, dp, tp> (rank = tp + T*(dp + D*pp), Megatron's order): --tp T tensor
parallel (Megatron's column/row-parallel linears, vocab-parallel embedding and loss),
--pp P pipeline stages with --vpp V model chunks per stage (interleaved 1F1B when V > 1) and
--schedule 1f1b (default), gpipe or the zero-bubble zb-h1, zb-h2, zbv (each backward split
into input and weight gradients; zbv runs 2 chunks per stage in V order; m >= P micro-batches;
docs/pipeline.md), --dp D data parallel (default: N / (T*P)); N must equal T*P*D. --sequence-parallel shards norms and residuals over tp; --zero 1 shards the Adam state
over dp (Megatron's distributed optimizer), --zero 2 also the gradients (reduce-scattered
every micro-batch), --zero 3 also the parameters (FSDP: gathered before each use;
docs/training-step.md; --reshard-after-forward off keeps the forward's gathered parameters for
the backward instead of gathering them again: one gather fewer, more memory; pp 1 only);
--bucket-size N puts up to N gradient elements
in each dp collective (default Megatron's max(40M, 1M x D); checkpoints do not depend on it);
--recompute selective|full recomputes attention outputs or whole chunks in the backward
pass. --cp C splits each sequence over C ranks (context parallelism, its own mesh axis:
<pp, dp, cp, tp>, N = T*C*P*D, --dp excludes cp; causal load balancing: rank i holds chunks
i and 2C-1-i of 2C; keys and values all-gathered (--cp-comm-type all_gather, the default) or
passed around the cp ranks in a ring (p2p); gradients reduced over dp x cp; the sequence must
be a multiple of 2C; with --tp/--sequence-parallel, --dp, --pp, --ep and --zero, not yet with
--backend cuda; docs/context-parallel.md). --fp8 is not supported yet.
--micro-batch b is per data-parallel rank: the model is compiled for b*D rows and a step has
m = B / (b*D) micro-batches (B must be a multiple of b*D); micro-batch k of rank dp reads
rows k*b*D + dp*b .. +b of the step's global batch, so every layout trains on the same batch
as one rank. Only rank 0 prints and writes files. --threads N sets the BLAS/OpenMP threads
per rank (default: cores / ranks on this node, at least 1); with N > 1 each rank pins its
kernel-running thread to one CPU and its BLAS/kernel workers to N - 1 others of its own block
(MEGAC_PIN_THREADS=0: no pinning). --comm-timeout S (default 300):
a collective or transfer waiting longer fails, naming the rank, operation and group, and the
job is aborted. --overlap on (default off) compiles collectives as start/done pairs placed so
communication overlaps compute (docs/training-step.md "Overlap"; the same losses, bit for
bit). --emulate-link B,L (CPU ranks; a measurement tool, off by default) makes every
collective complete no earlier than its alpha-beta time on a link of B bytes/s and L s latency.

backend: --backend cuda runs each rank on one GPU (the local rank's, modulo the devices):
cuBLASLt GEMMs, fused kernels, NCCL collectives bootstrapped over MPI; --backend cpu on the
CPU reference kernels (OpenBLAS, MPI). The default is cuda when a CUDA device is usable,
else cpu; asking for cuda where none is fails with the reason. --allow-tf32 lets f32 GEMMs
use TF32 tensor cores (cuda only; bf16/fp16 always use tensor cores with f32 accumulation).

data: TOKENS.npy is an int32 or int64 array [N, S+1]. Step i (0-based) uses samples
i*B + j for j = 0..B-1, in order (of a .npy: row (i*B + j) mod N); micro-batches of b
consecutive rows are accumulated (B must be a multiple of b). Causal models (gpt, ONNX, .mlir): input_ids =
row[:S], labels = row[1:]. BERT (zoo): masked LM on row[:S] -- round(15% of S) seeded
positions per row become the token vocab-1 ([MASK]) and are the only labelled ones;
attention_mask is all ones. A model file trains as a causal LM, or with --objective mlm as
a masked LM the same way, the mask token --mask-token-id ID (default vocab-1; give the
tokenizer's [MASK] / <mask> id). --pad-token-id ID (causal models with an attention_mask
input: zoo gpt and llama with padding=1): a position whose input token is ID is padding,
attention_mask 0 there (no query sees it), and a label whose input or target token is ID is
ignored (no loss, not counted in the mean). T5 (zoo): S = seq + dec_seq; the encoder reads row[:seq], the
decoder reads row[seq:S] and predicts row[seq+1:S+1]. The loss is the mean cross-entropy
over the global batch's labelled tokens. An ONNX model's input_ids is bound to [b, S]; a
zoo spec's seq must be S (t5: seq + dec_seq; its batch is set to b).
--data PREFIX (PREFIX.bin and PREFIX.idx, Megatron's indexed dataset, e.g. from `megac data
prep`): its sequences are concatenated into one token stream and cut into windows of S+1
tokens with stride S (Megatron's GPT samples); S is --seq S or the zoo spec's seq (t5: seq +
dec_seq). Sample k is window perm_e[k mod N] of epoch e = k / N: every epoch reads each of
the N windows once, epoch 0 in a Fisher-Yates order seeded by --seed, epoch e > 0 by
SplitMix64(seed ^ SplitMix64(e)). --data-path [W1] PREFIX1 [W2 PREFIX2 ...] blends indexed
datasets (Megatron's BlendedDataset): with the weights normalized, sample i is the next
sample of the dataset d maximizing W_d * max(i,1) - taken_d (ties: the first), so every prefix
holds each dataset's share to within about a sample; --data-path PREFIX alone is --data
PREFIX. Each data-parallel rank reads only its rows of each micro-batch, when the step runs,
straight from the memory-mapped files (tokens are checked against the vocabulary then).
lr schedule, for step s = 1..N (Megatron's, starting at lr/W instead of 0):
  s <= W:   lr * s / W
  constant: lr
  cosine:   min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (s - W) / (N - W)))
(in PyTorch: LambdaLR(opt, lambda i: schedule(i + 1) / lr), stepped after each step).
--clip-grad C > 0 scales the gradients by min(1, C / (norm + 1e-6)).
--precision fp64 converts the model (parameters and compute) to f64. bf16 and fp16 are mixed
precision (mega-training-precision): half compute, f32 master weights, gradient accumulators
and Adam state, f32 LayerNorm/RmsNorm statistics, softmax and loss. fp16 adds dynamic loss
scaling (Megatron's DynamicGradScaler): gradients are computed for loss * scale; a step whose
gradients overflow (inf/nan) is skipped (logged "skipped") and, from the hysteresis-th
overflow since the last growth on, halves the scale (not below --min-loss-scale); after
--loss-scale-window consecutive clean steps the scale doubles.
--seed seeds initialization (zoo models) and BERT's masks.
--log-json writes one JSON object per step and line: step, loss, lr, grad_norm (before
clipping), loss_scale, skipped, tokens, tokens_per_s, step_time_s, model_tflops_per_rank
(model FLOPs: 3x the forward's, `megac describe`'s training FLOP per token, x tokens / step
time / ranks), mfu (model_tflops_per_rank over the GPU's dense bf16 peak: CUDA bf16/fp16 runs
on A100/H100/H200 only), mem_plan_bytes (rank 0's planned arena) and mem_rss_peak_bytes (rank
0's peak resident set). --log-interval N (default
1; Megatron's): when stdout is not a terminal, one line every N steps (and after the last)
with the mean loss and step time of those steps and the last step's lr and grad_norm; the
JSON log still has every step. --tensorboard-dir DIR (created if missing) gets a new
TensorBoard event file per run, events.out.tfevents.<unix time>.<host>, flushed every step:
the JSON log's values as float32 scalars at their steps, tagged train/<key> (train/loss,
train/lr, train/grad_norm, ..., train/moe_load/layer<L>/expert<E>), val/loss and
val/perplexity, test/loss and test/perplexity (`tensorboard --logdir DIR`).
--save-weights writes the final parameters, whole (shards gathered on rank 0), in the layout
of a one-rank run. --save-hf DIR (a --model hf: run) writes them as a folder transformers
loads (from_pretrained): safetensors shards of at most --hf-shard-size (default 5GB) and their
index, the input folder's config.json and tokenizer files; written as DIR.tmp-XXXXXX and
renamed, and refused when DIR exists (docs/huggingface.md). A --model hf:DIR folder with
model.safetensors or model.safetensors.index.json starts from those weights, each rank reading
its own shards; a missing tensor is an error unless --allow-missing NAME names it (it keeps
its initialisation). --save-grads writes the gradient of every parameter after step 1's
backward pass, before the optimizer (the accumulators summed over their data-parallel shares,
shards gathered; fp16 runs write loss-scaled gradients). A non-finite loss stops the run
(exit 1), and so does a non-finite step-1 gradient with --save-grads (except in fp16, where
an overflowing step is the loss scaler's to skip).
validation: --eval-data (rows like --data's) is evaluated every --eval-interval steps and
after the last: the mean loss of --eval-iters global batches and its perplexity, printed and
logged as {"step", "val_loss", "val_ppl"} lines; training is unaffected (its gradients are
dropped). --split A,B,C (Megatron's, e.g. 949,50,1; with --data PREFIX or --data-path)
splits each dataset's documents in order into train, validation and test parts in those
proportions: training windows come from the first part only, and without --eval-data the
validation part is what --eval-interval evaluates (windows cut and shuffled the same way).
A nonzero test part is evaluated once after the last step (--eval-iters batches), printed
as "test after step N: loss, perplexity" and logged as {"step", "test_loss", "test_ppl"}.
checkpoints: --save DIR writes DIR/step-<N>/ every --save-interval steps and after the last
step: each rank writes the shards it holds to model-rank-<R>.safetensors (parameters) and
optimizer-rank-<R>.safetensors (the Adam moments, adam.m.<p>, adam.v.<p>), a shard several
ranks hold (dp replicas) by the lowest of them only; rank 0 writes meta.json (format version
2, step, data position, seed, loss scaler, model, layout, every tensor's dtype, global shape
and shards {file, offset, shape}, each file's bytes and CRC32). It is written as
step-<N>.tmp-<host>-<pid>, fsynced and renamed, then DIR/latest (the step) is replaced, so a
crash never damages the previous checkpoint; the next save removes what failed saves left.
--keep-last N keeps the N newest steps (and every step --keep-steps A,B,... lists) and removes
the others after each save. Rank 0 locks DIR (DIR/save.lock: host, pid) for the run: a second
run saving there fails naming the holder; a lock whose process has ended (same host) is taken
over with a warning. --load DIR resumes from the step DIR/latest names (else the
newest complete step-<N>): each rank reads only the parts of the shards that overlap its
own, so a checkpoint loads under any layout (tp, pp, dp, ZeRO); a missing file, or one whose
size or CRC32 differs from meta.json, is refused, naming it, and every rank tries the next
older checkpoint. --steps is the total: resuming step 4 with --steps 8 runs steps
5..8 (logs, lr schedule, data and Adam's step count continue from the global step); the same
layout continues bit-for-bit. meta.json carries its own CRC32 and the model's fingerprint
(parameter names and shapes, the forward graph): a checkpoint of another model is refused,
naming what differs. --finetune loads the parameters only and starts at step 0;
--no-load-optim keeps a fresh optimizer state; --no-load-rng takes this run's --seed over the
checkpoint's without a warning.
stopping: with --exit-signal-handler (the default with --save; --no-exit-signal-handler turns
it off) a rank that receives SIGUSR1 or SIGUSR2 (and, run without mpirun, SIGTERM or SIGINT)
asks to stop; with --exit-duration-in-mins M one whose wall time passes M minutes does. At
every step boundary the ranks all-reduce the requests, and when any rank asked they save
DIR/step-<N> together (with --save), print "stopped after step N of T on <why>" and exit 0;
--load DIR resumes from there. The --ranks launcher turns a SIGTERM or SIGINT it receives into
SIGUSR2 for the ranks (mpirun forwards SIGUSR1/SIGUSR2 untouched, but follows a SIGTERM with
SIGKILL about a second later): under a scheduler with mpirun, signal mpirun with SIGUSR2
(examples/sbatch-train.sh).
--trace writes the executed timeline of N steps (--trace-steps, default 2) from step 2 (step 1
warms up; a one-step run traces step 1) as Chrome trace-event JSON, the format of
`megac plan --trace` (open it in Perfetto): per rank (pid) the functions and instructions run
(tid 0), every collective, send, recv and wait with its group and bytes (tid 1), and the
optimizer steps with their pipeline steps "F<micro-batch> c<chunk>" (tid 2); otherData holds
each rank's arena_bytes and peak_rss_bytes. The ranks' clocks are aligned by a barrier before
the first traced step.)";

const char *const kDataHelp =
    R"(usage: megac data prep INPUT.txt|INPUT.jsonl --tokenizer SPEC -o PREFIX
                       [--append-eod] [--json-key text] [--workers N]
       megac data info PREFIX

prep writes PREFIX.bin and PREFIX.idx, Megatron's indexed dataset format, for
`megac train --data PREFIX`. Documents: in a .jsonl file, the string --json-key (default "text")
of each line's object; in any other file, the paragraphs (runs of lines between empty lines),
newlines included. Empty documents are skipped.
--tokenizer byte                      each UTF-8 byte is one token (0..255); end of document 256
--tokenizer gpt2:VOCAB.json,MERGES.txt   GPT-2's byte-level BPE files (as OpenAI released them)
--tokenizer hf:TOKENIZER.json         a Hugging Face byte-level BPE (GPT-2, RoBERTa, Llama-3 kind)
--append-eod ends every document with the tokenizer's end-of-document token (<|endoftext|>).
Tokens are uint16 when the vocabulary has fewer than 65500 ids, else int32 (Megatron's rule).
--workers N tokenizes on N threads (default: the hardware's); the output does not depend on N.
info prints a dataset's dtype, sequence, document and token counts.)";

const char *const kGenerateHelp =
    R"(usage: megac generate --load DIR --prompt TEXT [--max-tokens N] [--tokenizer SPEC]
                      [--temperature T] [--top-k K] [--top-p P] [--seed S]
                      [--model SPEC | --onnx MODEL.onnx]
       megac generate --model hf:FOLDER[,seq=S] --prompt TEXT [--no-kv-cache]
                      [options as above]

Continues TEXT with the model of the newest checkpoint under DIR (`megac train --save DIR`):
a zoo GPT (--model overrides the checkpoint's spec) or an ONNX-imported causal LM taking
input_ids (GPT-2, Llama exports, ...), rebuilt from the .onnx file the checkpoint records
(--onnx gives it where it has moved; its size and CRC32 must match the recorded ones).
--tokenizer (byte, gpt2:VOCAB.json,MERGES.txt or hf:TOKENIZER.json; default byte) encodes
TEXT and decodes the new tokens, printed as they are produced; ids past the tokenizer's
vocabulary (a padded embedding) are never chosen, and its end-of-document token ends the text.
--temperature 0 (the default) is greedy decoding, deterministic: each token is the argmax of
the forward pass's logits. T > 0 samples from softmax(logits / T), restricted to the K most
likely tokens (--top-k) and to the smallest set whose probability reaches P (--top-p), with a
generator seeded by --seed (default 0), so a run is repeatable. --max-tokens defaults to 64.
The time per token goes to stderr.

--model hf:FOLDER (without --load) generates with a transformers folder's model and weights
(model.safetensors or its sharded index; docs/huggingface.md); its window is seq=S, else the
prompt's tokens plus --max-tokens (nothing slides out: greedy decoding gives transformers'
greedy generate). It keeps a KV cache: one forward over the prompt, then a decode step per new
token over the cached keys and values (O(window) per token); --no-kv-cache runs the forward over
the window for every token instead (the same tokens, for comparison). Once the text outgrows
seq=S the window slides and each token takes the forward.)";

const char *const kExportHelp = R"(usage: megac export --load DIR --onnx MODEL.onnx -o TRAINED.onnx
       megac export --load DIR --hf OUT [--model hf:FOLDER] [--hf-shard-size SIZE]

Writes the newest checkpoint under DIR (`megac train MODEL.onnx --save DIR`) into a copy of
MODEL.onnx: every initializer that megac trained as a parameter gets the checkpoint's tensor,
in the initializer's own element type and layout; the graph, constants (masks, shapes),
metadata and opsets are kept byte for byte. MODEL.onnx must be the file the checkpoint was
trained from (its size and CRC32 are recorded at save time); a tensor that does not map onto
the model is refused by name. TRAINED.onnx is written atomically (a temporary file, then a
rename).

With --hf, a checkpoint of an hf: model (`megac train --model hf:FOLDER --save DIR`) is written
as the folder `megac train --save-hf` writes: config.json and the tokenizer files copied from
FOLDER (--model, default the model the checkpoint records), safetensors shards of at most SIZE
(default 5GB) with model.safetensors.index.json, in the config's torch_dtype; OUT must not exist
and is written atomically (OUT.tmp-XXXXXX, then a rename).)";

const char *const kPlanHelp =
    R"(usage: megac plan MODEL --cluster SPEC --global-batch B [--seq S] [--tp T --pp P --dp D
                  --cp C --cp-comm-type all_gather|p2p --ep E --vpp V --micro-batch b
                  --sequence-parallel|--no-sequence-parallel
                  --zero 0|1|2|3 --recompute none|selective|full
                  --schedule 1f1b|interleaved|zb-h1|zb-h2|zbv] [--precision bf16|fp16|fp32]
                  [--top K] [--threads T] [--reshard-after-forward on|off]
                  [--stack megac|megatron-2021|megatron-deepspeed|megatron-core] [--dropout P]
                  [--moe-load TRAIN.jsonl] [--overlap on|off] [--bucket-size N] [--explain]
                  [--json] [--timeline FILE.svg] [--trace FILE.json] [--no-compile]

The planner: predicts the step time, throughput, TFLOP/s, MFU and memory per device of every
layout on the cluster (a100-40g, a100-80g, h100-sxm, h200, cpu, or FILE.json; "a100-80g:128x8" is
128 nodes of 8) and prints the best K, why #1 beats #2, and confirms the partitioner accepts #1.
Degrees given are pinned; the rest are searched. --timeline draws #1's pipeline schedule (SVG),
--trace writes it as Chrome trace-event JSON (Perfetto). Predictions are for a hardware spec
and a software stack: --stack megac (default: this build's CUDA runtime, or its CPU runtime on
cpu devices and `megac calibrate --backend cpu` specs), megatron-2021, megatron-deepspeed or
megatron-core (docs/planner.md lists what each fuses and overlaps); --dropout P costs dropout
the model's IR does not have. --moe-load TRAIN.jsonl (a `megac train --log-json` of this MoE
model): dropless routing as that run measured it, the busiest expert-parallel rank charged its
share of the logged moe_load (summed over the records) instead of a balanced one. --overlap on|off and --bucket-size N: the compiled plan's (as megac
train's; default off): megac's stack overlaps the dp reduction (and ZeRO-1's parameter gather)
only with --overlap on, at pp 1 and ZeRO 0/1 over more than one bucket. Mixture-of-experts
models also search --ep (expert parallelism, dividing dp and the experts; docs/moe.md). --cp C (context parallelism: each sequence split over
C ranks, 2*C dividing it; world = tp*cp*pp*dp; its K/V exchange all_gather or the p2p ring, both
tried where the stack runs both, --cp-comm-type pins one) and --zero 2|3 (gradients, and parameters,
sharded over the dp x cp ranks; needs dp > 1) are searched too, zero 3 at pp 1 with and
without reshard after forward (--reshard-after-forward pins it); the report says why #1 beats the
best zero-3 layout (and which reshard setting it took, and why) and the best layout with (or
without) cp. --threads T: on a `megac calibrate
--backend cpu` spec, the kernel threads per rank the layouts run (as megac train --threads;
default cores / ranks per node), which picks the calibration's measured occupancy. --explain
splits #1's predicted step by op class (GEMM, attention, memory-bound, launch overhead, each
collective, bubble) and explains its compiled plan.
Pipeline schedules are searched too: 1f1b (interleaved at vpp > 1) and, on megac's stack, the
zero-bubble zb-h1 and zb-h2 (vpp 1) and zbv (vpp 2) where the micro-batches are at least pp
(docs/pipeline.md); --schedule pins one, and the report says why #1's schedule beats the best
zero-bubble layout (the bubble saved, or the memory it costs).

usage: megac plan MODEL --ranks N [--tp T --pp P --dp D --vpp V --sequence-parallel
                  --zero 0|1 --recompute none|selective|full
                  --schedule 1f1b|gpipe|zb-h1|zb-h2|zbv --bucket-size N] [--micro-batch b] [--global-batch B]
                  [--precision fp32|fp64|bf16|fp16] [--data TOKENS.npy] [--explain] [--json]
                  [-o FILE.mplan]

Compiles the training step exactly as `megac train` with the same arguments would, for every
rank of the layout, and explains the plan: the mesh and pipeline, per role (pipeline stage) the
parameters with their sharding and bytes per rank, gradient and optimizer-state bytes, the arena,
and every collective and transfer of one call of each function with its group and size. --json
prints the same numbers as JSON; -o writes the plan (one program per role and the rank table).
Defaults: --micro-batch 1, --global-batch micro-batch x dp x pp, the sequence length from the
model spec (or --data).)";

const char *const kCalibrateHelp =
    R"(usage: megac calibrate [--backend cpu|cuda] [--ranks N] [--threads T] [--quick]
                       [--allow-tf32] [--oversubscribe] -o HW.json

Measures this machine with the runtime's own kernels and writes a device spec for the planner:
`megac plan MODEL --cluster HW.json:NODESxPER_NODE ...`. Every group runs on all ranks at once,
as training does, and each point is the slowest rank's:
  instruction  the executor's cost of one tiny instruction (cuda: also an empty kernel launch)
  gemm         Linear/MatMul over square and transformer shapes, f32 and bf16 (cuda: fp16 too)
  bandwidth    a streaming copy from 16 KiB to 256 MiB working sets (cuda: 64 KiB to 2 GiB)
  kernels      each memory-bound kernel class (norms, softmax, GELU, cross-entropy, AdamW, ...)
               in cache and in DRAM, one instruction each
  attention    causal Attention and AttentionGrad at a few (batch x heads, seq, head dim)
  collectives  all-reduce, all-gather, reduce-scatter and send/recv from 4 B to 64 MiB
               (only with --ranks N > 1; over NCCL on GPUs)
Points repeat until about 50 ms each (--quick: a few points, 10 ms each, for tests); the
whole CPU run takes about a minute per occupancy. No training plan is run.

One spec per machine: `--backend cpu` without --ranks and --threads measures three occupancies
of the node, one rank alone with 1 thread and with every core's threads, and every core busy
(ranks = cores, 1 thread each, with the collectives under mpirun), and writes them as named
tables of one spec; `megac plan` picks each layout's (ranks per node x --threads) tables.

  --backend cpu|cuda  cpu: OpenBLAS and the reference kernels (MPI between ranks); cuda: one GPU
                      per rank (cuBLASLt, the CUDA kernels, NCCL). Default: cuda when usable.
  --ranks N           N processes, started under mpirun as `megac train --ranks` does, one
                      occupancy (default: the three above on a CPU of several cores, else 1;
                      a job already started by mpirun is detected)
  --threads T         CPU kernel/BLAS threads per rank (default: cores / ranks on this node)
  --oversubscribe     pass --oversubscribe to mpirun (it is added anyway when N > cores)
  --allow-tf32        cuda: fp32 GEMMs through TF32 tensor cores
  -o HW.json          the device spec to write (rank 0 writes it))";

} // namespace megac::cli
