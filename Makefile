# kvq - GNU Make build.
#
#   make            library (static + shared), the kvq tool, tests, bench
#   make test       build and run every test (ends "N passed, N failed")
#   make sanitize   the same tests built with -fsanitize=address,undefined
#   make bench      benchmarks (timings live here, never in tests)
#   make demo       the main job: a cache-type sweep on the bundled model
#   make fuzz       libFuzzer target for the GGUF reader (needs clang)
#   make install PREFIX=/usr/local
#
# Sources are found by wildcard: a new src/*.c file needs no Makefile edit.
# Files named *_avx2.c / *_avx512.c are compiled with those ISA flags and
# only called after run-time CPU detection (src/cpu.c).

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O2
CSTD     = -std=c11
WARN     = -Wall -Wextra -Werror
CPPFLAGS_ALL = -Iinclude -Isrc -D_GNU_SOURCE
CFLAGS_ALL   = $(CSTD) $(OPT) $(WARN) -fPIC -pthread -g $(EXTRA_CFLAGS)
LDLIBS_ALL   = -lm -pthread

AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mavx2

LIB_SRC   := $(sort $(wildcard src/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

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

.PHONY: all test sanitize bench demo fuzz install clean
all: $(STATIC) $(SHARED) $(KVQ) $(TESTS) $(BENCH)

isa_flags = $(if $(findstring _avx512,$1),$(AVX512_FLAGS),$(if $(findstring _avx2,$1),$(AVX2_FLAGS),))

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(call isa_flags,$<) -MMD -MP -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

$(KVQ): $(TOOL_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(TOOL_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

$(TESTS): $(TEST_OBJ) $(CLI_LIB_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(TEST_OBJ) $(CLI_LIB_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

$(BENCH): $(BENCH_OBJ) $(CLI_LIB_OBJ) $(STATIC)
	$(CC) $(CFLAGS_ALL) -o $@ $(BENCH_OBJ) $(CLI_LIB_OBJ) $(STATIC) $(LDLIBS_ALL) $(EXTRA_LDFLAGS)

# Tests find the CLI through KVQ_BIN and the shared assets through
# KVQ_SHARED (default ../shared); both are optional.
test: $(TESTS) $(KVQ)
	KVQ_BIN=$(abspath $(KVQ)) $(TESTS) $(TEST_ARGS)

SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize:
	$(MAKE) BUILD=build-san OPT=-O1 EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)" \
	    build-san/run_tests build-san/kvq
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 KVQ_SANITIZE=1 \
	    KVQ_BIN=$(abspath build-san/kvq) build-san/run_tests $(TEST_ARGS)

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

FUZZ_CC ?= clang
FUZZ_TIME ?= 60
fuzz:
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) OPT=-O1 \
	    EXTRA_CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" build-fuzz/libkvq.a
	$(FUZZ_CC) $(CPPFLAGS_ALL) $(CSTD) $(WARN) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    fuzz/fuzz_gguf.c build-fuzz/libkvq.a -lm -pthread -o build-fuzz/fuzz_gguf
	mkdir -p build-fuzz/corpus
	build-fuzz/fuzz_gguf -max_total_time=$(FUZZ_TIME) -max_len=65536 build-fuzz/corpus fuzz/corpus

install: $(STATIC) $(SHARED) $(KVQ)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/kvq.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(KVQ) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/^#define KVQ_VERSION "\(.*\)"/\1/p' include/kvq.h)|g' \
	    kvq.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvq.pc

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d)
