#include "spindle/ui/residency_model.h"

#include "spindle/ui/connection.h"
#include "spindle/ui/event_stream.h"

namespace spindle::ui {

using namespace protocol;

ResidencyModel::ResidencyModel(Connection* connection, QObject* parent)
    : QObject(parent), connection_(connection) {
  connect(&timer_, &QTimer::timeout, this, &ResidencyModel::poll);
  connect(connection_->events(), &EventStream::residency, this, &ResidencyModel::apply);
}

void ResidencyModel::start(int poll_ms) {
  timer_.start(poll_ms);
  poll();
}

void ResidencyModel::stop() { timer_.stop(); }

void ResidencyModel::poll() {
  if (polling_ || !connection_->isOpen()) return;
  polling_ = true;
  connection_->post(this, Op::status, Empty{}, [this](const Reply& r) {
    polling_ = false;
    if (!r.ok) {
      error_ = errorText(r);
      emit error(error_);
      emit changed();
      return;
    }
    error_.clear();
    apply(std::get<StatusReply>(r.body));
  });
}

void ResidencyModel::apply(const StatusReply& status) {
  status_ = status;
  has_status_ = true;
  history_.push_back(float(status.tokens_per_s));
  while (history_.size() > kHistory) history_.pop_front();
  emit changed();
}

QVector<SlotCell> ResidencyModel::slotCells() const {
  QVector<SlotCell> cells(int(status_.device_slots));
  for (int i = 0; i < cells.size(); ++i) cells[i].slot = i;
  for (const PlacementInfo& p : status_.placements) {
    if (p.slot < 0 || p.slot >= cells.size()) continue;
    SlotCell& c = cells[p.slot];
    if (p.tier == "device") {
      c.revision = QString::fromStdString(p.revision_id);
      c.in_use = p.in_use > 0;
    } else if (p.tier == "loading") {
      c.revision = QString::fromStdString(p.revision_id);
      c.loading = true;
    }
  }
  return cells;
}

int ResidencyModel::loadingCount() const {
  int n = 0;
  for (const auto& p : status_.placements) n += p.tier == "loading";
  return n;
}

int ResidencyModel::hostCachedCount() const {
  int n = 0;
  for (const auto& p : status_.placements) n += p.tier == "host";
  return n;
}

double ResidencyModel::hostCacheFill() const {
  if (status_.host_cache_capacity == 0) return 0.0;
  return double(status_.host_cache_bytes) / double(status_.host_cache_capacity);
}

}  // namespace spindle::ui
