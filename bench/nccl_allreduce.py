"""NCCL's all-reduce through PyTorch, one process per GPU: the anchor for the
data-parallel step's collectives (bench/cuda-dp-run.sh's `two` part).

Times an in-place f32 all-reduce at the sizes of gpt2's gradients: one
block's bucket (28 MB), the last bucket (block 0 with wte and wpe, 186 MB)
and the whole arena (497 MB); the mean of 10 after 3 warm-ups, by CUDA
events on rank 0. Prints one line a size: milliseconds and the algorithm
bandwidth (bytes / time; for two ranks NCCL's bus bandwidth is the same).

    python3 bench/nccl_allreduce.py [--mb 28,186,497] [--port 29911]

Keep NVLink multicast off as the device machines require
(NCCL_NVLS_ENABLE=0; bench/cuda-dp-run.sh sets it).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, sizes, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    for mb in sizes:
        x = torch.ones(mb * 1000000 // 4, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 10
        if rank == 0:
            print(f"all_reduce f32 {mb} MB on {world} GPUs: {ms:.3f} ms, {mb / ms:.0f} GB/s", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", default="28,186,497", help="sizes in MB (10^6 bytes), comma-separated")
    p.add_argument("--port", type=int, default=29911)
    a = p.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"nccl_allreduce.py: {world} GPU(s) here; an all-reduce needs at least 2")
    sizes = [int(s) for s in a.mb.split(",")]
    mp.spawn(run, args=(world, sizes, a.port), nprocs=world)


if __name__ == "__main__":
    main()
