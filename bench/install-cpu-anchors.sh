#!/usr/bin/env bash
# Installs what bench/cpu_anchors.py needs (Debian's numpy with OpenBLAS) for
# the system python3. Benchmarks only: the build and the tests need none of it.
set -euo pipefail
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then exit 0; fi
apt-get update -qq
apt-get install -y -qq python3-numpy libopenblas0-pthread >/dev/null
/usr/bin/python3 -c 'import numpy; print("numpy", numpy.__version__)'
