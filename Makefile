# Makefile — dsgd-run: distributed SGD methods (Jin et al. 2016; Chen et al. 2016) over MPI.
#
#   make            build ./dsgd-run (CPU backend: oneDNN; never needs nvcc)
#   make run        install missing Debian packages, build, run configs/quickstart.cfg on 2 ranks
#   make check      install missing Debian packages, build and run every test (Check + MPI)
#   make deps       install missing Debian packages only (root: apt-get; else print the line)
#
# Knobs: CC (an MPI compiler wrapper), OPT, NP (ranks for `make run`), CONFIG, RUN_ARGS.
# CUDA ?= 0 is reserved for the GPU backend in cuda/ (a later issue).

CC      ?= mpicc
ifeq ($(origin CC),default)
CC      := mpicc
endif
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT) -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp
NP      ?= 2
CONFIG  ?= configs/quickstart.cfg
RUN_ARGS ?=
MPIEXEC ?= mpiexec
CUDA    ?= 0

# pkg-config names and the Debian packages that provide them. oneDNN ships no .pc file in
# Debian 12, so it is found by its header.
PKGS    := libconfig hdf5 zlib
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
INCLUDES := -Isrc
LDLIBS   = $(PKG_LIBS) -ldnnl -lm

SRC  := $(wildcard src/*/*.c)
OBJ  := $(SRC:%.c=build/%.o)
LIB  := build/libdsgd.a
BIN  := dsgd-run
TESTS := $(patsubst test/%.c,build/test/%,$(wildcard test/test_*.c))

ifneq ($(CUDA),0)
$(error CUDA=$(CUDA): the GPU backend (cuda/) is not built yet; build the CPU backend with plain `make`)
endif

.PHONY: all run check deps clean
all: $(BIN)

deps:
	@sh tools/install-deps.sh

# Stops the build with the Debian package to install when a library is missing.
build/.deps-ok: tools/check-deps.sh
	@sh tools/check-deps.sh
	@mkdir -p build && touch $@

build/%.o: %.c | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): build/src/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/test/%: test/%.c test/testutil.h test/h5ref.h test/alloccount.h test/mpiutil.h $(LIB) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) -Itest $(PKG_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(LIB) $(CHECK_LIBS) $(LDLIBS)

run: deps
	@$(MAKE) --no-print-directory $(BIN)
	$(MPIEXEC) -n $(NP) ./$(BIN) $(RUN_ARGS) $(CONFIG)

# Every test binary runs under a timeout so that a hang fails instead of stalling CI.
check: deps
	@$(MAKE) --no-print-directory $(BIN) $(TESTS)
	@sh test/run-tests.sh $(TESTS)

clean:
	rm -rf build $(BIN)

-include $(OBJ:.o=.d) build/src/main.d

# ---- bench (owner: src/nn): img/s of model_train_step, tools/bench_model.c; compare with
# /usr/bin/python3 tools/bench_torch.py (the same network in PyTorch).
.PHONY: bench
build/bench_model: tools/bench_model.c $(LIB) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

bench: build/bench_model
	./build/bench_model
