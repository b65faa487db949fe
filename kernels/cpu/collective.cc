// The cpu backend's collectives: communicators of one rank only.
//
// A collective over one rank is a copy (all-reduce, reduce-scatter and
// all-gather of one rank each give back its own send), so the server
// path of every collective, in its own request and inside a RUN_BATCH,
// runs end to end here with one rank. The cpu backend has no engine that
// joins several servers: vkern joins cpu ranks on the host instead
// (package collective's host collective), and COMM_INIT of more than one
// rank answers NOT_SUPPORTED saying so.
#include <cstring>
#include <random>
#include <string>

#include "core/backend.h"

namespace vkern {

namespace {

// CpuComm is a communicator of one rank; it holds nothing but its id's
// first bytes, so that a debugger can tell two apart.
struct CpuComm {
  uint8_t id[8];
};

}  // namespace

Result backend_comm_info(uint32_t* version, std::string* text) {
  *version = 0;
  *text = "cpu: communicators of one rank (a collective of one rank is a copy); vkern joins cpu ranks on the host";
  return Result::OK();
}

Result backend_comm_unique_id(uint8_t* id) {
  std::random_device rd;
  for (size_t i = 0; i < kCommUniqueIdBytes; i += 4) {
    const uint32_t v = rd();
    std::memcpy(id + i, &v, 4);
  }
  return Result::OK();
}

Result backend_comm_init(const uint8_t* id, uint32_t rank, uint32_t size, uint32_t, void** comm) {
  if (size != 1) {
    return fail(kStatusNotSupported, "COMM_INIT of rank ", rank, " of ", size,
                ": the cpu backend's communicators have one rank; vkern joins several cpu servers on the host "
                "(package collective), and GPUs through NCCL");
  }
  CpuComm* c = new (std::nothrow) CpuComm;
  if (c == nullptr) return fail(kStatusOutOfMemory, "COMM_INIT: no memory for the communicator");
  std::memcpy(c->id, id, sizeof c->id);
  *comm = c;
  return Result::OK();
}

Result backend_collective(const Collective& c) {
  uint64_t send_bytes = 0, recv_bytes = 0;
  collective_bytes(c, &send_bytes, &recv_bytes);
  // One rank: recv is send, whichever collective it is (in place: nothing
  // to move).
  if (c.recv != c.send) std::memmove(c.recv, c.send, recv_bytes);
  return Result::OK();
}

void backend_comm_abort(void* comm) { delete static_cast<CpuComm*>(comm); }

}  // namespace vkern
