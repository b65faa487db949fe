// What the launchers owe the batches the server replays as CUDA graphs.
//
// device.cu captures a RUN_BATCH that repeats (a training step's) into a
// graph, and replays the graph instead of launching the batch's kernels
// again. A capture records the work a launcher enqueues and nothing else,
// and a graph keeps the device addresses it was captured with, scratch
// among them. So the launchers obey two rules:
// - Every allocation of scratch (rows.cuh's ScratchBuffer, gemm.cuh's
//   pad_scratch, cross_entropy.cu's state word, device.cu's problem words)
//   asks may_grow first, which bumps generation. device.cu drops a graph
//   captured at another generation without replaying it, since the
//   scratch it uses may have been freed.
// - During a capture nothing may be allocated, freed or copied back from
//   the device: cudaFree, cudaMalloc and a copy to the host are not work a
//   graph can hold, and a capture has not run the launches before it.
//   Where a launcher would do one (an allocator; wgmma.cuh's sm90a_loaded,
//   whose first call copies a word from the device), may_grow or spoil
//   marks the capture unusable, and the launcher takes its failure path
//   (ScratchBuffer answers cudaErrorStreamCaptureUnsupported, pad_scratch
//   nullptr, sm90a_loaded false). device.cu throws the capture away and
//   runs the batch as usual, where the allocation or the copy happens.
//   Reading a device attribute is no such thing: it enqueues nothing.
//
// The server runs one request at a time, so plain variables serve. C++17
// inline variables give every translation unit the same ones.
#ifndef VKERN_CUDA_CAPTURE_H
#define VKERN_CUDA_CAPTURE_H

namespace vkern_capture {

inline unsigned long long generation = 0;  // bumped by every reallocation of scratch
inline bool capturing = false;              // a batch's launches are being captured
inline bool spoiled = false;                // a launch did what a capture cannot hold

// spoil answers whether a capture is under way, and marks it unusable if
// one is.
inline bool spoil() {
  if (capturing) spoiled = true;
  return capturing;
}

// may_grow is asked by an allocator before it frees or allocates scratch.
// It answers false during a capture, which it spoils; otherwise it counts
// the reallocation and answers true.
inline bool may_grow() {
  if (spoil()) return false;
  ++generation;
  return true;
}

}  // namespace vkern_capture

#endif  // VKERN_CUDA_CAPTURE_H
