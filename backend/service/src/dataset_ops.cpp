// datasets (worker_ops.h): rl's built-in datasets, loaded once per daemon.

#include <cstdlib>

#include "spindle/rl/datasets.h"
#include "worker_ops.h"

namespace spindle::service {

using namespace protocol;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMaxExamples = 20;  // validate.cpp's bound on DatasetsRequest::examples

struct BuiltIn {
  const char* name;
  const char* description;
};
constexpr BuiltIn kBuiltIns[] = {
    {"arith", "two-number arithmetic ('37+45='), the embedded base's task; needs no files"},
    {"gsm8k", "GSM8K grade-school math word problems (gsm8k/train.jsonl), reference '#### N'"},
    {"countdown", "Countdown: reach a target from given numbers "
                  "(countdown/countdown_cd3_test.jsonl)"},
};

// Every built-in with up to kMaxExamples examples; a dataset that does not load is listed as
// unavailable with the loader's message.
DatasetsReply load_all(const fs::path& data_root) {
  DatasetsReply out;
  for (const BuiltIn& b : kBuiltIns) {
    DatasetInfo info;
    info.name = b.name;
    info.description = b.description;
    try {
      rl::DatasetConfig config;
      config.name = b.name;
      const rl::Dataset ds = rl::load_dataset(config, data_root, /*seed=*/0);
      info.available = true;
      info.rows = int64_t(ds.train.size());
      info.heldout_rows = int64_t(ds.heldout.size());
      for (size_t i = 0; i < ds.train.size() && i < kMaxExamples; ++i) {
        info.examples.push_back(
            {ds.train[i].prompt, ds.train[i].reference, ds.train[i].metadata_json});
      }
    } catch (const std::exception& e) {
      info.error = data_root.empty() ? std::string(e.what()) +
                                           " (no data root: set --data-root or SPINDLE_SHARED_DIR)"
                                     : e.what();
    }
    out.datasets.push_back(std::move(info));
  }
  return out;
}

}  // namespace

fs::path data_root_of(const ServiceConfig& c) {
  if (!c.data_root.empty()) return c.data_root;
  if (const char* shared = std::getenv("SPINDLE_SHARED_DIR"); shared && *shared) {
    return fs::path(shared) / "data";
  }
  return {};
}

void reply_datasets(Daemon& d, const Call& call, const DatasetsRequest& request) {
  DatasetsReply out;
  {
    DatasetCache& cache = *d.datasets;
    std::lock_guard lock(cache.mutex);  // a second worker waits for the first load
    if (!cache.reply) cache.reply = load_all(data_root_of(d.config));
    out = *cache.reply;
  }
  for (DatasetInfo& info : out.datasets) {
    if (info.examples.size() > request.examples) info.examples.resize(request.examples);
  }
  d.replies->ok(call, std::move(out));
}

}  // namespace spindle::service
