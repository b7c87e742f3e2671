// Reads a tensor's sizes and dtype straight from its TensorImpl, the way torch's own C++
// extensions do, so the walk creates no torch.Size or int objects per tensor.
//
// Callers pass only exact torch.Tensor / nn.Parameter objects, whose .shape nothing overrides
// unless a TorchFunctionMode is active. Every entry point returns -1 when the fast path does not
// apply (symbolic sizes, custom size
// policies, an active __torch_function__ override, unusual layouts or devices); the Rust caller
// then reads the tensor through Python exactly as before. No C++ exception crosses into Rust.

#include <torch/csrc/autograd/python_variable.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/version.h>

extern "C" {

const char* aft_torch_version() noexcept { return TORCH_VERSION; }

// Sizes of the tensor `obj` (an exact torch.Tensor or nn.Parameter) into `dims` (room for `cap`),
// its c10::ScalarType into `scalar_type`. Returns the rank, or -1.
int aft_tensor_meta(PyObject* obj, int64_t* dims, int cap, int* scalar_type) noexcept {
  try {
    if (at::impl::torch_function_mode_enabled()) {  // a TorchFunctionMode may override .shape
      return -1;
    }
    const at::Tensor& t = THPVariable_Unpack(obj);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides()) {
      return -1;
    }
    c10::IntArrayRef sizes = impl->sizes();
    if (sizes.size() > static_cast<size_t>(cap)) {
      return -1;
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      dims[i] = sizes[i];
    }
    *scalar_type = static_cast<int>(impl->dtype().toScalarType());
    return static_cast<int>(sizes.size());
  } catch (...) {
    return -1;
  }
}

// The first element of a 1-d int64/int32 CPU tensor with at least one element (what
// `cache_position[0].item()` reads). Returns 0 and sets `out`, or -1.
int aft_first_int(PyObject* obj, int64_t* out) noexcept {
  try {
    if (at::impl::torch_function_mode_enabled()) {  // a TorchFunctionMode may override .shape
      return -1;
    }
    const at::Tensor& t = THPVariable_Unpack(obj);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides() || impl->dim() != 1 || impl->sizes()[0] < 1) {
      return -1;
    }
    if (impl->device_type() != c10::DeviceType::CPU || impl->layout() != c10::kStrided || !impl->has_storage()) {
      return -1;
    }
    const void* data = impl->data();
    if (data == nullptr) {
      return -1;
    }
    switch (impl->dtype().toScalarType()) {
      case c10::ScalarType::Long:
        *out = *static_cast<const int64_t*>(data);
        return 0;
      case c10::ScalarType::Int:
        *out = *static_cast<const int32_t*>(data);
        return 0;
      default:
        return -1;
    }
  } catch (...) {
    return -1;
  }
}

// Ask the CPU to start loading the TensorImpl of `obj` (an exact torch.Tensor or nn.Parameter
// whose object header is already cached), so that reading its sizes later does not wait on memory.
void aft_prefetch_tensor(PyObject* obj) noexcept {
  const char* impl = reinterpret_cast<const char*>(THPVariable_Unpack(obj).unsafeGetTensorImpl());
  for (size_t off = 0; off < sizeof(c10::TensorImpl); off += 64) {
    __builtin_prefetch(impl + off);
  }
}

}  // extern "C"
