#include "spindle/ui/residency_view.h"

#include <QGuiApplication>
#include <QLabel>
#include <QOpenGLContext>
#include <QTimer>
#include <QVBoxLayout>

#include <imgui.h>

#include <algorithm>

#include "spindle/ui/connection.h"
#include "spindle/ui/residency_model.h"

namespace spindle::ui {

namespace {

QString bytes_text(uint64_t b) {
  if (b >= (1ull << 30)) return QString::number(double(b) / double(1ull << 30), 'f', 2) + " GiB";
  if (b >= (1ull << 20)) return QString::number(double(b) / double(1ull << 20), 'f', 1) + " MiB";
  if (b >= (1ull << 10)) return QString::number(double(b) / double(1ull << 10), 'f', 1) + " KiB";
  return QString::number(b) + " B";
}

void text(const QString& s) { ImGui::TextUnformatted(s.toUtf8().constData()); }

void draw_slot_grid(const QVector<SlotCell>& cells) {
  const float cell = 28.0f, gap = 4.0f;
  const float avail = ImGui::GetContentRegionAvail().x;
  const int per_row = std::max(1, int((avail + gap) / (cell + gap)));
  const int rows = (int(cells.size()) + per_row - 1) / per_row;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImU32 free_c = ImGui::GetColorU32(ImGuiCol_FrameBg);
  const ImU32 resident_c = IM_COL32(70, 130, 220, 255);
  const ImU32 in_use_c = IM_COL32(60, 190, 110, 255);
  const ImU32 loading_c = IM_COL32(235, 170, 50, 255);
  const ImU32 border_c = ImGui::GetColorU32(ImGuiCol_Border);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (int i = 0; i < cells.size(); ++i) {
    const SlotCell& c = cells[i];
    const ImVec2 a(origin.x + float(i % per_row) * (cell + gap), origin.y + float(i / per_row) * (cell + gap));
    const ImVec2 b(a.x + cell, a.y + cell);
    const ImU32 fill = c.loading ? loading_c : c.in_use ? in_use_c : !c.revision.isEmpty() ? resident_c : free_c;
    dl->AddRectFilled(a, b, fill, 3.0f);
    dl->AddRect(a, b, border_c, 3.0f);
    const std::string label = std::to_string(c.slot);
    dl->AddText(ImVec2(a.x + 4, a.y + 6), IM_COL32(255, 255, 255, 230), label.c_str());
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
      ImGui::BeginTooltip();
      text(QStringLiteral("slot %1").arg(c.slot));
      text(c.revision.isEmpty() ? QStringLiteral("free") : QStringLiteral("revision %1").arg(c.revision.left(16)));
      text(c.loading ? QStringLiteral("loading") : c.in_use ? QStringLiteral("in use") : QStringLiteral("idle"));
      ImGui::EndTooltip();
    }
  }
  ImGui::Dummy(ImVec2(avail, float(rows) * (cell + gap)));
  auto legend = [](ImU32 c, const char* name) {
    ImDrawList* d = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    d->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + 12, p.y + 15), c, 2.0f);
    ImGui::Dummy(ImVec2(14, 16));
    ImGui::SameLine();
    ImGui::TextUnformatted(name);
    ImGui::SameLine(0, 18);
  };
  legend(free_c, "free");
  legend(resident_c, "resident");
  legend(in_use_c, "in use");
  legend(loading_c, "loading");
  ImGui::NewLine();
}

// tokens/s over the last ResidencyModel::kHistory samples: a filled line scaled to its peak,
// with the current value and the peak written above it.
void draw_sparkline(const QVector<float>& h, double now) {
  const float peak = h.isEmpty() ? 0.0f : *std::max_element(h.begin(), h.end());
  text(QStringLiteral("Sampled tokens/s  %1   (peak %2 over the last %3 samples)")
           .arg(now, 0, 'f', 1)
           .arg(peak, 0, 'f', 1)
           .arg(h.size()));
  const ImVec2 a = ImGui::GetCursorScreenPos();
  const ImVec2 size(ImGui::GetContentRegionAvail().x, 90.0f);
  const ImVec2 b(a.x + size.x, a.y + size.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(a, b, ImGui::GetColorU32(ImGuiCol_FrameBg), 3.0f);
  const float top = std::max(1.0f, peak * 1.15f);
  const int n = int(h.size());
  if (n >= 2) {
    const float dx = size.x / float(ResidencyModel::kHistory - 1);
    const float x0 = b.x - dx * float(n - 1);
    const ImU32 line = IM_COL32(90, 170, 255, 255), fill = IM_COL32(90, 170, 255, 60);
    for (int i = 1; i < n; ++i) {
      const ImVec2 p0(x0 + dx * float(i - 1), b.y - size.y * h[i - 1] / top);
      const ImVec2 p1(x0 + dx * float(i), b.y - size.y * h[i] / top);
      dl->AddQuadFilled(ImVec2(p0.x, b.y), p0, p1, ImVec2(p1.x, b.y), fill);
      dl->AddLine(p0, p1, line, 2.0f);
    }
  }
  ImGui::Dummy(size);
}

}  // namespace

bool opengl_available() {
  const QString platform = QGuiApplication::platformName();
  if (platform == "offscreen" || platform == "minimal") return false;
  QOpenGLContext probe;
  return probe.create();
}

ResidencyPanel::ResidencyPanel(ResidencyModel* model, QWidget* parent)
    : ImGuiWidget(parent), model_(model) {
  setMinimumSize(480, 360);
}

void ResidencyPanel::drawFrame() {
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  ImGui::Begin("Residency", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus);
  const protocol::StatusReply& s = model_->status();
  if (!model_->hasStatus()) {
    text(model_->lastError().isEmpty() ? QStringLiteral("waiting for the daemon's status...")
                                       : model_->lastError());
    ImGui::End();
    return;
  }
  if (!model_->lastError().isEmpty()) {
    ImGui::TextColored(ImVec4(1.0f, 0.4f, 0.35f, 1.0f), "%s", model_->lastError().toUtf8().constData());
  }
  if (ImGui::BeginTable("figures", 4, ImGuiTableFlags_SizingStretchSame)) {
    ImGui::TableNextColumn();
    text(QStringLiteral("Device slots  %1 / %2 used").arg(s.device_slots_used).arg(s.device_slots));
    ImGui::TableNextColumn();
    text(QStringLiteral("Load queue  %1 queued, %2 running").arg(s.loads_queued).arg(s.loads_running));
    ImGui::TableNextColumn();
    text(QStringLiteral("Mean load wait  %1 ms").arg(s.mean_load_wait_ms, 0, 'f', 1));
    ImGui::TableNextColumn();
    text(QStringLiteral("Parked  %1").arg(s.parked));
    ImGui::TableNextColumn();
    text(QStringLiteral("Device hit rate  %1 %").arg(s.device_hit_rate * 100.0, 0, 'f', 1));
    ImGui::TableNextColumn();
    text(QStringLiteral("Host hit rate  %1 %").arg(s.host_hit_rate * 100.0, 0, 'f', 1));
    ImGui::TableNextColumn();
    text(QStringLiteral("Running sequences  %1").arg(s.running_sequences));
    ImGui::TableNextColumn();
    text(QStringLiteral("Training sessions  %1").arg(s.training_sessions));
    // Since the daemon started: why requests waited for a slot (busy growing: every slot is
    // wanted at once, spindled --serving-slots is the bound) and how often slots changed hands.
    ImGui::TableNextColumn();
    text(QStringLiteral("Cold parks  %1").arg(s.cold_parks));
    ImGui::TableNextColumn();
    text(QStringLiteral("Busy parks  %1").arg(s.busy_parks));
    ImGui::TableNextColumn();
    text(QStringLiteral("Slot evictions  %1").arg(s.slot_evictions));
    ImGui::TableNextColumn();
    text(QStringLiteral("Tokens/s  %1").arg(s.tokens_per_s, 0, 'f', 1));
    ImGui::EndTable();
  }
  ImGui::Spacing();
  text(QStringLiteral("Host cache  %1 of %2 (%3 adapters)")
           .arg(bytes_text(s.host_cache_bytes), bytes_text(s.host_cache_capacity))
           .arg(model_->hostCachedCount()));
  ImGui::ProgressBar(float(model_->hostCacheFill()), ImVec2(-1, 0));
  ImGui::Spacing();
  ImGui::Separator();
  text(QStringLiteral("Serving slots"));
  draw_slot_grid(model_->slotCells());
  ImGui::Separator();
  draw_sparkline(model_->tokensHistory(), s.tokens_per_s);
  ImGui::Separator();
  if (ImGui::BeginTable("placements", 4,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY,
                        ImVec2(0, std::max(80.0f, ImGui::GetContentRegionAvail().y)))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("revision");
    ImGui::TableSetupColumn("tier");
    ImGui::TableSetupColumn("slot");
    ImGui::TableSetupColumn("in use");
    ImGui::TableHeadersRow();
    for (const auto& p : s.placements) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.revision_id.substr(0, 16).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.tier.c_str());
      ImGui::TableNextColumn();
      if (p.slot >= 0) ImGui::Text("%d", p.slot);
      else ImGui::TextUnformatted("-");
      ImGui::TableNextColumn();
      ImGui::Text("%d", p.in_use);
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

ResidencyView::ResidencyView(Connection* connection, QWidget* parent)
    : StudioView(connection, parent),
      model_(new ResidencyModel(connection, this)),
      panel_(opengl_available() ? new ResidencyPanel(model_, this) : nullptr) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  if (panel_) {
    layout->addWidget(panel_);
  } else {
    auto* note = new QLabel(tr("The residency panel draws with OpenGL, which this display (Qt platform "
                               "'%1') does not offer; the figures are in the status bar.")
                                .arg(QGuiApplication::platformName()),
                            this);
    note->setWordWrap(true);
    note->setAlignment(Qt::AlignCenter);
    layout->addWidget(note);
  }
  connect(model_, &ResidencyModel::error, this, &StudioView::statusMessage);
}

void ResidencyView::refresh() { model_->start(); }

void ResidencyView::showEvent(QShowEvent* e) {
  StudioView::showEvent(e);
  model_->start();
}

void ResidencyView::hideEvent(QHideEvent* e) {
  model_->stop();
  StudioView::hideEvent(e);
}

void ResidencyView::prepareScreenshot() {
  model_->start();
  auto* wait = new QTimer(this);
  wait->setInterval(50);
  connect(wait, &QTimer::timeout, this, [this, wait] {
    // Status arrived and the panel drew a few frames with it (the sparkline needs samples).
    const bool drawn = panel_ && panel_->framesDrawn() > 10;
    const bool no_gl = !panel_ || !panel_->hasGl();
    if ((model_->hasStatus() && model_->tokensHistory().size() >= 3 && drawn) ||
        !model_->lastError().isEmpty() || (model_->hasStatus() && no_gl)) {
      wait->deleteLater();
      emit readyForScreenshot();
    }
  });
  wait->start();
}

}  // namespace spindle::ui
