#!/usr/bin/env bash
# The Hopper attention kernels' head groups (tile_item): lab at B 16 and 32,
# and vkern verify of attention and attention_grad at the default shapes.
set -uo pipefail
export VKERN_CACHE=/tmp/vkcache
t0=$(date +%s)
mkdir -p $OUT
(bin/vkern verify --backend cuda --op attention,attention_grad --quick > $OUT/verify.log 2>&1; echo "verify rc=$?" >> $OUT/verify.log) &
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -o /tmp/attention_lab bench/attention_lab.cu > $OUT/lab-build.txt 2>&1 || { echo "lab build FAILED"; tail -20 $OUT/lab-build.txt; }
echo "lab built at $(( $(date +%s) - t0 )) s"
/tmp/attention_lab 16 1024 768 12 2>&1 | tail -9; echo "lab rc=$?"
/tmp/attention_lab 32 1024 768 12 2>&1 | grep -E "heads a group|^forward, wgmma|^backward, wgmma"
echo "labs done at $(( $(date +%s) - t0 )) s"
wait
grep -E "^attention|PASSED|FAILED|rc=" $OUT/verify.log | tail -5
echo "done at $(( $(date +%s) - t0 )) s"
