"""The loop kernel: a plan turned into GPU data (`program`) and CUDA C++ (`codegen`, over the op templates in
`include/ark/`)."""
