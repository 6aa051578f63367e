// Tensor storage: one-block allocation (Tensor::in_one_block) gives independent, aligned,
// correctly shaped tensors that outlive each other in any order.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <utility>

#include "spindle/core/error.h"
#include "spindle/core/tensor.h"

namespace spindle {
namespace {

TEST(TensorBlock, CarvesAlignedDisjointTensorsOfTheGivenShapes) {
  const std::vector<Shape> shapes = {{3, 5}, {1}, {0, 4}, {7, 2, 3}, {}};
  std::vector<Tensor> ts = Tensor::in_one_block(shapes);
  ASSERT_EQ(ts.size(), shapes.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(ts[i].shape(), shapes[i]);
    EXPECT_EQ(ts[i].numel(), shape_numel(shapes[i]));
    ASSERT_NE(ts[i].data(), nullptr) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ts[i].data()) % 64, 0u) << i;
  }
  // Writing each tensor whole leaves every other one intact (no overlap).
  for (size_t i = 0; i < ts.size(); ++i) ts[i].fill(float(i + 1));
  for (size_t i = 0; i < ts.size(); ++i) {
    for (float x : ts[i].span()) EXPECT_EQ(x, float(i + 1)) << i;
  }
}

TEST(TensorBlock, TensorsOutliveEachOtherAndTheirVector) {
  Tensor kept;
  {
    std::vector<Tensor> ts = Tensor::in_one_block(std::vector<Shape>{{4, 4}, {1024, 1024}, {2}});
    ts[1].fill(2.5f);
    std::iota(ts[0].data(), ts[0].data() + ts[0].numel(), 0.0f);
    kept = std::move(ts[1]);
    ts[0] = Tensor::zeros({3});  // a block tensor replaced: the block stays alive through ts[1..]
    Tensor copy = ts[2].clone();  // a clone is an ordinary tensor
    EXPECT_EQ(copy.shape(), Shape({2}));
  }
  // Only `kept` holds the block now; it is readable and writable.
  ASSERT_EQ(kept.numel(), 1024 * 1024);
  for (float x : kept.span()) ASSERT_EQ(x, 2.5f);
  kept.fill(1.0f);
  EXPECT_EQ(kept.data()[1024 * 1024 - 1], 1.0f);
}

TEST(TensorBlock, EmptyListAndLargeBlocks) {
  EXPECT_TRUE(Tensor::in_one_block({}).empty());
  // A block over 8 MiB (huge-page aligned) of many small tensors, as an adapter snapshot is.
  std::vector<Shape> shapes(400, Shape{8, 1024});
  std::vector<Tensor> ts = Tensor::in_one_block(shapes);
  for (size_t i = 0; i < ts.size(); ++i) ts[i].fill(float(i));
  for (size_t i = 0; i < ts.size(); i += 37) EXPECT_EQ(ts[i].data()[8 * 1024 - 1], float(i));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ts[0].data()) % (size_t(2) << 20), 0u);
}

TEST(TensorBlock, NegativeDimensionIsRefusedBeforeAllocating) {
  EXPECT_THROW(Tensor::in_one_block(std::vector<Shape>{{2}, {-1, 3}}), Error);
}

}  // namespace
}  // namespace spindle
