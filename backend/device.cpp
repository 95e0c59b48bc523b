#include "backend/device.h"

#include "backend/logging.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <string>

namespace lazyfuse {
namespace {

bool cudaUsable() {
  if (!at::hasCUDA()) return false;
  return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) &&
         c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount() > 0;
}

c10::Device chooseHardwareDevice() {
  const std::string choice = config::device();
  if (choice == "cpu") return c10::Device(c10::DeviceType::CPU);
  const bool cuda = cudaUsable();
  LF_CHECK(choice != "cuda" || cuda,
           "LAZYFUSE_DEVICE=cuda was asked for, but no CUDA device is usable");
  c10::Device device =
      cuda ? c10::Device(c10::DeviceType::CUDA, 0) : c10::Device(c10::DeviceType::CPU);
  LF_LOG_INFO("lazy tensors execute on ", device.str());
  return device;
}

// Lazy tensors have one device and no streams of their own. The autograd engine and device
// guards ask for an implementation of this interface for every device type they see.
class LazyGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::Lazy; }
  c10::Device exchangeDevice(c10::Device) const override { return lazyDevice(); }
  c10::Device getDevice() const override { return lazyDevice(); }
  void setDevice(c10::Device device) const override {
    LF_CHECK(device.index() <= 0, "lazy has a single device, got ", device.str());
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, lazyDevice());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};

C10_REGISTER_GUARD_IMPL(Lazy, LazyGuardImpl);

}  // namespace

c10::Device lazyDevice() { return c10::Device(c10::DeviceType::Lazy, 0); }

c10::Device hardwareDevice() {
  static const c10::Device device = chooseHardwareDevice();
  return device;
}

c10::Device toHardware(c10::Device device) {
  return isLazyDevice(device) ? hardwareDevice() : device;
}

}  // namespace lazyfuse
