#pragma once
// The Studio's two themes: Qt's Fusion style with a dark or a light palette, applied to the
// whole application. Views take their colours from the palette (QPalette roles), so both read.

#include <QPalette>

namespace spindle::ui {

QPalette dark_palette();  // the dark theme's palette (tests render views with it)
void apply_theme(bool dark);
bool theme_is_dark();

}  // namespace spindle::ui
