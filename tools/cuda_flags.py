"""Prints the compiler flags for the CUDA driver / NVML headers, as setup.py finds them (used by
the Makefile's plain-C device test). Prints nothing when the toolkit is absent."""
import glob
import os
import sys


def main():
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        incs = [d for d in (os.path.join(root, "include"),
                            os.path.join(root, "targets", "x86_64-linux", "include")) if os.path.isdir(d)]
        if not any(os.path.exists(os.path.join(d, "cuda.h")) for d in incs):
            continue
        flags = ["-DTGC_HAVE_CUDA_HEADERS"] + [f"-I{d}" for d in incs]
        cands = [os.environ.get("TENSORGC_NVML_INCLUDE")] + incs
        for path in sys.path:
            cands += sorted(glob.glob(os.path.join(path or ".", "nvidia", "cu*", "include")))
        nv = next((d for d in filter(None, cands) if os.path.exists(os.path.join(d, "nvml.h"))), None)
        if nv:
            flags += ["-DTGC_HAVE_NVML_HEADER", f"-I{nv}"]
        print(" ".join(flags))
        return


if __name__ == "__main__":
    main()
