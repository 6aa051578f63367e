#pragma once
// Image checks shared by the gui suites: whether a rendered view is blank, and where its PNGs go
// ($SPINDLE_SCREENSHOT_DIR, else the temp dir) so a person can look at them.

#include <QDir>
#include <QImage>
#include <QSet>
#include <QString>

#include <cstdlib>

namespace spindle::testing {

// Variance of the grey level over every pixel (0 for a flat fill; rendered views are in the
// hundreds to thousands).
inline double pixel_variance(const QImage& image) {
  const QImage g = image.convertToFormat(QImage::Format_Grayscale8);
  double sum = 0, sq = 0;
  const double n = double(g.width()) * g.height();
  for (int y = 0; y < g.height(); ++y) {
    const uchar* row = g.constScanLine(y);
    for (int x = 0; x < g.width(); ++x) {
      sum += row[x];
      sq += double(row[x]) * row[x];
    }
  }
  return sq / n - (sum / n) * (sum / n);
}

// Distinct colours on a 7-pixel grid (a blank or one-colour image has 1 or 2).
inline size_t sampled_colours(const QImage& image) {
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 7)
    for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
  return size_t(colours.size());
}

inline QString screenshot_dir() {
  const char* d = std::getenv("SPINDLE_SCREENSHOT_DIR");
  return d && *d ? QString::fromUtf8(d) : QDir::tempPath();
}

}  // namespace spindle::testing
