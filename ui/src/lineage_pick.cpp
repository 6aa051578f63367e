// LineageModel::loadRichest: pick a policy worth showing without a bulk scan (lineage_model.h).

#include <QHash>

#include <algorithm>
#include <memory>

#include "spindle/ui/connection.h"
#include "spindle/ui/lineage_model.h"

namespace spindle::ui {

using namespace protocol;

void LineageModel::loadRichest(int candidates) {
  const quint64 generation = ++generation_;
  loading_ = true;
  CatalogListRequest q;
  q.limit = 200;
  connection_->post(this, Op::catalog_list, q, [this, generation, candidates](const Reply& r) {
    if (generation != generation_) return;
    if (fail(r)) {
      loading_ = false;
      emit ready();
      return;
    }
    std::vector<PolicyInfo> with_head;
    for (const auto& p : std::get<PolicyListReply>(r.body).policies)
      if (!p.head.empty()) with_head.push_back(p);
    if (with_head.empty()) {
      loading_ = false;
      emit ready();
      return;
    }
    std::stable_sort(with_head.begin(), with_head.end(),
                     [](const auto& a, const auto& b) { return a.updated_ms > b.updated_ms; });
    with_head.resize(std::min(with_head.size(), size_t(std::max(1, candidates))));
    struct Pick {
      int waiting = 0;
      size_t best = 0;
      std::string address;
    };
    auto pick = std::make_shared<Pick>();
    pick->waiting = int(with_head.size());
    pick->address = with_head.front().address;
    for (const auto& p : with_head) {
      connection_->post(this, Op::catalog_show, AddressRequest{p.address},
                        [this, generation, pick, address = p.address](const Reply& s) {
                          if (generation != generation_) return;
                          if (s.ok) {
                            const size_t n = std::get<PolicyReply>(s.body).recent.size();
                            if (n > pick->best) {
                              pick->best = n;
                              pick->address = address;
                            }
                          }
                          if (--pick->waiting == 0) load(QString::fromStdString(pick->address));
                        });
    }
  });
}

}  // namespace spindle::ui
