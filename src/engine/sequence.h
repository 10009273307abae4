// One request while the engine holds it: its tokens and how many are computed (the
// Scheduler's), its KV blocks (the BlockManager's), and what it has produced but not yet
// delivered (the OutputProcessor's).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"
#include "text/stream_decoder.h"

namespace lw::engine {

struct Sequence {
  int64_t id = 0;
  Request req;
  OutputCallback callback;
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t computed = 0;         // leading tokens whose K/V are in the cache
  SequenceBlocks blocks;
  int generated = 0;
  bool running = false;  // holds blocks: scheduled since it arrived or was last preempted
  bool done = false;
  std::optional<text::StreamDecoder> decoder;
  std::string pending;  // decoded text not yet sent: the tail a stop string may still start in
  size_t hold = 0;      // bytes held back: the longest stop string less one
  RequestOutput out;    // what this step produced

  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - computed; }
};

// The engine's sequences by id, which is arrival order.
using SequenceTable = std::map<int64_t, std::unique_ptr<Sequence>>;

}  // namespace lw::engine
