# Makefile — dsgd-run: distributed SGD methods (Jin et al. 2016; Chen et al. 2016) over MPI.
#
#   make            build ./dsgd-run (CPU backend: oneDNN; never needs nvcc)
#   make run        install missing Debian packages, build, run configs/quickstart.cfg on 2 ranks
#   make check      install missing Debian packages, build and run every test (Check + MPI)
#   make check-slurm  the batch-job loop and the walk-through of docs/reproduce.md (chained 1-minute
#                   jobs, a SIGKILL, the report's job states) on a multi-node Slurm on localhost
#   make deps       install missing Debian packages only (root: apt-get; else print the line)
#   make show-deps  what CC, OPT and each library resolved to, and from where
#   make check-build  build a copy as a user with modules would (no root, cc, no Check/hdf5.pc)
#   make CUDA=1     the same ./dsgd-run with the GPU backend (cuda/: nvcc, cuDNN, cuBLAS; NCCL if
#                   nccl.h is found) as well;
#                   `make CUDA=1 check` also builds and runs test/gpu/ (they skip without a GPU),
#                   `make CUDA=1 gpu-tests` builds them only
#
# Knobs: CC (a C compiler that compiles and links MPI programs: mpicc by default; Cray: cc,
# Intel MPI: mpiicx, Open MPI beside MPICH on Debian: mpicc.openmpi), OPT, NP (ranks for
# `make run`), CONFIG, RUN_ARGS;
# HDF5_ROOT, LIBCONFIG_ROOT, ZLIB_ROOT, LIBJPEG_ROOT, LIBPNG_ROOT, CHECK_ROOT (a library's prefix,
# with include/ and lib/ or lib64/, e.g. from `module show hdf5`; otherwise pkg-config, the module
# environment's variables, h5cc: docs/build.md); `make show-deps` prints what was found where;
# ONEDNN_ROOT (a site's oneDNN >= 3.0 install, e.g. after `module load onednn`; default: oneDNN
# 3.2 from PyPI unpacked into build/onednn by tools/get_onednn.py on the first build);
# CUDA (0/1), CUDA_HOME, NVCC, CUDA_ARCH (compute capabilities to build for), CUDNN_HOME,
# NCCL_HOME (cuDNN's and NCCL's prefixes when they are not under CUDA_HOME);
# NCCL (auto/0/1: comm = "nccl"; auto = 1 when CUDA=1 and nccl.h is found).

# CC: mpicc; where there is none on PATH, cc (Cray's wrapper links MPI itself; elsewhere
# tools/check-deps.sh stops the build saying what to set).
CC      ?= mpicc
ifeq ($(origin CC),default)
CC      := $(if $(shell command -v mpicc 2>/dev/null),mpicc,cc)
endif
# dsgd-run's own code (oneDNN picks its kernels at run time whatever OPT is): on x86-64 the
# AVX2 level (x86-64-v3; -march=haswell for a compiler older than GCC 11 / Clang 12), so that a
# binary built on a site's login node runs on its compute nodes and the other way round, tuned
# for the building CPU (-mtune changes no instruction set: measured as fast as -march=native in
# decode + augment, docs/build.md); elsewhere (aarch64, ...) the compiler's default target.
# OPT="-O3 -march=native" for the building CPU only.
probe_flags = $(shell $(CC) $(1) -E -x c /dev/null >/dev/null 2>&1 && echo y)
ifeq ($(origin OPT),undefined)
TARGET_ARCH_NAME := $(firstword $(subst -, ,$(shell $(CC) -dumpmachine 2>/dev/null || uname -m)))
ifeq ($(TARGET_ARCH_NAME),x86_64)
OPT     := -O3 $(if $(call probe_flags,-march=x86-64-v3 -mtune=native),-march=x86-64-v3 -mtune=native,$(if \
                    $(call probe_flags,-march=x86-64-v3),-march=x86-64-v3,-march=haswell))
else
OPT     := -O3
endif
endif
CFLAGS  ?= $(OPT) -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp
NP      ?= 2
CONFIG  ?= configs/quickstart.cfg
RUN_ARGS ?=
# The launcher of the MPI that CC compiles for (MPICH's mpicc answers -show, Open MPI's
# --showme): with both installed, plain `mpiexec` is whatever Debian's alternatives point at, and
# another MPI's launcher turns every rank into a world of one. make run uses it; make check puts
# it first on PATH as build/bin/mpiexec, so the tests' `mpiexec` is it too.
MPI_IMPL := $(shell if $(CC) -show 2>/dev/null | grep -q mpich; then echo mpich; \
                    elif $(CC) --showme 2>/dev/null | grep -q mpi; then echo openmpi; fi)
MPIEXEC ?= $(firstword $(shell command -v mpiexec.$(MPI_IMPL) 2>/dev/null) mpiexec)
CUDA    ?= 0

# ---- The libraries: libconfig, HDF5, zlib, libjpeg(-turbo), libpng (dsgd-run --pack), and Check
# (the unit tests only). oneDNN is not among them: Debian 12 has only oneDNN 2.6 and
# src/nn/layers*.c need the 3.x C API (see ONEDNN_ROOT below). Each one, the first that applies:
#   1. <LIB>_ROOT (make HDF5_ROOT=/prefix, or the environment, as Lmod/Spack modules set it):
#      -I<prefix>/include, -L<prefix>/lib64 or lib, -l<lib>;
#   2. pkg-config's entry (hdf5, libconfig, zlib, libjpeg, libpng, check), as on Debian;
#   3. another variable of the module environment whose prefix has the header (HDF5_DIR,
#      HDF5_HOME, EBROOTHDF5, ...: the third argument below);
#   4. HDF5 only: the -I and -L of `h5cc -show` (or h5pcc), HDF5's own compiler wrapper;
#   5. nothing but -l<lib>: the compiler's own paths (Cray's cc adds cray-hdf5's flags itself).
# tools/check-deps.sh then compiles and links a probe with each (`make show-deps` prints them).
# Every -L directory outside the system's /usr/lib* and /lib* also becomes a RUNPATH entry, so
# that the binary finds its libraries on a compute node without LD_LIBRARY_PATH (docs/build.md).
# lib_detect: make prefix, pkg-config name, module variables, header, -l name.
lib_dirs  = $(wildcard $(1)/lib64/lib$(2).so $(1)/lib/lib$(2).so $(1)/lib/*-linux-gnu/lib$(2).so $(1)/lib64/lib$(2).a $(1)/lib/lib$(2).a)
lib_dir   = $(patsubst %/,%,$(dir $(firstword $(call lib_dirs,$(1),$(2)) $(1)/lib/)))
first_var = $(firstword $(foreach v,$(1),$(if $(wildcard $(patsubst %/,%,$($(v)))/include/$(2)),$(v))))
define lib_detect
$(1)_PC  := $$(if $$($(1)_ROOT),,$$(shell pkg-config --exists $(2) 2>/dev/null && echo y))
$(1)_VAR := $$(if $$($(1)_ROOT),$(1)_ROOT,$$(if $$($(1)_PC),,$$(call first_var,$(3),$(4))))
ifneq ($$($(1)_VAR),)
$(1)_PREFIX := $$(patsubst %/,%,$$($$($(1)_VAR)))
$(1)_CFLAGS := -I$$($(1)_PREFIX)/include
$(1)_LIBS   := -L$$(call lib_dir,$$($(1)_PREFIX),$(5)) -l$(5)
$(1)_FROM   := $$($(1)_VAR)=$$($(1)_PREFIX)
else ifneq ($$($(1)_PC),)
$(1)_CFLAGS := $$(shell pkg-config --cflags $(2) 2>/dev/null)
$(1)_LIBS   := $$(shell pkg-config --libs $(2) 2>/dev/null)
$(1)_FROM   := pkg-config $(2)
else
$(1)_CFLAGS :=
$(1)_LIBS   := -l$(5)
$(1)_FROM   := the compiler's own paths; no $(1)_ROOT, no pkg-config $(2)$(if $(3),$(comma) none of $(3))
endif
endef
comma := ,
$(eval $(call lib_detect,LIBCONFIG,libconfig,LIBCONFIG_DIR LIBCONFIG_HOME EBROOTLIBCONFIG,libconfig.h,config))
$(eval $(call lib_detect,HDF5,hdf5,HDF5_DIR HDF5_HOME EBROOTHDF5 CRAY_HDF5_PREFIX,hdf5.h,hdf5))
$(eval $(call lib_detect,ZLIB,zlib,ZLIB_DIR ZLIB_HOME EBROOTZLIB,zlib.h,z))
$(eval $(call lib_detect,LIBJPEG,libjpeg,LIBJPEG_DIR JPEG_ROOT LIBJPEG_TURBO_ROOT EBROOTLIBJPEGMINTURBO,jpeglib.h,jpeg))
$(eval $(call lib_detect,LIBPNG,libpng,LIBPNG_DIR PNG_ROOT EBROOTLIBPNG,png.h,png))
$(eval $(call lib_detect,CHECK,check,CHECK_DIR EBROOTCHECK,check.h,check))
# Check from a prefix: its static library's own needs too (pkg-config's check.pc lists them).
ifneq ($(CHECK_VAR),)
CHECK_LIBS  += -lm -lrt -pthread
endif
# HDF5 without a prefix or a pkg-config entry (its autotools installs ship no hdf5.pc): the
# include and library directories its compiler wrapper passes.
ifeq ($(HDF5_VAR)$(HDF5_PC),)
H5CC := $(firstword $(shell command -v h5cc h5pcc 2>/dev/null))
ifneq ($(H5CC),)
H5CC_SHOW := $(shell $(H5CC) -show 2>/dev/null)
ifneq ($(filter -I%,$(H5CC_SHOW)),)
HDF5_CFLAGS := $(filter -I%,$(H5CC_SHOW))
HDF5_LIBS   := $(addprefix -L,$(firstword $(patsubst -L%,%,$(filter -L%,$(H5CC_SHOW))) \
                 $(patsubst %/,%,$(dir $(filter %/libhdf5.so %/libhdf5.a,$(H5CC_SHOW)))))) -lhdf5
HDF5_FROM   := $(H5CC) -show
endif
endif
endif
PKGS_USED  := LIBCONFIG HDF5 ZLIB LIBJPEG LIBPNG
PKG_CFLAGS := $(strip $(foreach l,$(PKGS_USED),$($(l)_CFLAGS)))
uniq        = $(if $(1),$(firstword $(1)) $(call uniq,$(filter-out $(firstword $(1)),$(1))))
RPATH_DIRS := $(call uniq,$(filter-out /usr/lib% /lib%,$(patsubst -L%,%,$(filter -L%,$(foreach l,$(PKGS_USED) CHECK,$($(l)_LIBS))))))
rpath_of    = $(foreach d,$(filter $(RPATH_DIRS),$(patsubst -L%,%,$(filter -L%,$(1)))),-Wl,-rpath,$(d))
PKG_LIBS   := $(strip $(foreach l,$(PKGS_USED),$($(l)_LIBS)) $(call rpath_of,$(foreach l,$(PKGS_USED),$($(l)_LIBS))))
CHECK_LIBS   := $(strip $(CHECK_LIBS) $(call rpath_of,$(CHECK_LIBS)))
# oneDNN 3.x: a site's install (make ONEDNN_ROOT=/path: include/ and lib/ or lib64/ below it),
# or by default oneDNN 3.2 (PyPI onednn-cpu-gomp 2023.2.0, GNU OpenMP runtime) that
# tools/get_onednn.py fetches with pip into build/onednn when it is missing (sha256-pinned).
# The binaries find libdnnl.so.3 through their rpath.
PYTHON  ?= /usr/bin/python3
ONEDNN_ROOT ?=
ifeq ($(ONEDNN_ROOT),)
ONEDNN_PREFIX := $(CURDIR)/build/onednn
ONEDNN_STAMP  := build/onednn/.version
else
ONEDNN_PREFIX := $(abspath $(ONEDNN_ROOT))
ONEDNN_STAMP  :=
endif
ONEDNN_LIBDIR := $(firstword $(wildcard $(ONEDNN_PREFIX)/lib64/libdnnl.so) $(ONEDNN_PREFIX)/lib/libdnnl.so)
ONEDNN_LIBDIR := $(patsubst %/,%,$(dir $(ONEDNN_LIBDIR)))
ONEDNN_CFLAGS := -I$(ONEDNN_PREFIX)/include
ONEDNN_LIBS   := -L$(ONEDNN_LIBDIR) -Wl,-rpath,$(ONEDNN_LIBDIR) -ldnnl
INCLUDES := -Isrc -Icuda $(ONEDNN_CFLAGS)
LDLIBS   = $(PKG_LIBS) $(ONEDNN_LIBS) -lm

SRC  := $(wildcard src/*/*.c)
OBJ  := $(SRC:%.c=build/%.o)
LIB  := build/libdsgd.a
BIN  := dsgd-run
TESTS := $(patsubst test/%.c,build/test/%,$(wildcard test/test_*.c))

# ---- the GPU backend (cuda/): CUDA=1 compiles cuda/*.cu with nvcc into build/libgpu.a; CUDA=0
# puts cuda/nogpu.c there instead (device = "cuda" then says how to rebuild). Plain `make` never
# runs nvcc. CUDA 13 dropped sm_70 (Volta): it is built only by older toolkits.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
GPU_LIB   := build/libgpu.a
GPU_TESTS :=
# CUDNN_HOME, NCCL_HOME: below (CUDA=1), and test/gpu/mock's headers.
CUDNN_HOME ?= $(patsubst %/,%,$($(call first_var,CUDNN_ROOT CUDNN_DIR CUDNN_PATH EBROOTCUDNN,cudnn.h)))
NCCL_HOME ?= $(patsubst %/,%,$($(call first_var,NCCL_ROOT NCCL_DIR EBROOTNCCL,nccl.h)))
ifeq ($(filter 0 1,$(CUDA)),)
$(error CUDA=$(CUDA): use CUDA=1 (build the GPU backend) or CUDA=0 (the default, CPU only))
endif
ifeq ($(CUDA),0)
GPU_OBJ   := build/cuda/nogpu.o build/cuda/nogpucomm.o
NCCL_ON   := 0
else
NVCC_MAJOR := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
ifeq ($(NVCC_MAJOR),)
$(error CUDA=$(CUDA): no nvcc at $(NVCC); install the CUDA toolkit or set CUDA_HOME / NVCC)
endif
CUDA_ARCH ?= $(if $(filter 1 2 3 4 5 6 7 8 9 10 11 12,$(NVCC_MAJOR)),70 )75 80 86 89 90
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fopenmp \
             $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
GPU_SRC   := $(wildcard cuda/*.cu)
GPU_OBJ   := $(GPU_SRC:%.cu=build/%.o)
GPU_TESTS := $(patsubst test/gpu/%.c,build/test/gpu/%,$(wildcard test/gpu/test_*.c))
# cuDNN from a prefix of its own (module load cudnn; NVIDIA's tarball): CUDNN_HOME, or the module
# environment's CUDNN_ROOT, CUDNN_DIR, CUDNN_PATH, EBROOTCUDNN whose include/ has cudnn.h;
# otherwise under CUDA_HOME or the system's paths. Its include and library directories come
# before CUDA_HOME's, with a RUNPATH entry.
CUDNN_LIBDIR := $(if $(CUDNN_HOME),$(call lib_dir,$(CUDNN_HOME),cudnn))
INCLUDES  += $(if $(CUDNN_HOME),-I$(CUDNN_HOME)/include) -I$(CUDA_HOME)/include
LDLIBS    += $(if $(CUDNN_LIBDIR),-L$(CUDNN_LIBDIR) -Wl$(comma)-rpath$(comma)$(CUDNN_LIBDIR)) \
             -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublas -lcudart -lstdc++ -ldl
# NCCL (comm = "nccl", cuda/gpucomm.cu): compiled in when nccl.h is found; libnccl.so.2 is opened
# at run time (dlopen), never linked, so the binary also starts where NCCL is absent. The
# directory of the libnccl.so.2 seen here is the last place tried at run time. NCCL from a
# prefix of its own (module load nccl): NCCL_HOME, or the module environment's NCCL_ROOT,
# NCCL_DIR, EBROOTNCCL whose include/ has nccl.h; searched before CUDA_HOME and the system's paths.
NCCL      ?= auto
NCCL_HDR  := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h))
NCCL_LIB  := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so.2 $(NCCL_HOME)/lib64/libnccl.so.2) $(CUDA_HOME)/lib64/libnccl.so.2 /usr/local/lib/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2))
NCCL_ON   := $(if $(filter auto,$(NCCL)),$(if $(NCCL_HDR),1,0),$(NCCL))
ifeq ($(NCCL_ON),1)
ifeq ($(NCCL_HDR),)
$(error NCCL=1: no nccl.h under $(if $(NCCL_HOME),$(NCCL_HOME)/include$(comma) )$(CUDA_HOME)/include, /usr/local/include or /usr/include; set NCCL_HOME=<NCCL's prefix> (module load nccl), install NCCL's headers (libnccl-dev) or build with NCCL=0)
endif
NCCL_FLAGS := -DDSGD_NCCL=1 -I$(dir $(NCCL_HDR)) $(if $(NCCL_LIB),-DDSGD_NCCL_LIBDIR='"$(patsubst %/,%,$(dir $(NCCL_LIB)))"')
endif
# Said on every `make CUDA=1` (not in sub-makes): whether comm = "nccl" is compiled in, from where.
ifeq ($(MAKELEVEL)$(filter clean show-deps,$(MAKECMDGOALS)),0)
$(info make CUDA=1: $(if $(filter 1,$(NCCL_ON)),NCCL compiled in (comm = "nccl"): nccl.h from $(patsubst %/,%,$(dir $(NCCL_HDR)))$(comma) libnccl.so.2 opened at run time$(if $(NCCL_LIB),$(comma) last tried in $(patsubst %/,%,$(dir $(NCCL_LIB)))),NCCL not compiled in (comm = "nccl" refused at run time): $(if $(filter 0,$(NCCL)),NCCL=0,no nccl.h under $(if $(NCCL_HOME),$(NCCL_HOME)/include$(comma) )$(CUDA_HOME)/include$(comma) /usr/local/include or /usr/include: set NCCL_HOME=<NCCL's prefix>)))
$(info make CUDA=1: cuDNN from $(or $(CUDNN_HOME),$(CUDA_HOME) or the system's paths))
endif
endif

.PHONY: all run check deps clean gpu-tests FORCE
all: $(BIN)

deps:
	@sh tools/install-deps.sh

# Stops the build, saying what to set or install, when CC does not compile and link an MPI
# program or one of the libraries with the flags found above (tools/check-deps.sh); Check only
# for the test programs (build/.check-ok). Both run again when CC or a library's flags change
# (build/.config).
DEPS_ENV = CC="$(CC)" ONEDNN_CFLAGS="$(ONEDNN_CFLAGS)" $(foreach l,$(1),$(l)_CFLAGS="$($(l)_CFLAGS)" \
           $(l)_LIBS="$(strip $($(l)_LIBS) $(call rpath_of,$($(l)_LIBS)))" $(l)_FROM="$($(l)_FROM)")
DEPS_LINE = $(CC) | $(PKG_CFLAGS) | $(PKG_LIBS) | $(CHECK_CFLAGS) $(CHECK_LIBS) | $(ONEDNN_CFLAGS)
build/.config: FORCE
	@mkdir -p build
	@echo "$(DEPS_LINE)" | cmp -s - $@ || echo "$(DEPS_LINE)" > $@
build/.deps-ok: tools/check-deps.sh $(ONEDNN_STAMP) build/.config
	@$(call DEPS_ENV,$(PKGS_USED)) sh tools/check-deps.sh
	@mkdir -p build && touch $@
build/.check-ok: tools/check-deps.sh build/.config | build/.deps-ok
	@$(call DEPS_ENV,CHECK) sh tools/check-deps.sh --check
	@touch $@

# What CC, OPT and each library resolved to, and from where (the knobs above; docs/build.md).
.PHONY: show-deps
show-deps:
	@echo "CC:       $(CC) (MPI: $(or $(MPI_IMPL),not recognised from -show/--showme; launcher $(MPIEXEC)))"
	@echo "OPT:      $(OPT)"
	@$(foreach l,$(PKGS_USED) CHECK,printf '%-9s %s\n          cflags: %s\n          libs:   %s\n' "$(l):" "$($(l)_FROM)" "$($(l)_CFLAGS)" "$($(l)_LIBS)";)
	@echo "oneDNN:   $(ONEDNN_PREFIX)"
	@echo "RUNPATH:  $(strip $(ONEDNN_LIBDIR) $(RPATH_DIRS))"

build/onednn/.version: tools/get_onednn.py
	@mkdir -p build
	$(PYTHON) tools/get_onednn.py build/onednn

# The compiler flags of the objects in build/: a change of CC, OPT or CFLAGS (e.g. the portable
# OPT of test/gpu/bundle.sh) rebuilds every object instead of mixing flags in one binary.
# A change of the libraries' flags (another HDF5_ROOT, a module) does the same.
build/.cflags: FORCE | build/.deps-ok
	@echo "$(CC) $(CFLAGS) $(ONEDNN_PREFIX) $(PKG_CFLAGS) $(PKG_LIBS)" | cmp -s - $@ || echo "$(CC) $(CFLAGS) $(ONEDNN_PREFIX) $(PKG_CFLAGS) $(PKG_LIBS)" > $@

build/%.o: %.c build/.cflags | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

# Which backend build/libgpu.a holds; a change of CUDA, CUDA_ARCH or NCCL rebuilds and relinks.
build/.backend: FORCE | build/.deps-ok
	@echo "CUDA=$(CUDA) CUDA_ARCH=$(CUDA_ARCH) NCCL=$(NCCL_ON)" | cmp -s - $@ || echo "CUDA=$(CUDA) CUDA_ARCH=$(CUDA_ARCH) NCCL=$(NCCL_ON)" > $@

build/cuda/nogpu.o build/cuda/nogpucomm.o: build/cuda/%.o: cuda/%.c build/.backend build/.cflags | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) -MMD -MP -c $< -o $@

build/cuda/%.o: cuda/%.cu build/.backend | build/.deps-ok
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(INCLUDES) $(NCCL_FLAGS) -MMD -MP -c $< -o $@

$(GPU_LIB): $(GPU_OBJ) build/.backend
	@rm -f $@
	ar rcs $@ $(GPU_OBJ)

$(BIN): build/src/main.o $(LIB) $(GPU_LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The linear-model runs of the MPI tests read a small copy of Fashion-MNIST (test/mpiutil.h,
# TEST_DATA): the first 10,000 training and 2,000 test images of configs/linear.cfg's files,
# uncompressed (test/gpu/make_data.sh --raw), made once instead of inflating 60,000 + 10,000
# images on every rank of every run (docs/testing.md).
TEST_DATA := build/test-data/val-labels
$(TEST_DATA): test/gpu/make_data.sh configs/linear.cfg
	@bash test/gpu/make_data.sh --raw $(@D) 10000 2000 configs/linear.cfg
build/test/test_methods build/test/test_faults build/test/test_checkpoint: | $(TEST_DATA)

build/test/%: test/%.c test/testutil.h test/h5ref.h test/alloccount.h test/mpiutil.h test/jpegutil.h $(wildcard test/gpu/testgpu.h) $(LIB) $(GPU_LIB) build/.cflags | build/.check-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) -Itest $(PKG_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(LIB) $(GPU_LIB) $(CHECK_LIBS) $(LDLIBS)

# test/gpu/mock: cuda/model*.cu and device.cu (host code) compiled by g++ over CPU stand-ins of
# the GPU layers and CUDA calls, checked against src/nn/model.c by test/gpu/test_gpu_model.c: the
# GPU model's wiring, tested by `make check` on machines without a GPU. Needs only the CUDA and
# cuDNN headers; skipped (with a line saying so) where they are absent.
CUDA_HDRS := $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h)
CUDNN_HDR := $(firstword $(wildcard $(if $(CUDNN_HOME),$(CUDNN_HOME)/include/cudnn.h) $(CUDA_HOME)/include/cudnn.h /usr/local/include/cudnn.h /usr/include/cudnn.h))
MOCK_TEST := $(if $(and $(CUDA_HDRS),$(CUDNN_HDR)),build/mock/test_gpu_model build/mock/test_gpu_device build/mock/test_gpu_overlap build/mock/test_gpu_comm build/mock/test_gpu_ops build/mock/test_conv_tune)
MOCK_MODEL := build/mock/model.o build/mock/model_build.o build/mock/model_overlap.o build/mock/device.o
MOCK_OBJ  := $(MOCK_MODEL) build/mock/mock_layers.o build/mock/mock_cuda.o build/mock/gpucomm.o
MOCK_INC  := -I$(CUDA_HOME)/include $(if $(CUDNN_HDR),-I$(dir $(CUDNN_HDR)))
CXX_MOCK  ?= g++
# cuda/gpucomm.cu over the mock too, with NCCL where nccl.h is found: libnccl.so.2 is then the
# one-rank CPU stand-in test/gpu/mock/mock_nccl.c, which the mock tests open through
# DSGD_NCCL_LIBRARY (test_gpu_comm sets it to MOCK_NCCL_LIB).
MOCK_NCCL_HDR := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h))
MOCK_NCCL_LIB := $(CURDIR)/build/mock/libnccl.so.2
MOCK_NCCL := $(if $(MOCK_NCCL_HDR),-DDSGD_NCCL=1 -I$(dir $(MOCK_NCCL_HDR)))
$(MOCK_MODEL): build/mock/%.o: cuda/%.cu cuda/gpu.h cuda/layers.h cuda/common.h cuda/internal.h cuda/model_internal.h src/nn/layout.h | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CXX_MOCK) -x c++ -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Isrc -Icuda $(ONEDNN_CFLAGS) $(MOCK_INC) -c $< -o $@
build/mock/gpucomm.o: cuda/gpucomm.cu cuda/gpucomm.h cuda/gpu.h cuda/common.h cuda/internal.h | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CXX_MOCK) -x c++ -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Isrc -Icuda $(MOCK_INC) $(MOCK_NCCL) -c $< -o $@
build/mock/libnccl.so.2: test/gpu/mock/mock_nccl.c | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -fPIC $(MOCK_INC) $(if $(MOCK_NCCL_HDR),-I$(dir $(MOCK_NCCL_HDR))) -o $@ $<
build/mock/%.o: test/gpu/mock/%.c cuda/layers.h test/gpu/bf16.h test/gpu/mock/mock_capture.h | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -Icuda $(ONEDNN_CFLAGS) $(MOCK_INC) -c $< -o $@
# cuda/layers_conv.cu's algorithm choice (gpu_conv_tune) over the runtime stand-ins and the cuDNN
# convolution stand-ins of test_conv_tune.c.
build/mock/layers_conv.o: cuda/layers_conv.cu cuda/layers.h cuda/layers_internal.h cuda/common.h | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CXX_MOCK) -x c++ -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Isrc -Icuda $(MOCK_INC) -c $< -o $@
build/mock/test_conv_tune: test/gpu/mock/test_conv_tune.c build/mock/layers_conv.o build/mock/mock_cuda.o $(LIB) | build/.check-ok
	$(CC) $(CFLAGS) -Isrc -Icuda $(MOCK_INC) $(CHECK_CFLAGS) -o $@ $< build/mock/layers_conv.o build/mock/mock_cuda.o $(LIB) \
	    -lstdc++ $(CHECK_LIBS) $(PKG_LIBS) -lm
# The model.h-level test over the mock: src/nn/model.c's GPU dispatch (host mirrors, sync modes)
# on cuda/model*.cu over the CPU stand-ins.
build/mock/test_gpu_%: test/gpu/test_gpu_%.c $(MOCK_OBJ) $(LIB) test/testutil.h test/gpu/testgpu.h test/gpu/bf16.h | build/.check-ok
	$(CC) $(CFLAGS) -Isrc -Icuda $(ONEDNN_CFLAGS) -Itest $(MOCK_INC) $(PKG_CFLAGS) $(CHECK_CFLAGS) \
	    $(if $(MOCK_NCCL_HDR),-DMOCK_NCCL_LIB='"$(MOCK_NCCL_LIB)"') -o $@ $< $(LIB) $(MOCK_OBJ) $(LIB) \
	    -lstdc++ $(CHECK_LIBS) $(PKG_LIBS) $(ONEDNN_LIBS) -lm -ldl

# dsgd-run over the stand-ins (device = "cuda" without a GPU): test_gpu_overlap runs it under
# mpiexec with and without the overlap of copies and communication.
build/mock/dsgd-run: build/src/main.o $(LIB) $(MOCK_OBJ) | build/.deps-ok
	$(CC) $(CFLAGS) -o $@ build/src/main.o $(LIB) $(MOCK_OBJ) -lstdc++ $(PKG_LIBS) $(ONEDNN_LIBS) -lm -ldl
build/mock/test_gpu_overlap: build/mock/dsgd-run test/mpiutil.h test/alloccount.h $(if $(MOCK_NCCL_HDR),build/mock/libnccl.so.2)
build/mock/test_gpu_comm: $(if $(MOCK_NCCL_HDR),build/mock/libnccl.so.2)

# test/gpu/: every GPU op and the whole model against the CPU backend (CUDA=1 only).
gpu-tests: $(if $(filter 0,$(CUDA)),gpu-tests-need-cuda,$(GPU_TESTS) $(if $(wildcard tools/bench_gpu.c),build/bench_gpu))
.PHONY: gpu-tests-need-cuda
gpu-tests-need-cuda:
	@echo "make gpu-tests: the GPU tests need the GPU backend: make CUDA=1 gpu-tests" >&2; exit 2

run: deps
	@$(MAKE) --no-print-directory $(BIN)
	$(if $(MPIEXEC_ENV),env $(strip $(MPIEXEC_ENV)) )$(MPIEXEC) -n $(NP) ./$(BIN) $(RUN_ARGS) $(CONFIG)

# Every test program and script is one make target (check-run/PATH; the layer and model tests
# again under each lower ISA level the CPU offers, check-isa/LEVEL/PATH with test/isa-levels.sh's
# ONEDNN_MAX_CPU_ISA caps), so that `make -j2 check` runs two at a time. test/run-one.sh runs each
# under a timeout (a hang fails instead of stalling CI) with its output in build/check/PATH.log
# (build/check/isa-LEVEL/PATH.log), printed if it fails; test/check-summary.sh then counts the
# results and fails if one failed. The longest first, so that the last slot to finish is not one
# long test started late. docs/testing.md.
CHECK_SLOW  := build/test/test_faults build/test/test_methods build/test/test_jpeg_learn build/test/test_model \
               build/test/test_checkpoint build/test/test_mpi test/test_tools.sh build/mock/test_gpu_overlap
CHECK_ISA   := $(foreach l,$(shell sh test/isa-levels.sh),check-isa/$(l)/build/test/test_model check-isa/$(l)/build/test/test_layers)
CHECK_RUNS  := $(addprefix check-run/,$(filter $(TESTS) $(MOCK_TEST) test/test_tools.sh,$(CHECK_SLOW))) $(CHECK_ISA) \
               $(addprefix check-run/,$(filter-out $(CHECK_SLOW),$(TESTS) $(GPU_TESTS) $(MOCK_TEST) test/gpu/nogpu.sh test/gpu/test_run_sh.sh test/hdf5-api.sh test/test_report.sh test/test_sim_mode.sh test/test_sim_servers.sh test/test_sim_gossip.sh test/test_sim_gossip_async.sh))
CHECK_ENV   := PATH="$(CURDIR)/build/bin:$$PATH" CC="$(CC)" ONEDNN_CFLAGS="$(ONEDNN_CFLAGS)"

check: deps
	@$(MAKE) --no-print-directory $(BIN) $(TESTS) $(GPU_TESTS) $(MOCK_TEST) build/bench_gpu build/bin/mpiexec $(TEST_DATA)
	@$(if $(MOCK_TEST),,echo "SKIPPED: test/gpu/mock (no CUDA / cuDNN headers under $(CUDA_HOME)/include)")
	@echo "MPI launcher for the tests: $(MPIEXEC) (the MPI of CC = $(CC): $(or $(MPI_IMPL),unknown))"
	@rm -rf build/check && mkdir -p build/check && date +%s > build/check/.start
	@$(MAKE) --no-print-directory check-runs
	@sh test/check-summary.sh build/check $(patsubst check-run/%,%,$(patsubst check-isa/%,isa-%,$(CHECK_RUNS)))

# The tests alone (after make check has built everything), in make's job slots.
.PHONY: check-runs $(CHECK_RUNS)
check-runs: $(CHECK_RUNS)
$(filter check-run/%,$(CHECK_RUNS)): check-run/%:
	@$(CHECK_ENV) sh test/run-one.sh build/check $* $*
$(filter check-isa/%,$(CHECK_RUNS)): check-isa/%:
	@$(CHECK_ENV) ONEDNN_MAX_CPU_ISA=$(firstword $(subst /, ,$*)) sh test/run-one.sh build/check isa-$* $(patsubst $(firstword $(subst /, ,$*))/%,%,$*)

# `mpiexec` for the tests: the launcher of the MPI dsgd-run is built with (MPIEXEC); a script,
# not a link, as Hydra finds its proxy next to the path it was started as. For Open MPI it also
# sets what Open MPI needs on a test machine (MPIEXEC_ENV): more ranks than cores
# (rmaps_base_oversubscribe; MPICH's Hydra allows that by default), running as root (CI), and
# no cross-memory-attach single copy (containers forbid the ptrace it needs).
ifeq ($(MPI_IMPL),openmpi)
MPIEXEC_ENV ?= OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
               $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
endif
build/bin/mpiexec: FORCE | build/.deps-ok
	@mkdir -p $(dir $@)
	@target=$$(command -v $(MPIEXEC)) || { echo "make: no $(MPIEXEC) on PATH" >&2; exit 1; }; \
	    printf '#!/bin/sh\n%sexec %s "$$@"\n' "$(if $(MPIEXEC_ENV),export $(strip $(MPIEXEC_ENV)); )" "$$target" > $@.tmp && \
	    chmod +x $@.tmp && { cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@; }

# The MPI integration tests again with dsgd-run built against Open MPI (installed beside MPICH
# if missing, the mpicc/mpiexec alternatives put back): test/openmpi.sh. CI runs it after check.
.PHONY: check-openmpi
check-openmpi: deps
	@ONEDNN_PREFIX="$(ONEDNN_PREFIX)" sh test/openmpi.sh

# dsgd-run built as a cluster user with modules builds it (test/build-modules.sh): a copy of the
# tree, as user nobody, the compiler named cc and no mpicc on PATH, no Check, no hdf5.pc (HDF5
# from HDF5_ROOT), no LD_LIBRARY_PATH; then --version, --check and a 1-rank run, ldd through the
# RUNPATH. Not part of check (it compiles the whole tree once more); CI runs it (.ci/run).
.PHONY: check-build
check-build:
	@timeout -k 10 900 sh test/build-modules.sh

# A multi-node Slurm cluster on localhost (slurm-wlm, munge: installed if missing, as root; one
# slurmd per node, cores split by cgroups), the sweep -> sbatch -> run files -> plot loop through
# it, then the walk-through of docs/reproduce.md with 1-minute chained jobs, a SIGKILL and the
# report's job states (test/slurm/run.sh --all; --walkthrough alone, or no option for the loop
# alone). CI runs it after check; about 10 minutes on 2 cores (docs/testing.md).
.PHONY: check-slurm
check-slurm: deps
	@$(MAKE) --no-print-directory $(BIN)
	@$(MAKE) --no-print-directory build/bin/mpiexec
	@PATH="$(CURDIR)/build/bin:$$PATH" timeout -k 10 1200 sh test/slurm/run.sh --all

# sim mode's closed-form collectives (src/sim/simmodel.c) against SimGrid/SMPI's offline trace
# replay on the same α, β (calibration factors 1, cross-traffic off): p = 8, 24, 32, 128, flat and
# fat tree, 10 GbE and InfiniBand HDR, within 1 % (test/sim/smpi_check.sh; installs Debian's
# libsimgrid-dev if missing, as root). Not part of check; about 3 minutes on 2 cores
# (docs/simulate-models.md, docs/testing.md).
build/test/sim_model_cli: test/sim/sim_model_cli.c src/sim/simmodel.c src/sim/simmodel.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ test/sim/sim_model_cli.c src/sim/simmodel.c -lm
.PHONY: check-sim-smpi
check-sim-smpi: build/test/sim_model_cli
	@timeout -k 10 1200 sh test/sim/smpi_check.sh build/test/sim_model_cli build/sim-smpi

# Issue 25's determinism check: the six methods (and synchronous easgd) in sim mode at p = 16,
# each run twice, the second beside two busy loops; every dataset but wall_s equal bit for bit
# (test/sim/determinism.sh; P=8 for a quicker one). Not in check: 14 runs of 16-18 ranks.
.PHONY: check-sim-determinism
check-sim-determinism: dsgd-run build/bin/mpiexec
	@PATH="$(CURDIR)/build/bin:$$PATH" timeout -k 10 3000 sh test/sim/determinism.sh

# A small Figure 1 (Jin et al.) on the same local Slurm: tools/paper.py fig1 at p = 2, 4 on packed
# Fashion-MNIST, then tools/report.py: plots/fig1-small.{md,png,pdf} (docs/reproduce.md §8).
.PHONY: fig1-small
fig1-small: deps
	@$(MAKE) --no-print-directory $(BIN)
	@$(MAKE) --no-print-directory build/bin/mpiexec
	@PATH="$(CURDIR)/build/bin:$$PATH" timeout -k 10 900 sh test/slurm/run.sh --fig1-small plots/fig1-small

# Figure 1 in sim mode on this machine (docs/reproduce.md §9): tools/paper.py fig1 --simulate $(SIM)
# (the methods sim mode supports, at p = 8, 16; a new sweeps/fig1-sim-<UTC time>/ each time), then
# tools/report.py: plots/fig1-sim-<UTC time>.{md,png,pdf}. SIM=k20x,gemini for Titan's platform.
SIM ?= k80,10gbe
.PHONY: fig1-sim
fig1-sim: deps
	@$(MAKE) --no-print-directory $(BIN)
	@n=fig1-sim-$$(date -u +%Y%m%dT%H%M%S); MPIEXEC=$(MPIEXEC) timeout -k 10 1800 /usr/bin/python3 tools/paper.py fig1 \
	    --simulate $(SIM) --name $$n --timeout 900 && /usr/bin/python3 tools/report.py sweeps/$$n --out plots/$$n --targets 0.25,0.2,0.18

# The scaling sweep (tools/paper.py scaling: img/s against p on synthetic data) at p = 1, 2, 4 on
# the same local Slurm: plots/scaling-small.{md,png,pdf}.
.PHONY: scaling-small
scaling-small: deps
	@$(MAKE) --no-print-directory $(BIN)
	@$(MAKE) --no-print-directory build/bin/mpiexec
	@PATH="$(CURDIR)/build/bin:$$PATH" timeout -k 10 900 sh test/slurm/run.sh --scaling-small plots/scaling-small

clean:
	rm -rf build $(BIN)

-include $(OBJ:.o=.d) build/src/main.d $(GPU_OBJ:.o=.d)

# ---- bench (owner: src/nn): img/s of model_train_step, tools/bench_model.c; compare with
# /usr/bin/python3 tools/bench_torch.py (the same network in PyTorch).
.PHONY: bench
build/bench_model: tools/bench_model.c $(LIB) $(GPU_LIB) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -o $@ $< $(LIB) $(GPU_LIB) $(LDLIBS)

# img/s of the GPU training step (model_train_step + model_sgd_update), CUDA=1 only.
build/bench_gpu: tools/bench_gpu.c $(LIB) $(GPU_LIB) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -o $@ $< $(LIB) $(GPU_LIB) $(LDLIBS)

# BENCH: bench_model's options, e.g. make bench BENCH="--shape imagenet --precision fp32,bf16".
BENCH ?=
bench: build/bench_model
	./build/bench_model $(BENCH)

# ---- bench-paper: img/s at the papers' shape (ResNet-18 w64, ImageNet stem, 224², b = 16, 32,
# 2 threads), dsgd-run fp32 and bf16 next to PyTorch fp32 and bf16 autocast, alternating rounds
# (tools/bench_cpu.py; its options in BENCH_PAPER, e.g. BENCH_PAPER="--rounds 3 --other
# 'oneDNN 2.6.3=PATH'": --other adds another bench_model build, e.g. on another oneDNN).
BENCH_PAPER ?=
.PHONY: bench-paper
bench-paper: build/bench_model
	/usr/bin/python3 tools/bench_cpu.py $(BENCH_PAPER)

# ---- bench-data (owner: src/data): decode + augment images/s on one core, build/bench_data
# (tools/bench_data.c) against torchvision's PIL path and its decode_jpeg + transforms.v2 path
# (tools/bench_data_torch.py makes the JPEGs from scikit-image's photos, runs all three and
# prints one table; it apt-gets python3-skimage when missing). Its "decode per sample" rows: the
# decode one sample of each case costs, dsgd-run's only the rows and columns the sample reads
# (bench_data's decode_rect_CASE), torchvision's the whole image (it has no region decode). torchvision runs in a virtual
# environment under build/ with a current torch and torchvision from PyPI (several GB with
# their CUDA libraries; BENCH_TORCH_PIP adds pip options, e.g. another index with CPU wheels):
# made only by this target, never a dependency of dsgd-run, never used by CI.
.PHONY: bench-data
build/bench_data: tools/bench_data.c $(LIB) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INCLUDES) $(PKG_CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

BENCH_TORCH_PIP ?=
build/torch-venv/.ok:
	/usr/bin/python3 -m venv build/torch-venv
	build/torch-venv/bin/pip install $(BENCH_TORCH_PIP) torch torchvision
	touch $@

bench-data: build/bench_data build/torch-venv/.ok
	/usr/bin/python3 tools/bench_data_torch.py

# ---- bench-e2e-data (owner: src/data): ResNet-18 at 224² on the CPU, p = 2, default threads:
# img/s through data.format = "jpeg" next to "synthetic" and the data wait as % of the step
# (tools/bench_e2e_data.py; the JPEGs are bench-data's photos, packed with --pack).
.PHONY: bench-e2e-data
bench-e2e-data: $(BIN)
	/usr/bin/python3 tools/bench_e2e_data.py

# ---- bench-stragglers (owner: src/methods): ms per step of every method at p = 4 on the linear
# model, undisturbed and with worker 1 delayed on every step, and whether each waits for it
# (tools/bench_stragglers.py: the wall-clock half of test_methods' straggler test, which on a
# loaded 2-core machine is a measurement, not an invariant; docs/testing.md). Options in
# BENCH_STRAGGLERS, e.g. BENCH_STRAGGLERS="--methods allreduce,ps --delay-ms 100".
BENCH_STRAGGLERS ?=
.PHONY: bench-stragglers
bench-stragglers: $(BIN) $(TEST_DATA) build/bin/mpiexec
	PATH="$(CURDIR)/build/bin:$$PATH" /usr/bin/python3 tools/bench_stragglers.py $(BENCH_STRAGGLERS)
