#pragma once
// Dear ImGui inside Qt (STYLE.md 17; seanchas116/qtimgui's QtImGui/ImGuiRenderer are the
// pattern): a QOpenGLWidget that owns one ImGui context, feeds it Qt's mouse, wheel, key and
// text events, and repaints from a timer while visible (default 60 Hz). Subclasses draw one
// frame in drawFrame(), between ImGui::NewFrame() and ImGui::Render(), with the widget's
// context current.
//
// Rendering uses ImGui's OpenGL 3 backend (imgui_impl_opengl3 from Debian's libimgui-dev), so the
// widget needs a GL 3.0+ context: a real X server (Xvfb in tests) with Mesa is enough; the
// `offscreen` Qt platform has no GL, and there the widget stays blank (hasGl() false).
//
// Threading: GUI thread only.

#include <QElapsedTimer>
#include <QOpenGLWidget>
#include <QTimer>

struct ImGuiContext;

namespace spindle::ui {

class ImGuiWidget : public QOpenGLWidget {
  Q_OBJECT
 public:
  explicit ImGuiWidget(QWidget* parent = nullptr);
  ~ImGuiWidget() override;

  void setFrameInterval(int ms) { timer_.setInterval(ms); }
  // Frames drawn in the last full second (0 until one second has passed).
  double framesPerSecond() const { return fps_; }
  quint64 framesDrawn() const { return frames_; }
  bool hasGl() const { return gl_ok_; }
  void setDarkStyle(bool dark);

 protected:
  virtual void drawFrame() = 0;

  void initializeGL() override;
  void paintGL() override;
  void resizeGL(int w, int h) override;
  void showEvent(QShowEvent* e) override;
  void hideEvent(QHideEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  void keyReleaseEvent(QKeyEvent* e) override;

 private:
  void key(QKeyEvent* e, bool down);
  void mouseButtons(QMouseEvent* e);

  ImGuiContext* ctx_ = nullptr;
  bool gl_ok_ = false;
  bool dark_ = true;
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ns_ = 0;
  qint64 second_start_ns_ = 0;
  int frames_this_second_ = 0;
  double fps_ = 0.0;
  quint64 frames_ = 0;
};

}  // namespace spindle::ui
