#pragma once
// The Residency view: a Dear ImGui panel (ResidencyPanel, in a QOpenGLWidget) over a
// ResidencyModel — the serving slot grid (revision, in use, loading), host cache fill, the
// cold-load queue and its mean wait, device and host hit rates, and a tokens/s sparkline —
// redrawn at 60 Hz while visible (DESIGN.md "Studio": dense live panels in ImGui, forms in Qt).

#include "spindle/ui/imgui_widget.h"
#include "spindle/ui/studio_view.h"

namespace spindle::ui {

class ResidencyModel;

// Whether this display can create an OpenGL context (false on Qt's offscreen and minimal
// platforms, where a QOpenGLWidget in a shown window crashes Qt 6.4's backing-store flush).
bool opengl_available();

class ResidencyPanel : public ImGuiWidget {
  Q_OBJECT
 public:
  explicit ResidencyPanel(ResidencyModel* model, QWidget* parent = nullptr);

 protected:
  void drawFrame() override;

 private:
  ResidencyModel* model_;
};

class ResidencyView : public StudioView {
  Q_OBJECT
 public:
  explicit ResidencyView(Connection* connection, QWidget* parent = nullptr);
  QString title() const override { return "Residency"; }
  QString screenshotName() const override { return "residency"; }
  void refresh() override;
  void prepareScreenshot() override;

  ResidencyModel* model() const { return model_; }
  ResidencyPanel* panel() const { return panel_; }  // null without OpenGL (a note instead)

 protected:
  void showEvent(QShowEvent* e) override;
  void hideEvent(QHideEvent* e) override;

 private:
  ResidencyModel* model_;
  ResidencyPanel* panel_;
};

}  // namespace spindle::ui
