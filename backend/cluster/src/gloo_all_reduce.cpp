// Gloo's ring all-reduce over TCP between the ranks' processes (cluster/all_reduce.h). The ranks
// exchange their pair addresses through the RendezvousStore (Gloo's connectFullMesh) on the
// first sum(); each sum packs the buffers into one host vector, so a whole adapter's gradients
// travel as one ring all-reduce.

#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <vector>

#include "all_reduce_impl.h"

namespace spindle::cluster::detail {
namespace {

// Gloo's Store over ours, under the group's prefix.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore& store, std::string prefix, std::chrono::milliseconds timeout,
               std::string who)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout), who_(std::move(who)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = wait_for_key(store_, prefix_ + key, timeout_, who_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) wait_for_key(store_, prefix_ + k, timeout, who_);
  }

 private:
  RendezvousStore& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::string who_;
};

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "127.0.0.1";
  return buf;
}

class GlooAllReduce final : public GroupBase {
 public:
  GlooAllReduce(std::shared_ptr<RendezvousStore> store, GroupOptions options)
      : GroupBase(std::move(store), std::move(options), "gloo") {}
  Memory memory() const override { return Memory::host; }

 private:
  void sum_on_transport(std::span<const std::span<float>> buffers, void*) override {
    size_t total = 0;
    for (const auto& b : buffers) total += b.size();
    if (total == 0) return;
    if (!context_) connect();
    float* data = buffers.size() == 1 ? buffers[0].data() : pack(buffers, total);
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, total);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    opts.setTimeout(o_.timeout);
    gloo::allreduce(opts);
    if (buffers.size() != 1) unpack(buffers);
  }
  void connect() {
    gloo::transport::tcp::attr attr;
    attr.hostname = o_.host.empty() ? this_host() : o_.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(o_.rank, o_.size);
    context->setTimeout(o_.timeout);
    StoreAdapter store(*store_, o_.group + "/gloo/", o_.timeout, who_);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  }
  float* pack(std::span<const std::span<float>> buffers, size_t total) {
    scratch_.resize(total);
    size_t at = 0;
    for (const auto& b : buffers) {
      std::memcpy(scratch_.data() + at, b.data(), b.size_bytes());
      at += b.size();
    }
    return scratch_.data();
  }
  void unpack(std::span<const std::span<float>> buffers) {
    size_t at = 0;
    for (const auto& b : buffers) {
      std::memcpy(b.data(), scratch_.data() + at, b.size_bytes());
      at += b.size();
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<float> scratch_;
  uint32_t tag_ = 0;
};

}  // namespace

std::unique_ptr<AllReduce> make_gloo(std::shared_ptr<RendezvousStore> store, GroupOptions options) {
  return std::make_unique<GlooAllReduce>(std::move(store), std::move(options));
}

}  // namespace spindle::cluster::detail
