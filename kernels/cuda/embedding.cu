// embedding and embedding_grad on the GPU: tokens i32 B·T, f16 embeddings
// and gradients, binary32 inside. N = B·T positions p = b·T + t.
//
// Launch shapes. A "warp" below is a group of 32 consecutive threads of a
// 256-thread block (on a 64-wide wavefront, half of one); nothing here
// shuffles between lanes, so the wavefront's width does not matter. A lane
// owns VW consecutive channels: VW = 8, one 16-byte f16 access (two for
// f32), when C is a multiple of 8 and every operand is 16-byte aligned;
// else VW = 1. A channel group is the 32·VW channels of one warp.
//
// embedding: one warp per position (grid-stride over positions): it reads
// the token id once, then x[p] = f16(f32(wte[id]) + f32(wpe[p mod T])) over
// its channels, rounded once. Only the rows the ids name are read, so the
// traffic is two reads and a write of N·C f16 (the contract's floor counts
// all of wte).
//
// embedding_grad, deterministic: each output element is summed in an order
// fixed by the token ids alone, never by scheduling, and no atomics add
// floats. Five steps on the stream:
//
//  1. position_sums: one warp per (t, channel group):
//     dwpe[t] = ((dwpe₀[t] + dx[t]) + dx[T + t]) + …, b ascending.
//  2. tile_sort: keys k = id·2³² + p (unique; a bad id gets kNoKey, which
//     sorts last), each tile of kTile keys sorted in shared memory (bitonic).
//  3. merge_pass, log₂(N/kTile) times: pairs of sorted runs merged by each
//     key's rank (a binary search in the other run), ping-ponging between
//     two scratch arrays. The keys then list the positions of token 0
//     ascending, then token 1's, … (a run per token).
//  4. segment_sums: one warp per (segment of kSegment sorted keys, channel
//     group). The part of a run inside a segment, a piece, is summed from
//     0 in ascending position: P = ((0 + dx[p₁]) + dx[p₂]) + …. A run that
//     lies in one segment is finished at once: dwte[v] = dwte₀[v] + P. A
//     piece that reaches the segment's edge while the run goes on is stored
//     in scratch: the piece that starts the segment in slot 0, the one that
//     ends it (and began inside it) in slot 1.
//  5. combine: the warp of the segment where such a run begins adds, in
//     segment order, dwte[v] = ((dwte₀[v] + P_first) + P_next) + … .
//
// So dwte[v][c] = dwte₀[v][c] + Σ_pieces (Σ_{p in piece} dx[p][c]), pieces
// and the positions in each in ascending order; the pieces are where the
// runs cross multiples of kSegment in the sorted keys, which the ids fix.
// Every addition is a binary32 addition rounded to nearest (the first of a
// piece, 0 + x, exact), so the oracle's bound, γ₂₄(n)·Σ|terms| for n
// additions in any order, holds (oracle/embedding.go).
//
// Token ids. A bad id (outside [0, V)) never indexes wte or dwte:
// embedding writes a row of +0 at its position and embedding_grad gives it
// kNoKey, so it is summed nowhere (dwpe, which does not read ids, takes its
// row as any other). Each such position is taken into the call's problem
// word (device.cu) by atomicMin, so the word ends as the first of them,
// which the server answers as INVALID_ARGUMENT naming tokens[p].
//
// Limits: the keys hold a position in 32 bits, so embedding_grad takes
// N ≤ 2³² positions (more would need 64 GiB of keys); a larger call is
// answered as scratch that cannot be had (OUT_OF_MEMORY).
//
// Facts relied on: binary32 additions rounded to nearest (no fast-math,
// no flush-to-zero); f16 results rounded once (__float2half_rn); IEEE
// specials follow the formula.
//
// Scratch (see ops.cuh): for embedding_grad, 16 bytes per position (two key
// arrays) and 8·C bytes per segment of kSegment positions (two slots of C
// floats), kept and grown as ScratchBuffer does.
//
// Variants (one so far):
//   1. a warp per position (forward); sorted keys, pieces of ≤ kSegment
//      positions and an ordered combine (backward). Not yet timed on a GPU.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_embedding {

using namespace vkern_rows;  // pack, half_lo, half_hi, ceil_div, grid_for, aligned16, ScratchBuffer

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;  // 32-lane groups per block
constexpr int kSortThreads = 1024;
constexpr int kTile = 2 * kSortThreads;  // keys sorted per block in shared memory
constexpr int kSegment = 32;             // sorted keys per segment_sums warp
constexpr int kBatch = 8;                // rows loaded before they are added, for memory parallelism
constexpr unsigned long long kNoKey = ~0ull;

__device__ __forceinline__ int64_t token_of(unsigned long long key) { return static_cast<int64_t>(key >> 32); }
__device__ __forceinline__ int64_t position_of(unsigned long long key) {
  return static_cast<int64_t>(key & 0xffffffffull);
}

// Raw<VW>: the f16 bits of a lane's VW channels, loaded but not converted.
template <int VW>
struct Raw {
  uint32_t w[VW == 8 ? 4 : 1];

  __device__ void load(const __half* p) {
    if constexpr (VW == 8) {
      const uint4 v = VK_LDG(reinterpret_cast<const uint4*>(p));
      w[0] = v.x;
      w[1] = v.y;
      w[2] = v.z;
      w[3] = v.w;
    } else {
      w[0] = VK_LDG(reinterpret_cast<const unsigned short*>(p));
    }
  }
  __device__ float value(int i) const { return i & 1 ? half_hi(w[i / 2]) : half_lo(w[i / 2]); }
  __device__ void add_to(float (&acc)[VW]) const {
#pragma unroll
    for (int i = 0; i < VW; ++i) acc[i] += value(i);
  }
};

template <int VW>
__device__ __forceinline__ void load_f32(const float* p, float (&v)[VW]) {
  if constexpr (VW == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    v[0] = *p;
  }
}

template <int VW>
__device__ __forceinline__ void store_f32(float* p, const float (&v)[VW]) {
  if constexpr (VW == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *p = v[0];
  }
}

// ---------------------------------------------------------------------------
// embedding.

template <int VW>
__global__ void __launch_bounds__(kThreads)
    embedding_rows(const int32_t* __restrict__ tokens, const __half* __restrict__ wte, const __half* __restrict__ wpe,
                   __half* __restrict__ x, int64_t N, int64_t T, int64_t C, int64_t V,
                   unsigned long long* __restrict__ bad) {
  const int lane = threadIdx.x % 32;
  const int64_t vectors = C / VW;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; p < N;
       p += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t id = VK_LDG(tokens + p);
    __half* out = x + p * C;
    if (id < 0 || id >= V) {
      if (lane == 0 && bad != nullptr) atomicMin(bad, static_cast<unsigned long long>(p));
      for (int64_t j = lane; j < vectors; j += 32) {
        if constexpr (VW == 8) {
          reinterpret_cast<uint4*>(out)[j] = make_uint4(0, 0, 0, 0);
        } else {
          out[j] = __float2half_rn(0.0f);
        }
      }
      continue;
    }
    const int64_t t = p % T;
    const __half* token_row = wte + id * C;
    const __half* position_row = wpe + t * C;
    for (int64_t j = lane; j < vectors; j += 32) {
      Raw<VW> a, b;
      a.load(token_row + j * VW);
      b.load(position_row + j * VW);
      if constexpr (VW == 8) {
        uint4 r;
        r.x = pack(a.value(0) + b.value(0), a.value(1) + b.value(1));
        r.y = pack(a.value(2) + b.value(2), a.value(3) + b.value(3));
        r.z = pack(a.value(4) + b.value(4), a.value(5) + b.value(5));
        r.w = pack(a.value(6) + b.value(6), a.value(7) + b.value(7));
        reinterpret_cast<uint4*>(out)[j] = r;
      } else {
        out[j] = __float2half_rn(a.value(0) + b.value(0));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// embedding_grad, step 1: dwpe, one warp per (t, channel group).

template <int VW>
__global__ void __launch_bounds__(kThreads)
    position_sums(const __half* __restrict__ dx, float* __restrict__ dwpe, int64_t B, int64_t T, int64_t C,
                  int64_t groups) {
  const int lane = threadIdx.x % 32;
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; unit < T * groups;
       unit += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t t = unit / groups;
    const int64_t ch = (unit % groups * 32 + lane) * VW;
    if (ch >= C) continue;
    float acc[VW];
    load_f32<VW>(dwpe + t * C + ch, acc);
    for (int64_t b0 = 0; b0 < B; b0 += kBatch) {
      Raw<VW> rows[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (b0 + k < B) rows[k].load(dx + ((b0 + k) * T + t) * C + ch);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (b0 + k < B) rows[k].add_to(acc);
      }
    }
    store_f32<VW>(dwpe + t * C + ch, acc);
  }
}

// ---------------------------------------------------------------------------
// Steps 2 and 3: the keys, sorted.

__global__ void __launch_bounds__(kSortThreads)
    tile_sort(const int32_t* __restrict__ tokens, unsigned long long* __restrict__ keys, int64_t N, int64_t V,
              unsigned long long* __restrict__ bad) {
  __shared__ unsigned long long tile[kTile];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int i = threadIdx.x; i < kTile; i += kSortThreads) {
    const int64_t p = first + i;
    unsigned long long key = kNoKey;
    if (p < N) {
      const int64_t id = VK_LDG(tokens + p);
      if (id >= 0 && id < V) {
        key = static_cast<unsigned long long>(id) << 32 | static_cast<unsigned long long>(p);
      } else if (bad != nullptr) {
        atomicMin(bad, static_cast<unsigned long long>(p));
      }
    }
    tile[i] = key;
  }
  __syncthreads();
  for (int size = 2; size <= kTile; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < kTile; i += kSortThreads) {
        const int partner = i ^ stride;
        if (partner > i) {
          const bool ascending = (i & size) == 0;
          const unsigned long long a = tile[i], b = tile[partner];
          if ((a > b) == ascending) {
            tile[i] = b;
            tile[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < kTile; i += kSortThreads) {
    if (first + i < N) keys[first + i] = tile[i];
  }
}

// merge_pass merges the sorted runs of 2^log_width keys pairwise: a key's
// place is its index in its run plus the count of the other run's keys
// before it (those below it for the left run, those not above it for the
// right one, so equal kNoKeys keep their order).
__global__ void __launch_bounds__(kThreads)
    merge_pass(const unsigned long long* __restrict__ in, unsigned long long* __restrict__ out, int64_t N,
               int log_width) {
  const int64_t width = int64_t{1} << log_width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < N;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const unsigned long long key = in[i];
    const int64_t run = i >> log_width;
    const int64_t other = (run ^ 1) << log_width;
    if (other >= N) {
      out[i] = key;
      continue;
    }
    const bool left = (run & 1) == 0;
    int64_t lo = other, hi = other + width < N ? other + width : N;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      const unsigned long long m = in[mid];
      if (m < key || (!left && m == key)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    out[((run >> 1) << (log_width + 1)) + (i - (run << log_width)) + (lo - other)] = key;
  }
}

// ---------------------------------------------------------------------------
// Step 4: the pieces. partials holds two slots of C floats per segment.

__device__ __forceinline__ bool same_token(unsigned long long a, unsigned long long b) {
  return a != kNoKey && b != kNoKey && token_of(a) == token_of(b);
}

// add_floats adds VW floats to acc, one binary32 addition each.
template <int VW>
__device__ __forceinline__ void add_floats(float (&acc)[VW], const float (&v)[VW]) {
#pragma unroll
  for (int i = 0; i < VW; ++i) acc[i] += v[i];
}

// Each batch loads its kBatch rows of dx, and the dwte row of each key that
// begins a run, before it adds anything, so that a warp waits for memory
// once per batch rather than once per row.
template <int VW>
__global__ void __launch_bounds__(kThreads)
    segment_sums(const unsigned long long* __restrict__ keys, const __half* __restrict__ dx, float* __restrict__ dwte,
                 float* __restrict__ partials, int64_t N, int64_t C, int64_t segments, int64_t groups) {
  __shared__ unsigned long long staged[kWarps][kSegment];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Every warp of a block takes the same number of turns, so that the
  // barriers around the staged keys are reached by all.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kWarps; base < segments * groups;
       base += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t unit = base + warp;
    const int64_t s = unit / groups;
    const int64_t lo = s * kSegment;
    if (unit < segments * groups) staged[warp][lane] = lo + lane < N ? keys[lo + lane] : kNoKey;
    __syncthreads();
    const int64_t ch = (unit % groups * 32 + lane) * VW;
    if (unit < segments * groups && ch < C) {
      const unsigned long long* key = staged[warp];
      const unsigned long long before = lo > 0 ? keys[lo - 1] : kNoKey;
      const unsigned long long after = lo + kSegment < N ? keys[lo + kSegment] : kNoKey;
      int count = 0;  // the segment's valid keys (kNoKeys sort last)
      while (count < kSegment && key[count] != kNoKey) ++count;
      // The current piece: where it began, whether it continues a run from
      // the segment before (head), its sum from 0, and the dwte row of its
      // token as it was (loaded when the piece begins a run).
      int start = 0;
      bool head = same_token(before, key[0]);
      float acc[VW] = {}, initial[VW] = {};
      for (int k0 = 0; k0 < count; k0 += kBatch) {
        Raw<VW> rows[kBatch];
        float first[kBatch][VW];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int i = k0 + k;
          if (i >= count) continue;
          rows[k].load(dx + position_of(key[i]) * C + ch);
          if (i == 0 ? !head : token_of(key[i]) != token_of(key[i - 1])) {
            load_f32<VW>(dwte + token_of(key[i]) * C + ch, first[k]);
          }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int i = k0 + k;
          if (i >= count) continue;
          if (i > start && token_of(key[i]) != token_of(key[start])) {
            // The piece [start, i) ends inside the segment: unless it is a
            // head, its whole run lies here.
            if (head) {
              store_f32<VW>(partials + s * 2 * C + ch, acc);
            } else {
              add_floats<VW>(initial, acc);
              store_f32<VW>(dwte + token_of(key[start]) * C + ch, initial);
            }
            start = i;
            head = false;
#pragma unroll
            for (int j = 0; j < VW; ++j) acc[j] = 0.0f;
          }
          if (i == start && !head) {
#pragma unroll
            for (int j = 0; j < VW; ++j) initial[j] = first[k][j];
          }
          rows[k].add_to(acc);
        }
      }
      // The last piece ends at count: it continues into the next segment
      // when the segment is full and the next key has its token (tail).
      if (count > 0) {
        const bool tail = count == kSegment && same_token(key[start], after);
        if (head || tail) {
          store_f32<VW>(partials + (s * 2 + (head ? 0 : 1)) * C + ch, acc);
        } else {
          add_floats<VW>(initial, acc);
          store_f32<VW>(dwte + token_of(key[start]) * C + ch, initial);
        }
      }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// Step 5: the runs that cross segments, combined in order by the warp of
// the segment where each begins.

template <int VW>
__global__ void __launch_bounds__(kThreads)
    combine(const unsigned long long* __restrict__ keys, float* __restrict__ dwte, const float* __restrict__ partials,
            int64_t N, int64_t C, int64_t segments, int64_t groups) {
  const int lane = threadIdx.x % 32;
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; unit < segments * groups;
       unit += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t s = unit / groups;
    const int64_t ch = (unit % groups * 32 + lane) * VW;
    const int64_t lo = s * kSegment, hi = lo + kSegment;
    if (ch >= C || hi >= N) continue;
    const unsigned long long last = keys[hi - 1];
    if (!same_token(last, keys[hi])) continue;  // no run leaves this segment
    if (same_token(keys[lo], last) && lo > 0 && same_token(keys[lo - 1], last)) continue;  // nor begins in it
    // The run's end: the first key of a later token (or kNoKey) after hi.
    const int64_t v = token_of(last);
    int64_t a = hi, b = N;
    while (a < b) {
      const int64_t mid = a + (b - a) / 2;
      const unsigned long long m = keys[mid];
      if (m != kNoKey && token_of(m) == v) {
        a = mid + 1;
      } else {
        b = mid;
      }
    }
    const int64_t last_segment = (a - 1) / kSegment;
    float* row = dwte + v * C + ch;
    float acc[VW], piece[VW];
    load_f32<VW>(row, acc);
    load_f32<VW>(partials + (s * 2 + 1) * C + ch, piece);
    add_floats<VW>(acc, piece);
    for (int64_t next = s + 1; next <= last_segment; next += kBatch) {
      float pieces[kBatch][VW];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (next + k <= last_segment) load_f32<VW>(partials + (next + k) * 2 * C + ch, pieces[k]);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (next + k <= last_segment) add_floats<VW>(acc, pieces[k]);
      }
    }
    store_f32<VW>(row, acc);
  }
}

// ---------------------------------------------------------------------------
// Host side.

unsigned warps_grid(int64_t warps) { return grid_for(ceil_div(warps, kWarps)); }

cudaError_t grad_scratch(size_t bytes, void** out) {
  static ScratchBuffer buffer;
  return buffer.get(bytes, out);
}

template <int VW>
cudaError_t embedding_grad_with(const __half* dx, const int32_t* tokens, float* dwte, float* dwpe, int64_t B,
                                int64_t T, int64_t C, int64_t V, unsigned long long* bad, cudaStream_t s) {
  const int64_t N = B * T;
  if (N > (int64_t{1} << 32)) return cudaErrorMemoryAllocation;  // see Limits above
  const int64_t groups = ceil_div(C, 32 * VW);
  const int64_t segments = ceil_div(N, kSegment);
  void* buffer = nullptr;
  const size_t key_bytes = static_cast<size_t>(N) * 2 * sizeof(unsigned long long);
  const size_t partial_bytes = static_cast<size_t>(segments) * 2 * static_cast<size_t>(C) * sizeof(float);
  cudaError_t err = grad_scratch(key_bytes + partial_bytes, &buffer);
  if (err != cudaSuccess) return err;
  unsigned long long* keys = static_cast<unsigned long long*>(buffer);
  unsigned long long* spare = keys + N;
  float* partials = reinterpret_cast<float*>(keys + 2 * N);

  position_sums<VW><<<warps_grid(T * groups), kThreads, 0, s>>>(dx, dwpe, B, T, C, groups);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  tile_sort<<<grid_for(ceil_div(N, kTile)), kSortThreads, 0, s>>>(tokens, keys, N, V, bad);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  int log_width = 0;
  while ((int64_t{1} << log_width) < kTile) ++log_width;
  for (; (int64_t{1} << log_width) < N; ++log_width) {
    merge_pass<<<grid_for(ceil_div(N, kThreads)), kThreads, 0, s>>>(keys, spare, N, log_width);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    unsigned long long* sorted = spare;
    spare = keys;
    keys = sorted;
  }

  segment_sums<VW><<<warps_grid(segments * groups), kThreads, 0, s>>>(keys, dx, dwte, partials, N, C, segments, groups);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  combine<VW><<<warps_grid(segments * groups), kThreads, 0, s>>>(keys, dwte, partials, N, C, segments, groups);
  return cudaGetLastError();
}

}  // namespace vkern_embedding
}  // namespace

namespace vkern {

// The ops' entries (kernels.cu lists them): a bad token id is recorded in
// problem.
cudaError_t run_embedding(const Call& c, unsigned long long* problem, cudaStream_t s) {
  using namespace op_embedding;
  using namespace vkern_embedding;
  const int32_t* tokens = c.ptr<const int32_t>(buf::tokens);
  const __half* wte = c.ptr<const __half>(buf::wte);
  const __half* wpe = c.ptr<const __half>(buf::wpe);
  __half* x = c.ptr<__half>(buf::x);
  const int64_t N = c.params[param::B] * c.params[param::T], T = c.params[param::T];
  const int64_t C = c.params[param::C], V = c.params[param::V];
  if (C % 8 == 0 && aligned16(wte) && aligned16(wpe) && aligned16(x)) {
    embedding_rows<8><<<warps_grid(N), kThreads, 0, s>>>(tokens, wte, wpe, x, N, T, C, V, problem);
  } else {
    embedding_rows<1><<<warps_grid(N), kThreads, 0, s>>>(tokens, wte, wpe, x, N, T, C, V, problem);
  }
  return cudaGetLastError();
}

cudaError_t run_embedding_grad(const Call& c, unsigned long long* problem, cudaStream_t s) {
  using namespace op_embedding_grad;
  using namespace vkern_embedding;
  const __half* dx = c.ptr<const __half>(buf::dx);
  const int32_t* tokens = c.ptr<const int32_t>(buf::tokens);
  float* dwte = c.ptr<float>(buf::dwte);
  float* dwpe = c.ptr<float>(buf::dwpe);
  const int64_t B = c.params[param::B], T = c.params[param::T], C = c.params[param::C], V = c.params[param::V];
  if (C % 8 == 0 && aligned16(dx) && aligned16(dwte) && aligned16(dwpe)) {
    return embedding_grad_with<8>(dx, tokens, dwte, dwpe, B, T, C, V, problem, s);
  }
  return embedding_grad_with<1>(dx, tokens, dwte, dwpe, B, T, C, V, problem, s);
}

}  // namespace vkern
