#pragma once
// Segment layouts and slot pools of the GPU LoRA tests, with their host (CPU reference) and
// device copies. Slot storage past a slot's rank holds NaN, so a kernel that reads it poisons
// its result and the comparison names the element.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "spindle/kernels/cuda/lora.h"
#include "spindle/kernels/lora.h"

namespace spindle::kernels::cuda::test {

struct Scenario {
  std::string name;
  int64_t d_in = 0, d_out = 0, max_rank = 0;
  std::vector<int32_t> ranks;  // one per slot
  std::vector<LoraSegment> segments;
  int64_t rows = 0;
  int64_t ld_x = 0, ld_y = 0, col_offset = 0;
};

// Base-only rows, a rank-0 slot, ranks 1/8/64/128, gaps, an empty segment, a 59-row segment,
// 64 one-row segments on distinct slots, a slot used by two segments, trailing rows in no
// segment. y is a fused [q|k|v]-like row: the window [col_offset, col_offset + d_out).
inline Scenario mixed_scenario(std::string name, int64_t d_in, int64_t d_out, int64_t max_rank,
                               int64_t col_offset) {
  Scenario sc;
  sc.name = std::move(name);
  sc.d_in = d_in;
  sc.d_out = d_out;
  sc.max_rank = max_rank;
  const auto cap = [&](int64_t r) { return static_cast<int32_t>(std::min(r, max_rank)); };
  sc.ranks = {0, 1, cap(8), cap(64), cap(128)};
  for (int32_t s = 0; s < 64; ++s) sc.ranks.push_back(1 + (s * 37) % int32_t(max_rank));
  sc.segments = {{0, 3, -1},  {3, 7, 0},   {7, 10, 1},  /* gap 10..12 */ {12, 40, 2},
                 {40, 41, 3}, {41, 41, 4}, {41, 100, 4}};
  for (int32_t s = 0; s < 64; ++s) sc.segments.push_back({100 + s, 101 + s, 5 + s});
  sc.segments.push_back({166, 170, 2});  // slot 2 again, after a gap
  sc.segments.push_back({170, 170, 1});  // empty
  sc.rows = 172;                         // rows 170, 171 in no segment
  sc.ld_x = d_in + 3;
  sc.col_offset = col_offset;
  sc.ld_y = 3 * d_out + 2;
  return sc;
}

// A decode batch: 256 one-row segments, every 17th row base-only, slots cycling so each slot
// shows up in several non-adjacent segments.
inline Scenario decode_scenario(int64_t d_in, int64_t d_out, int64_t max_rank) {
  Scenario sc;
  sc.name = "decode";
  sc.d_in = d_in;
  sc.d_out = d_out;
  sc.max_rank = max_rank;
  for (int32_t s = 0; s < 40; ++s)
    sc.ranks.push_back(s == 7 ? 0 : 1 + (s * 13) % int32_t(max_rank));
  for (int64_t t = 0; t < 256; ++t) {
    sc.segments.push_back({t, t + 1, t % 17 == 0 ? -1 : int32_t(t % 40)});
  }
  sc.rows = 256;
  sc.ld_x = d_in;
  sc.col_offset = 0;
  sc.ld_y = d_out;
  return sc;
}

// d_in past the shrink kernel's 4096-float chunk, few slots.
inline Scenario wide_scenario() {
  Scenario sc;
  sc.name = "wide";
  sc.d_in = 4133;
  sc.d_out = 67;
  sc.max_rank = 128;
  sc.ranks = {5, 128, 0};
  sc.segments = {{0, 2, 0}, {2, 20, 1}, {20, 21, -1}, {21, 22, 0}, {22, 24, 2}};
  sc.rows = 25;
  sc.ld_x = sc.d_in + 1;
  sc.col_offset = 5;
  sc.ld_y = sc.d_out + 9;
  return sc;
}

// Training-shaped batches, taller than one row chunk of the weight-gradient reduction: one
// 2048-row segment (8 x 256 tokens, rank 16); sequences of one slot in several segments with a
// second slot between them and an odd total (a partial last chunk); and more rows than
// kMaxChunks chunks of 128 (the chunk size grows); "tiles": short and odd segments against the
// row tiles of the dh/dx kernels.
inline Scenario tall_scenario(std::string name) {
  Scenario sc;
  sc.name = name;
  sc.max_rank = 16;
  if (name == "train2048") {
    sc.d_in = 1024;
    sc.d_out = 3072;
    sc.ranks = {16};
    sc.segments = {{0, 2048, 0}};
    sc.rows = 2048;
  } else if (name == "train_ragged") {
    sc.d_in = 133;
    sc.d_out = 75;
    sc.ranks = {16, 5};
    sc.segments = {{0, 256, 0}, {256, 300, 1}, {300, 813, 0}, {813, 900, -1}, {900, 1301, 1}};
    sc.rows = 1303;
  } else if (name == "tiles") {  // the dh/dx row tiles (16 rows): segments shorter than a
    // tile, of different slots and adjacent; 16, 17 and 33 rows; rank 128 (B_s staged in many
    // column chunks), a rank-0 slot, base-only rows and trailing rows in no segment
    sc.d_in = 300;
    sc.d_out = 700;
    sc.max_rank = 128;
    sc.ranks = {128, 3, 16, 0};
    sc.segments = {{0, 2, 0},   {2, 5, 1},   {5, 20, 2},  {20, 21, 0}, {21, 37, 1}, {37, 54, 2},
                   {54, 87, 0}, {87, 88, 3}, {88, 90, -1}, {90, 91, 1}, {91, 107, 0}};
    sc.rows = 109;
  } else {  // "train9000"
    sc.d_in = 40;
    sc.d_out = 24;
    sc.ranks = {3, 16};
    sc.segments = {{0, 4500, 1}, {4500, 9001, 0}};
    sc.rows = 9001;
  }
  sc.ld_x = sc.d_in;
  sc.col_offset = 0;
  sc.ld_y = sc.d_out;
  return sc;
}

struct HostLora {
  std::vector<float> A, B, scale;
  std::vector<int32_t> rank;
  int64_t max_slots = 0, max_rank = 0, d_in = 0, d_out = 0;
  LoraSlots slots() const {
    return LoraSlots{A.data(),  B.data(), rank.data(), scale.data(),
                     max_slots, max_rank, d_in,        d_out};
  }
};

inline HostLora make_host_lora(const Scenario& sc, uint32_t seed) {
  HostLora hl;
  hl.max_slots = int64_t(sc.ranks.size());
  hl.max_rank = sc.max_rank;
  hl.d_in = sc.d_in;
  hl.d_out = sc.d_out;
  hl.rank = sc.ranks;
  hl.A = random_floats(size_t(hl.max_slots * sc.max_rank * sc.d_in), seed);
  hl.B = random_floats(size_t(hl.max_slots * sc.d_out * sc.max_rank), seed + 1);
  for (int64_t s = 0; s < hl.max_slots; ++s) {
    const int64_t r = sc.ranks[size_t(s)];
    for (int64_t i = r; i < sc.max_rank; ++i)
      for (int64_t k = 0; k < sc.d_in; ++k)
        hl.A[size_t((s * sc.max_rank + i) * sc.d_in + k)] = std::nanf("");
    for (int64_t j = 0; j < sc.d_out; ++j)
      for (int64_t i = r; i < sc.max_rank; ++i)
        hl.B[size_t((s * sc.d_out + j) * sc.max_rank + i)] = std::nanf("");
    hl.scale.push_back(0.5f + 0.03f * float(s));
  }
  return hl;
}

struct DeviceLora {
  DeviceBuffer<float> A, B, scale;
  DeviceBuffer<int32_t> rank;
  DeviceBuffer<LoraSegment> seg;
  DeviceLoraSlots slots;
  DeviceSegments segments;
};

inline DeviceLora make_device_lora(const Scenario& sc, const HostLora& hl) {
  DeviceLora d;
  d.A = upload_vec(hl.A);
  d.B = upload_vec(hl.B);
  d.scale = upload_vec(hl.scale);
  d.rank = upload_vec(hl.rank);
  d.seg = upload_vec(sc.segments);
  d.slots = DeviceLoraSlots{d.A.data(),   d.B.data(),  d.rank.data(), d.scale.data(),
                            hl.max_slots, hl.max_rank, hl.d_in,       hl.d_out};
  d.segments = DeviceSegments{d.seg.data(), int32_t(sc.segments.size()), sc.rows};
  return d;
}

inline std::vector<float> nans(size_t n) {
  return std::vector<float>(n, std::nanf(""));
}

inline std::vector<float> times(const std::vector<float>& v, float c) {
  std::vector<float> out(v);
  for (float& x : out) x *= c;
  return out;
}

}  // namespace spindle::kernels::cuda::test
