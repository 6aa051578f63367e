// Device names and dtypes (device.h).

#include "spindle/engine/device.h"

#include <fmt/format.h>

namespace spindle::engine {

std::string Device::name() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

}  // namespace spindle::engine
