#include "spindle/ui/imgui_widget.h"

#include <QFile>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QWheelEvent>

#include <imgui.h>
#include <backends/imgui_impl_opengl3.h>

namespace spindle::ui {

namespace {

// Qt key -> index into io.KeysDown (Qt's special keys are 0x01000000 + n; fold them into
// 256..511, printable keys keep their code below 256).
int key_index(int qt_key) {
  if (qt_key >= 0x01000000) return 256 + (qt_key & 0xff);
  return qt_key & 0xff;
}

// Every ImGuiKey must be mapped: ImGui 1.86 asserts (aborts) on an unmapped navigation key.
void map_keys(ImGuiIO& io) {
  io.KeyMap[ImGuiKey_Tab] = key_index(Qt::Key_Tab);
  io.KeyMap[ImGuiKey_LeftArrow] = key_index(Qt::Key_Left);
  io.KeyMap[ImGuiKey_RightArrow] = key_index(Qt::Key_Right);
  io.KeyMap[ImGuiKey_UpArrow] = key_index(Qt::Key_Up);
  io.KeyMap[ImGuiKey_DownArrow] = key_index(Qt::Key_Down);
  io.KeyMap[ImGuiKey_PageUp] = key_index(Qt::Key_PageUp);
  io.KeyMap[ImGuiKey_PageDown] = key_index(Qt::Key_PageDown);
  io.KeyMap[ImGuiKey_Home] = key_index(Qt::Key_Home);
  io.KeyMap[ImGuiKey_End] = key_index(Qt::Key_End);
  io.KeyMap[ImGuiKey_Delete] = key_index(Qt::Key_Delete);
  io.KeyMap[ImGuiKey_Backspace] = key_index(Qt::Key_Backspace);
  io.KeyMap[ImGuiKey_Enter] = key_index(Qt::Key_Return);
  io.KeyMap[ImGuiKey_Escape] = key_index(Qt::Key_Escape);
  io.KeyMap[ImGuiKey_Insert] = key_index(Qt::Key_Insert);
  io.KeyMap[ImGuiKey_Space] = key_index(Qt::Key_Space);
  io.KeyMap[ImGuiKey_KeyPadEnter] = key_index(Qt::Key_Enter);
  io.KeyMap[ImGuiKey_A] = 'A';
  io.KeyMap[ImGuiKey_C] = 'C';
  io.KeyMap[ImGuiKey_V] = 'V';
  io.KeyMap[ImGuiKey_X] = 'X';
  io.KeyMap[ImGuiKey_Y] = 'Y';
  io.KeyMap[ImGuiKey_Z] = 'Z';
}

}  // namespace

ImGuiWidget::ImGuiWidget(QWidget* parent) : QOpenGLWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  timer_.setInterval(16);
  connect(&timer_, &QTimer::timeout, this, qOverload<>(&QWidget::update));
  clock_.start();
  ctx_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini in the user's working directory
  io.ConfigFlags |= ImGuiConfigFlags_NavEnableKeyboard;
  map_keys(io);
  // A proportional UI font when the system has one (Debian's fonts-dejavu-core); ImGui's
  // built-in 13 px bitmap font otherwise.
  for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"}) {
    if (QFile::exists(path) && io.Fonts->AddFontFromFileTTF(path, 15.0f)) break;
  }
  setDarkStyle(true);
}

ImGuiWidget::~ImGuiWidget() {
  timer_.stop();
  if (gl_ok_) {
    makeCurrent();
    ImGui::SetCurrentContext(ctx_);
    ImGui_ImplOpenGL3_Shutdown();
    doneCurrent();
  }
  ImGui::DestroyContext(ctx_);
}

void ImGuiWidget::setDarkStyle(bool dark) {
  dark_ = dark;
  ImGui::SetCurrentContext(ctx_);
  if (dark) ImGui::StyleColorsDark();
  else ImGui::StyleColorsLight();
  ImGui::GetStyle().WindowRounding = 0.0f;
}

void ImGuiWidget::initializeGL() {
  ImGui::SetCurrentContext(ctx_);
  const QSurfaceFormat f = context()->format();
  const bool gl3 = !context()->isOpenGLES() && f.majorVersion() >= 3;
  gl_ok_ = gl3 && ImGui_ImplOpenGL3_Init("#version 130");
}

void ImGuiWidget::resizeGL(int, int) {}

void ImGuiWidget::paintGL() {
  if (!gl_ok_) return;
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  const qreal dpr = devicePixelRatioF();
  io.DisplaySize = ImVec2(float(width()), float(height()));
  io.DisplayFramebufferScale = ImVec2(float(dpr), float(dpr));
  const qint64 now = clock_.nsecsElapsed();
  io.DeltaTime = last_ns_ == 0 ? 1.0f / 60.0f : std::max(1e-6f, float(now - last_ns_) * 1e-9f);
  last_ns_ = now;
  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();
  drawFrame();
  ImGui::Render();
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  io.MouseWheel = 0.0f;
  ++frames_;
  ++frames_this_second_;
  if (now - second_start_ns_ >= 1'000'000'000) {
    fps_ = double(frames_this_second_) * 1e9 / double(now - second_start_ns_);
    frames_this_second_ = 0;
    second_start_ns_ = now;
  }
}

void ImGuiWidget::showEvent(QShowEvent* e) {
  QOpenGLWidget::showEvent(e);
  timer_.start();
}

void ImGuiWidget::hideEvent(QHideEvent* e) {
  timer_.stop();
  QOpenGLWidget::hideEvent(e);
}

void ImGuiWidget::mouseMoveEvent(QMouseEvent* e) {
  ImGui::SetCurrentContext(ctx_);
  const QPointF p = e->position();
  ImGui::GetIO().MousePos = ImVec2(float(p.x()), float(p.y()));
}

void ImGuiWidget::mouseButtons(QMouseEvent* e) {
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  const QPointF p = e->position();
  io.MousePos = ImVec2(float(p.x()), float(p.y()));
  io.MouseDown[0] = e->buttons() & Qt::LeftButton;
  io.MouseDown[1] = e->buttons() & Qt::RightButton;
  io.MouseDown[2] = e->buttons() & Qt::MiddleButton;
}

void ImGuiWidget::mousePressEvent(QMouseEvent* e) { mouseButtons(e); }
void ImGuiWidget::mouseReleaseEvent(QMouseEvent* e) { mouseButtons(e); }

void ImGuiWidget::wheelEvent(QWheelEvent* e) {
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  io.MouseWheel += float(e->angleDelta().y()) / 120.0f;
  io.MouseWheelH += float(e->angleDelta().x()) / 120.0f;
}

void ImGuiWidget::key(QKeyEvent* e, bool down) {
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  io.KeysDown[key_index(e->key())] = down;
  io.KeyCtrl = e->modifiers() & Qt::ControlModifier;
  io.KeyShift = e->modifiers() & Qt::ShiftModifier;
  io.KeyAlt = e->modifiers() & Qt::AltModifier;
  io.KeySuper = e->modifiers() & Qt::MetaModifier;
  if (down && !e->text().isEmpty()) io.AddInputCharactersUTF8(e->text().toUtf8().constData());
}

void ImGuiWidget::keyPressEvent(QKeyEvent* e) { key(e, true); }
void ImGuiWidget::keyReleaseEvent(QKeyEvent* e) { key(e, false); }

}  // namespace spindle::ui
