// RewardDesignerView: "New plugin…" (write, build, install) and the screenshot.

#include <QFileDialog>
#include <QInputDialog>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>

#include "spindle/ui/connection.h"
#include "spindle/ui/plugin_project.h"
#include "spindle/ui/reward_designer_model.h"
#include "spindle/ui/reward_designer_view.h"

namespace spindle::ui {

void RewardDesignerView::newPlugin() {
  bool ok = false;
  const QString name = QInputDialog::getText(
      this, tr("New reward plugin"), tr("Plugin name ([a-z0-9_]+):"), QLineEdit::Normal,
      QStringLiteral("my_reward"), &ok);
  if (!ok) return;
  results_->setCurrentIndex(2);
  if (!isValidPluginName(name)) {
    build_log_->appendPlainText(tr("'%1' is not a plugin name: use [a-z0-9_]+").arg(name));
    return;
  }
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Folder for the plugin project"));
  if (dir.isEmpty()) return;
  const QString project = dir + "/" + name;
  if (const QString e = writePluginProject(project, name, {}); !e.isEmpty()) {
    build_log_->appendPlainText(e);
    return;
  }
  plugin_dir_ = project;
  plugin_name_ = name;
  build_log_->appendPlainText(tr("wrote %1/CMakeLists.txt and %1/%2.cpp (SDK headers: %3)")
                                  .arg(project, name, defaultSdkIncludeDir()));
  build_button_->setEnabled(true);
}

void RewardDesignerView::buildPlugin() {
  if (plugin_dir_.isEmpty() || builder_->running()) return;
  build_button_->setEnabled(false);
  results_->setCurrentIndex(2);
  builder_->start(plugin_dir_, plugin_name_);
}

void RewardDesignerView::installPlugin(const QString& library) {
  // Offered, not forced: the daemon may be remote, where copying here would do nothing.
  const auto answer = QMessageBox::question(
      this, tr("Install plugin"),
      tr("Copy %1 into a plugin folder the daemon searches and rescan?").arg(library));
  if (answer != QMessageBox::Yes) return;
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Plugin folder of spindled"),
                                                        model_->pluginDirHint());
  if (dir.isEmpty()) return;
  const QString e = model_->installPlugin(library, dir);
  build_log_->appendPlainText(e.isEmpty() ? tr("copied into %1; rescanning").arg(dir) : e);
}

void RewardDesignerView::prepareScreenshot() {
  screenshot_pending_ = true;
  auto go = [this] {
    if (model_->termCount() == 0) {
      if (model_->plugin("keywords")) {
        const int k = model_->addTerm("keywords", "story_words");
        model_->setTermValue(k, "present", nlohmann::json::array({"cat", "dog", "happy"}));
      }
      if (model_->plugin("length")) {
        const int l = model_->addTerm("length", "length");
        model_->setTermValue(l, "target", 20);
        model_->setTermValue(l, "tolerance", 4);
        model_->setTermWeight(l, 0.5);
      }
    }
    if (model_->rows()->rowCount() == 0) {
      model_->rows()->setRows({{"Once upon a time", "", ""}, {"The little dog", "", ""},
                               {"Lily saw a cat", "", ""}});
    }
    if (model_->address().isEmpty()) {
      // The served base: the one listed plugin-independent default the daemon always accepts.
      connection_->post(this, protocol::Op::capabilities, protocol::Empty{},
                        [this](const protocol::Reply& r) {
                          if (r.ok && !std::get<protocol::CapabilitiesReply>(r.body).bases.empty()) {
                            model_->setAddress(QString::fromStdString(
                                std::get<protocol::CapabilitiesReply>(r.body).bases[0].id));
                          }
                          model_->setNumSamples(8);
                          model_->run();
                        });
      return;
    }
    model_->run();
  };
  if (model_->plugins().empty()) {
    connect(model_, &RewardDesignerModel::pluginsChanged, this, go, Qt::SingleShotConnection);
    model_->refreshPlugins();
  } else {
    go();
  }
}

void RewardDesignerView::finishScreenshot() {
  if (!screenshot_pending_) return;
  screenshot_pending_ = false;
  emit readyForScreenshot();
}

}  // namespace spindle::ui
