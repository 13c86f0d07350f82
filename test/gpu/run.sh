#!/bin/sh
# run.sh — build the GPU backend and its tests with nvcc and mpicc directly (until the Makefile
# has `make CUDA=1`) and run them. From the repository root:
#
#   sh test/gpu/run.sh          build/cuda/*.o, build/test/gpu/test_gpu_{ops,model}; run both
#   sh test/gpu/run.sh build    build only
#   sh test/gpu/run.sh mock     cuda/model.cu over the CPU layers (test/gpu/mock), no GPU needed
#
# Knobs: CUDA_HOME (/usr/local/cuda), CUDNN_INC (where cudnn.h is; /usr/local/include),
# CUDNN_LIB (where libcudnn.so is; $CUDA_HOME/lib64), TEST_TIMEOUT (seconds per test, 600).
# Without a GPU the two tests print "no GPU: skipped" and pass.
set -e
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDNN_INC=${CUDNN_INC:-/usr/local/include}
CUDNN_LIB=${CUDNN_LIB:-$CUDA_HOME/lib64}
NVCC="$CUDA_HOME/bin/nvcc"
ARCH="-gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
 -gencode arch=compute_90,code=[sm_90,compute_90]"
INC="-Isrc -Icuda -Itest -I$CUDA_HOME/include -I$CUDNN_INC"
PKG="check libconfig hdf5 zlib"
CFLAGS="-O2 -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp"
LIBS="$(pkg-config --libs $PKG) -ldnnl -lm"

make --no-print-directory build/libdsgd.a
mkdir -p build/cuda build/test/gpu build/mock

if [ "$1" = mock ]; then
    g++ -x c++ -std=c++17 -O2 -g -Wall -Wextra $INC -c cuda/model.cu -o build/mock/model.o
    mpicc $CFLAGS $INC -c test/gpu/mock/mock_cuda.c -o build/mock/mock_cuda.o
    mpicc $CFLAGS $INC -c test/gpu/mock/mock_layers.c -o build/mock/mock_layers.o
    mpicc $CFLAGS $INC $(pkg-config --cflags $PKG) -o build/mock/test_gpu_model test/gpu/test_gpu_model.c \
        build/mock/model.o build/mock/mock_layers.o build/mock/mock_cuda.o build/libdsgd.a -lstdc++ $LIBS
    exec timeout -k 10 "${TEST_TIMEOUT:-600}" build/mock/test_gpu_model
fi

for f in layers model; do
    "$NVCC" -O3 -std=c++17 -Xcompiler -fPIC,-Wall $INC $ARCH -c cuda/$f.cu -o build/cuda/$f.o
done
for t in test_gpu_ops test_gpu_model; do
    mpicc $CFLAGS $INC $(pkg-config --cflags $PKG) -o build/test/gpu/$t test/gpu/$t.c build/cuda/layers.o \
        build/cuda/model.o build/libdsgd.a -L"$CUDNN_LIB" -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDNN_LIB" \
        -Wl,-rpath,"$CUDA_HOME/lib64" -lcudnn -lcublas -lcudart -lstdc++ $LIBS
done
[ "$1" = build ] && exit 0

status=0
for t in test_gpu_ops test_gpu_model; do
    echo "== build/test/gpu/$t"
    if ! timeout -k 10 "${TEST_TIMEOUT:-600}" build/test/gpu/$t; then
        echo "FAILED: $t"
        status=1
    fi
done
exit $status
