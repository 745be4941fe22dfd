# kvq - GNU Make build.
#
#   make            library (static + shared), the kvq tool, tests, bench
#   make test       build and run every test (ends "N passed, N failed")
#   make sanitize   the same tests built with -fsanitize=address,undefined
#   make coverage   line and branch coverage of src/ by the tests (gcov)
#   make bench      benchmarks (timings live here, never in tests)
#   make demo       the main job: a cache-type sweep on the bundled model
#   make fuzz       libFuzzer targets fuzz/fuzz_*.c (needs clang); make
#                   fuzz-smoke runs each for a fixed number of inputs
#   make install PREFIX=/usr/local
#
# src/ is in layers, each a folder, each using only those below it
# (make check-layers):  base < format < cache < model < eval.
#   base    CPU features, threads, errors, files, hashes, SIMD primitives
#   format  the type table and every format: blocks, KVarN, TurboQuant, rotation
#   cache   the KV cache, its exact rows, editing and state, attention kernels
#   model   GGUF, models, the forward pass, matmul, tokenizers, sampler
#   eval    KLD and base files, statistics, sweep, ladder, plots, planner, drift
# Sources are found by wildcard: a new src/LAYER/*.c needs no Makefile edit.
#
# Builds run one job per CPU unless -j is given (a serial build of
# everything took 2 min 22 s on a 2-core machine, -j2 about half);
# JOBS=1 for a serial build.  Only the top-level make sets it: a
# recursive one (check-clang, sanitize) shares its parent's job slots.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
ifeq ($(MAKELEVEL),0)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(JOBS)
endif
endif
# Files named *_avx2.c / *_avx512.c / *_vnni*.c (AVX-512 + AVX512_VNNI) /
# *_vbmi.c (AVX-512 + AVX512_VBMI + AVX512_VNNI) are
# compiled with those ISA flags and only called after run-time CPU
# detection (src/base/cpu.c).

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O2
# Line tables only (file:line in backtraces, sanitizer reports and perf
# annotate): full -g took a third of the attention kernels' compile time,
# a clean `make -j2` 60 s against 45.  `make DEBUG=-g` for a debugger's
# variables.
DEBUG   ?= -g1
CSTD     = -std=c11
WARN     = -Wall -Wextra -Werror
LAYERS = base format cache model eval
CPPFLAGS_ALL = -Iinclude $(LAYERS:%=-Isrc/%) -D_GNU_SOURCE
# glibc's _FORTIFY_SOURCE, as Ubuntu's gcc turns it on by default: bounds
# checks on string and I/O calls, and warn_unused_result on fread and its
# kin, so an ignored result fails here on every distribution, not only
# there.  It needs an optimised build; the sanitizer builds leave it off
# (their interceptors do the checking).
FORTIFY     ?= $(if $(filter -O0,$(OPT)),,-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2)
CFLAGS_ALL   = $(CSTD) $(OPT) $(WARN) -fPIC -pthread $(DEBUG) $(FORTIFY) $(EXTRA_CFLAGS)
LDLIBS_ALL   = -lm -pthread

AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mavx2
# *_vnni.c: the AVX-512 level's kernels that need AVX512_VNNI (vpdpbusd),
# reached only when kvq_cpu_features()->avx512vnni says the CPU has it.
VNNI_FLAGS   = $(AVX512_FLAGS) -mavx512vnni
# *_vbmi.c: AVX-512 kernels that need AVX512_VBMI (vpermb, vpermi2b,
# vpmultishiftqb) and AVX512_VNNI (vpdpbusd, vpdpwssd: the trellis codes'
# int8-query dot and integer V sums), reached only where
# kvq_cpu_features() says the CPU has both.
VBMI_FLAGS   = $(AVX512_FLAGS) -mavx512vbmi -mavx512vnni

LIB_SRC   := $(sort $(wildcard $(LAYERS:%=src/%/*.c)))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/%.o)
# the CLI's command implementations are shared with the tests and bench
CLI_LIB_OBJ := $(filter-out $(BUILD)/tools/main.o,$(TOOL_OBJ))

STATIC  = $(BUILD)/libkvq.a
SHARED  = $(BUILD)/libkvq.so
KVQ     = $(BUILD)/kvq
TESTS   = $(BUILD)/run_tests
BENCH   = $(BUILD)/kvq-bench
EXAMPLES = $(EXAMPLE_SRC:examples/%.c=$(BUILD)/examples/%)

.PHONY: all test sanitize bench demo install clean coverage check-layers check-clang
# `make` builds what a user runs: the libraries, the CLI and the examples.
# The tests and the benchmarks are built by `make test` and `make bench`
# (and compiled with clang by check-clang), which a first `make` need not
# wait for: they were 27 s of its 75 on 2 cores (2026-12-06).
all: $(STATIC) $(SHARED) $(KVQ) $(EXAMPLES)

isa_flags = $(if $(findstring _vbmi,$1),$(VBMI_FLAGS),$(if $(findstring _vnni,$1),$(VNNI_FLAGS),$(if $(findstring _avx512,$1),$(AVX512_FLAGS),$(if $(findstring _avx2,$1),$(AVX2_FLAGS),))))

# Library objects hide every symbol not marked KVQ_API (include/kvq.h).
lib_flags = $(if $(filter src/%,$1),-fvisibility=hidden,)

# tools/ (the kvq command) see the public headers alone: -Iinclude, no
# src/ folder, so a tool that reaches for an internal header does not
# compile (tools/check_layers.sh says so too).
cppflags_for = $(if $(filter tools/%,$1),-Iinclude -D_GNU_SOURCE,$(CPPFLAGS_ALL))

# The hash of the sources (include/, src/, tools/) this build compiles:
# kvq_source_id() (src/base/source_id.c, given it by -D), by which `kvq
# sweep` names the results it stores, so a rebuilt kvq never resumes an
# older build's figures.  The stamp file is rewritten only when the hash
# changes, and source_id.o alone depends on it.
SOURCE_ID_FILES := $(sort $(wildcard include/*.h tools/*.[ch] $(foreach l,$(LAYERS),src/$(l)/*.[ch] src/$(l)/*.inc)))
SOURCE_ID := $(shell cat $(SOURCE_ID_FILES) | sha256sum | cut -c1-16)
SOURCE_ID_STAMP = $(BUILD)/source_id.stamp
.PHONY: FORCE
$(SOURCE_ID_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(SOURCE_ID)' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@
	@rm -f $@.tmp
$(BUILD)/src/base/source_id.o: $(SOURCE_ID_STAMP)
$(BUILD)/src/base/source_id.o: EXTRA_CPPFLAGS = -DKVQ_SOURCE_ID='"$(SOURCE_ID)"'

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(call cppflags_for,$<) $(EXTRA_CPPFLAGS) $(CFLAGS_ALL) $(call isa_flags,$<) $(call lib_flags,$<) -MMD -MP -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libkvq.so.0 (SONAME: programs linked against it record libkvq.so.0) and
# the development link libkvq.so pointing at it.
SONAME = libkvq.so.0
$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $(BUILD)/$(SONAME) $^ $(LDLIBS_ALL) $(EXTRA_LDFLAGS)
	ln -sf $(SONAME) $@

$(KVQ): $(TOOL_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(TOOL_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

$(TESTS): $(TEST_OBJ) $(CLI_LIB_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(TEST_OBJ) $(CLI_LIB_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

$(BENCH): $(BENCH_OBJ) $(CLI_LIB_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(BENCH_OBJ) $(CLI_LIB_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

# Every #include "x.h" of a src/ file names a header of its own layer or
# one below, or a public one (include/); every tools/ file includes only
# public headers and the tools' own (tools/check_layers.sh); CI runs it.
# It also holds every allocation of src/ to src/base/alloc.h's kvq_malloc &
# co, so the out-of-memory test (tests/test_oom.c) reaches all of them.
check-layers:
	@sh tools/check_layers.sh $(LAYERS)
	@if grep -nE '\b(malloc|calloc|realloc|strdup|strndup|aligned_alloc|posix_memalign)\(' \
	    $(filter-out src/base/alloc.c,$(LIB_SRC)) $(wildcard $(LAYERS:%=src/%/*.h) $(LAYERS:%=src/%/*.inc)); then \
	    echo "check-layers: allocate with kvq_malloc/kvq_calloc/kvq_realloc (src/base/alloc.h) in src/"; exit 1; \
	else echo "check-layers: every allocation of src/ goes through src/base/alloc.h"; fi

# The ground rules say gcc and clang: every source compiled (not linked,
# not run) by clang with the same -Werror flags, so a warning only clang
# gives fails here rather than in fuzz-smoke.  CI runs it when clang exists.
CLANG ?= clang
check-clang:
	$(MAKE) BUILD=build-clang CC=$(CLANG) OPT=-O1 $(LIB_OBJ:$(BUILD)/%=build-clang/%) \
	    $(TOOL_OBJ:$(BUILD)/%=build-clang/%) $(TEST_OBJ:$(BUILD)/%=build-clang/%) \
	    $(BENCH_OBJ:$(BUILD)/%=build-clang/%) build-clang/examples/generate

# Examples use the public header alone (-Iinclude, no src/).
$(BUILD)/examples/%: examples/%.c include/kvq.h include/kvq_eval.h $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) -Iinclude $(CFLAGS_ALL) -o $@ $< $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

# Tests find the CLI through KVQ_BIN and the shared assets through
# KVQ_SHARED (default ../shared); both are optional.
test: $(TESTS) $(KVQ) $(EXAMPLES) $(SHARED)
	KVQ_BIN=$(abspath $(KVQ)) KVQ_EXAMPLES=$(abspath $(BUILD)/examples) KVQ_SHARED_LIB=$(abspath $(BUILD)/$(SONAME)) \
	    $(TESTS) $(TEST_ARGS)

# make sanitize CC=clang builds in build-san-clang: clang's UBSan also
# flags NULL + 0, which gcc's does not (CI uses clang when it has it).
SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_BUILD ?= build-san$(if $(findstring clang,$(CC)),-clang,)
sanitize:
	$(MAKE) BUILD=$(SAN_BUILD) OPT=-O1 FORTIFY= EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)" \
	    $(SAN_BUILD)/run_tests $(SAN_BUILD)/kvq $(SAN_BUILD)/examples/generate
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 KVQ_SANITIZE=1 \
	    KVQ_BIN=$(abspath $(SAN_BUILD)/kvq) KVQ_EXAMPLES=$(abspath $(SAN_BUILD)/examples) $(SAN_BUILD)/run_tests $(TEST_ARGS)

bench: $(BENCH) $(KVQ)
	KVQ_BIN=$(abspath $(KVQ)) $(BENCH) $(BENCH_ARGS)

# The main job: every cache type on the bundled model (a small qwen3 trained
# on Jane Austen, head_dim 128) over held-out text; prints the table and the
# recommendation ladder, writes them with the plot into out/demo.
# At 4096 tokens, the context the model was extended to: one chunk (2,047
# scored positions) of the block, KVarN and TurboQuant families, rotation on
# and off, with and without a 128-token tail, two configurations at a time.
DEMO_MODEL ?= models/austen-qwen3-h128-4k-q8_0.gguf
DEMO_TEXT  ?= models/northanger-120k.txt
DEMO_TYPES ?= f16,q8_0,q5_0,q4_0,iq4_nl,q3_0,q2_0,kvarn4,kvarn3,kvarn2,turbo4_tcq,turbo3_tcq,turbo2_tcq
DEMO_ARGS  ?= -c 4096 --chunks 1 --types $(DEMO_TYPES) --pairs q8_0/q4_0 --tails 0,128 --rot both --jobs 2
demo: $(KVQ)
	@mkdir -p out
	$(KVQ) sweep -m $(DEMO_MODEL) -f $(DEMO_TEXT) $(DEMO_ARGS) -o out/demo

# Fuzzing (docs/fuzzing.md): every fuzz/fuzz_NAME.c is a libFuzzer target
# NAME (a new target is one more file), seeded from fuzz/corpus/NAME/.
#   make fuzz                      each target for FUZZ_TIME seconds
#   make fuzz FUZZ_TARGET=gguf FUZZ_TIME=600
#   make fuzz-smoke                each target for FUZZ_RUNS inputs (fixed
#                                  seed), skipped with a message without clang
#   make fuzz-corpus               rewrite the generated seeds
FUZZ_CC ?= clang
FUZZ_TIME ?= 60
FUZZ_RUNS ?= 20000
FUZZ_TARGET ?= all
FUZZ_MAX_LEN ?= 65536
FUZZ_NAMES := $(patsubst fuzz/fuzz_%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_PICK = $(if $(filter all,$(FUZZ_TARGET)),$(FUZZ_NAMES),$(FUZZ_TARGET))
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined

.PHONY: fuzz fuzz-check fuzz-build fuzz-smoke fuzz-corpus
# clang with libFuzzer, or a message saying what is missing (exit 1)
fuzz-check:
	@mkdir -p build-fuzz
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "fuzz: $(FUZZ_CC) not found (Debian: apt-get install clang)"; exit 1; }
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
	    > build-fuzz/probe.c
	@$(FUZZ_CC) -fsanitize=fuzzer build-fuzz/probe.c -o build-fuzz/probe 2>/dev/null || \
	    { echo "fuzz: $(FUZZ_CC) cannot link libFuzzer (Debian: apt-get install libclang-rt-N-dev, N = clang's version)"; exit 1; }

FUZZ_BINS := $(FUZZ_NAMES:%=build-fuzz/fuzz_%)
fuzz-build: fuzz-check
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) OPT=-O1 FORTIFY= \
	    EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" build-fuzz/libkvq.a
	$(MAKE) $(FUZZ_BINS)

$(FUZZ_BINS): build-fuzz/fuzz_%: fuzz/fuzz_%.c build-fuzz/libkvq.a
	$(FUZZ_CC) $(CPPFLAGS_ALL) $(CSTD) $(WARN) -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) -MMD -MP -MF $@.d \
	    $< build-fuzz/libkvq.a -lm -pthread -o $@

# Longest input per target: FUZZ_MAX_LEN, or FUZZ_MAX_LEN_NAME where a
# target's seeds are larger (a state file with a whole KVarN tile: 68 KB).
FUZZ_MAX_LEN_state ?= 262144
FUZZ_MAX_LEN_model ?= 262144
fuzz_len = $(or $(FUZZ_MAX_LEN_$(1)),$(FUZZ_MAX_LEN))
# Inputs per target in fuzz-smoke: FUZZ_RUNS, or FUZZ_RUNS_NAME for a slow
# target (state: three caches restored twice per input, 0.6 ms each).
FUZZ_RUNS_state ?= 5000
fuzz_runs = $(or $(FUZZ_RUNS_$(1)),$(FUZZ_RUNS))
fuzz_seeds = $(wildcard fuzz/corpus/$(1))

# New inputs go to build-fuzz/corpus/NAME (kept between runs, not in git).
fuzz: fuzz-build
	@$(foreach t,$(FUZZ_PICK), \
	    mkdir -p build-fuzz/corpus/$(t) build-fuzz/crashes/$(t) && echo "== fuzz $(t) ($(FUZZ_TIME) s)" && \
	    build-fuzz/fuzz_$(t) -max_total_time=$(FUZZ_TIME) -max_len=$(call fuzz_len,$(t)) -print_final_stats=1 \
	        -artifact_prefix=build-fuzz/crashes/$(t)/ build-fuzz/corpus/$(t) $(call fuzz_seeds,$(t)) || exit 1;)

# A fixed number of inputs per target from a fresh corpus and a fixed
# seed: the same work on every run (no timing), a few seconds in all.
fuzz-smoke:
	@if ! why=$$($(MAKE) -s --no-print-directory fuzz-check 2>/dev/null); then \
	    echo "fuzz-smoke: SKIPPED: $$why"; exit 0; fi; \
	$(MAKE) -s --no-print-directory fuzz-build || exit 1; \
	$(foreach t,$(FUZZ_NAMES), \
	    rm -rf build-fuzz/smoke/$(t) && mkdir -p build-fuzz/smoke/$(t) && \
	    { build-fuzz/fuzz_$(t) -runs=$(call fuzz_runs,$(t)) -seed=1 -max_len=$(call fuzz_len,$(t)) \
	        -artifact_prefix=build-fuzz/smoke/$(t)- build-fuzz/smoke/$(t) $(call fuzz_seeds,$(t)) \
	        >build-fuzz/smoke/$(t).log 2>&1 || \
	      { tail -n 30 build-fuzz/smoke/$(t).log; echo "fuzz-smoke: $(t) FAILED (log: build-fuzz/smoke/$(t).log)"; \
	        exit 1; }; } && \
	    echo "fuzz-smoke: $(t): $(call fuzz_runs,$(t)) inputs, no finding" || exit 1;)

fuzz-corpus: $(STATIC)
	$(CC) $(CPPFLAGS_ALL) $(CSTD) $(WARN) -Itests -O1 fuzz/make_corpus.c $(STATIC) $(LDLIBS_ALL) -o $(BUILD)/make_corpus
	$(BUILD)/make_corpus fuzz/corpus

# Line and branch coverage of src/ by make test's tests (gcc's gcov, no
# other tool): an instrumented build in build-cov, the tests, one summary.
coverage:
	$(MAKE) BUILD=build-cov OPT=-O1 EXTRA_CFLAGS="--coverage -Wno-error=maybe-uninitialized" EXTRA_LDFLAGS="--coverage" \
	    build-cov/run_tests build-cov/kvq
	find build-cov -name '*.gcda' -delete
	KVQ_BIN=$(abspath build-cov/kvq) build-cov/run_tests > build-cov/tests.log 2>&1 || { tail -n 5 build-cov/tests.log; exit 1; }
	@tail -n 1 build-cov/tests.log
	@for l in $(LAYERS); do gcov -b -n -o build-cov/src/$$l src/$$l/*.c 2>/dev/null; done | awk ' \
	    /^Lines executed:/        { split($$2, a, "%"); sub("executed:", "", a[1]); l += a[1] * $$4 / 100; L += $$4 } \
	    /^Taken at least once:/   { split($$4, b, "%"); sub("once:", "", b[1]); t += b[1] * $$6 / 100; T += $$6 } \
	    END { printf "coverage of src/: lines %.1f%% of %d, branches taken %.1f%% of %d\n", 100 * l / L, L, 100 * t / T, T }'

install: $(STATIC) $(SHARED) $(KVQ)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/kvq.h include/kvq_eval.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/$(SONAME) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvq.so
	install -m 755 $(KVQ) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/^#define KVQ_VERSION "\(.*\)"/\1/p' include/kvq.h)|g' \
	    kvq.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvq.pc

clean:
	rm -rf build build-san build-san-clang build-clang build-fuzz build-cov

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(FUZZ_BINS:=.d)
