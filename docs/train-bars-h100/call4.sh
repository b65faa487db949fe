set -u
export VKERN_CACHE=$PWD/.vkcache
vk=bin/vkern
for m in char gpt2; do b=16; [ $m = char ] && b=64
  OUT=$OUT/$m MODELS=$m bash bench/cuda-train-bench.sh --batch $b --steps 30 --warmup 10 > $OUT/train-$m.log 2>&1
  grep -A4 "^case " $OUT/train-$m.log
done
echo "=== char: --verify-every 5 over 20 steps in one run (B), and in two pieces of 10 (A, resumed)"
common="--backend cuda --model char --data bin/corpus.txt --eval-every 1000 --sample 0 --lr-steps 20"
$vk train $common --steps 20 --verify-every 5 --out $OUT/B > $OUT/runB.txt 2>&1; echo "B rc=$?"
$vk train $common --steps 10 --verify-every 5 --out $OUT/A > $OUT/runA1.txt 2>&1; echo "A1 rc=$?"
$vk train $common --steps 20 --verify-every 5 --resume $OUT/A > $OUT/runA2.txt 2>&1; echo "A2 rc=$?"
tail -3 $OUT/runB.txt $OUT/runA2.txt
ls -la $OUT/A $OUT/B
for f in $(cd $OUT/B && ls); do [ -f $OUT/B/$f ] && { cmp -s $OUT/A/$f $OUT/B/$f && echo "same: $f" || echo "DIFFERENT: $f"; }; done
rm -rf $OUT/A $OUT/B
