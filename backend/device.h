#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace lazyfuse {

/// lazy:0, the device users see.
c10::Device lazyDevice();
/// Where lazy tensors really execute: LAZYFUSE_DEVICE (cuda|cpu), else CUDA when available.
c10::Device hardwareDevice();
/// `device` with lazy replaced by the hardware device.
c10::Device toHardware(c10::Device device);

inline bool isLazyDevice(c10::Device device) { return device.type() == c10::DeviceType::Lazy; }
inline bool isLazy(const at::Tensor& tensor) {
  return tensor.defined() && isLazyDevice(tensor.device());
}

}  // namespace lazyfuse
