#pragma once
// The Studio's two themes: Qt's Fusion style with a dark or a light palette, applied to the
// whole application. Views take their colours from the palette (QPalette roles), so both read.

namespace spindle::ui {

void apply_theme(bool dark);
bool theme_is_dark();

}  // namespace spindle::ui
