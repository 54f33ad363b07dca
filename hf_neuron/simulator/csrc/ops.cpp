// ATen side of the simulated Neuron device: the few native kernels, and a boxed fallback that
// runs every other op with the CPU kernel on zero-copy CPU views of the neuron tensors.
#include "neuron_sim.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <unordered_set>

namespace hf_neuron_sim {

namespace {

std::atomic<bool> g_strict{false};
thread_local bool tl_quiet = false;
std::mutex g_warn_mutex;
std::unordered_set<std::string> g_warned;

bool strict_now() {
  return g_strict.load() && !tl_quiet;
}

bool warn_first_time(const std::string& key) {
  if (tl_quiet) {
    return false;
  }
  std::lock_guard<std::mutex> lock(g_warn_mutex);
  return g_warned.insert(key).second;
}

void delete_storage_ref(void* ctx) {
  delete static_cast<c10::Storage*>(ctx);
}

c10::DeviceIndex resolve_index(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) {
    check_device_index(device->index());
    return device->index();
  }
  return current_device();
}

void check_memory_format(std::optional<c10::MemoryFormat> memory_format) {
  if (!memory_format.has_value()) {
    return;
  }
  TORCH_CHECK(
      *memory_format == c10::MemoryFormat::Contiguous || *memory_format == c10::MemoryFormat::Preserve,
      "Neuron tensors only support contiguous or preserve memory format, got ", *memory_format,
      ". Drop the memory_format argument (channels_last has no Neuron layout).");
}

void check_dtype_supported(c10::ScalarType dtype) {
  TORCH_CHECK(!c10::isFloat8Type(dtype), "Neuron devices do not support ", dtype,
              " tensors (no FP8 support in TorchNeuron). Use bfloat16 or float16 instead.");
  if (dtype == c10::ScalarType::Double && strict_now()) {
    TORCH_CHECK(false,
                "float64 tensors are computed as float32 on Neuron devices (strict dtype mode: "
                "HF_NEURON_SIM_STRICT_DTYPES=1). Use float32, or keep this computation on CPU.");
  }
}

// Neuron stores float64 as float32 and int64 as int32 while reporting the 64-bit dtype.
void apply_dtype_policy(const at::Tensor& neuron, const char* op_name) {
  const auto dtype = neuron.scalar_type();
  if (dtype != c10::ScalarType::Double && dtype != c10::ScalarType::Long) {
    return;
  }
  if (neuron.numel() == 0) {
    return;
  }
  at::Tensor view = cpu_view(neuron);
  if (dtype == c10::ScalarType::Double) {
    TORCH_CHECK(!strict_now(), op_name,
                " produced a float64 tensor on a Neuron device, where float64 is computed as float32 "
                "(strict dtype mode: HF_NEURON_SIM_STRICT_DTYPES=1). Use float32, or compute on CPU.");
    view.copy_(view.to(c10::ScalarType::Float));
    if (warn_first_time(std::string("f64:") + op_name)) {
      TORCH_WARN(op_name, " on neuron: float64 is stored and computed as float32 on Neuron devices; values "
                 "were rounded to float32 precision. Set HF_NEURON_SIM_STRICT_DTYPES=1 to make this an error.");
    }
    return;
  }
  auto minmax = at::aminmax(view);
  const int64_t lo = std::get<0>(minmax).item<int64_t>();
  const int64_t hi = std::get<1>(minmax).item<int64_t>();
  if (lo >= std::numeric_limits<int32_t>::min() && hi <= std::numeric_limits<int32_t>::max()) {
    return;
  }
  TORCH_CHECK(!strict_now(), op_name, " produced int64 values outside the int32 range (", lo, " .. ", hi,
              ") on a Neuron device, where int64 is stored as int32 (strict dtype mode).");
  view.copy_(view.to(c10::ScalarType::Int));
  if (warn_first_time(std::string("i64:") + op_name)) {
    TORCH_WARN(op_name, " on neuron: int64 is stored as int32 on Neuron devices; values outside the int32 range "
               "(seen: ", lo, " .. ", hi, ") wrapped around. Set HF_NEURON_SIM_STRICT_DTYPES=1 to make this an error.");
  }
}

at::Tensor make_neuron_alias(const at::Tensor& neuron_base, const at::Tensor& cpu_result) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(neuron_base.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), cpu_result.dtype());
  impl->set_sizes_and_strides(cpu_result.sizes(), cpu_result.strides(), cpu_result.storage_offset());
  return at::Tensor(std::move(impl));
}

// After an op wrote through a CPU view, make the neuron tensor reflect what the kernel did to the
// view's metadata (out= tensors are resized by kernels) and, if it reallocated, its memory.
void sync_back(const at::Tensor& neuron, const at::Tensor& view) {
  auto* n_impl = neuron.unsafeGetTensorImpl();
  const auto& view_storage = view.storage();
  if (view_storage.data() != neuron.storage().data()) {
    c10::DeviceGuard guard(neuron.device());
    at::native::resize_bytes_cpu(neuron.storage().unsafeGetStorageImpl(), view_storage.nbytes());
    if (view_storage.nbytes() > 0) {
      std::memcpy(neuron.storage().mutable_data(), view_storage.data(), view_storage.nbytes());
    }
  }
  if (view.sizes() != neuron.sizes() || view.strides() != neuron.strides() ||
      view.storage_offset() != neuron.storage_offset()) {
    n_impl->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
  }
}

// `kind`, or an optional of it, as in a schema argument `Generator? generator`.
bool is_kind_or_optional(const c10::TypePtr& type, c10::TypeKind kind) {
  if (type->kind() == kind) {
    return true;
  }
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == kind;
  }
  return false;
}

bool is_generator_type(const c10::TypePtr& type) {
  return is_kind_or_optional(type, c10::TypeKind::GeneratorType);
}

bool is_memory_format_type(const c10::TypePtr& type) {
  return is_kind_or_optional(type, c10::TypeKind::MemoryFormatType);
}

struct Origin {
  at::Tensor neuron;
  at::Tensor view;
};

bool accepts_cpu_indices(const c10::OperatorName& name, const std::string& arg) {
  // As on CUDA, advanced indexing accepts index tensors that live on the CPU.
  return arg == "indices" &&
         (name.name == "aten::index" || name.name == "aten::index_put" || name.name == "aten::index_put_" ||
          name.name == "aten::_index_put_impl_" || name.name == "aten::_unsafe_index" ||
          name.name == "aten::_unsafe_index_put");
}

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t num_args = args.size();
  const size_t begin = stack->size() - num_args;

  c10::SmallVector<Origin, 8> origins;
  c10::DeviceIndex device = -1;
  const char* cpu_arg = nullptr;
  c10::SmallVector<size_t, 2> default_generator_args;

  auto to_view = [&](const at::Tensor& t, const std::string& arg_name) -> at::Tensor {
    if (!t.defined()) {
      return t;
    }
    if (t.device().type() == kNeuron) {
      const auto index = t.device().index();
      if (device < 0) {
        device = index;
      } else {
        TORCH_CHECK(device == index, "Expected all tensors to be on the same device, but found at least two "
                    "devices, neuron:", static_cast<int>(device), " and neuron:", static_cast<int>(index),
                    "! (when checking argument ", arg_name, " in method ", schema.operator_name(), ")");
      }
      at::Tensor view = cpu_view(t);
      origins.push_back({t, view});
      return view;
    }
    if (t.device().is_cpu() && t.dim() > 0 && cpu_arg == nullptr &&
        !accepts_cpu_indices(schema.operator_name(), arg_name)) {
      cpu_arg = arg_name.c_str();
    }
    return t;
  };

  for (size_t i = 0; i < num_args; ++i) {
    auto& iv = (*stack)[begin + i];
    const auto& arg = args[i];
    if (iv.isTensor()) {
      iv = to_view(iv.toTensor(), arg.name());
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      c10::List<at::Tensor> mapped;
      mapped.reserve(list.size());
      for (const at::Tensor& t : list) {
        mapped.push_back(to_view(t, arg.name()));
      }
      iv = mapped;
    } else if (iv.isList() && iv.toListRef().size() > 0 && arg.type()->str().find("Tensor") != std::string::npos) {
      auto list = iv.toList();
      c10::impl::GenericList mapped(list.elementType());
      mapped.reserve(list.size());
      for (const c10::IValue& el : list) {
        mapped.push_back(el.isTensor() ? c10::IValue(to_view(el.toTensor(), arg.name())) : el);
      }
      iv = mapped;
    } else if (iv.isGenerator()) {
      const auto& gen = iv.toGenerator();
      if (gen.device().type() == kNeuron) {
        iv = cpu_generator_for(gen);
      }
    } else if (iv.isNone() && is_generator_type(arg.type())) {
      default_generator_args.push_back(i);
    } else if (iv.isDevice()) {
      const auto dev = iv.toDevice();
      if (dev.type() == kNeuron) {
        if (device < 0) {
          device = resolve_index(dev);
        }
        iv = c10::Device(c10::DeviceType::CPU);
      }
    } else if (iv.isInt() && is_memory_format_type(arg.type())) {
      check_memory_format(static_cast<c10::MemoryFormat>(iv.toInt()));
    }
  }
  if (device < 0) {
    device = current_device();
  }
  if (cpu_arg != nullptr && !origins.empty()) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, neuron:",
                static_cast<int>(device), " and cpu! (when checking argument ", cpu_arg, " in method ",
                schema.operator_name(), "). Move the tensor with .to(\"neuron\").");
  }
  for (size_t i : default_generator_args) {
    (*stack)[begin + i] = cpu_generator_for(default_generator(device));
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  for (const auto& o : origins) {
    sync_back(o.neuron, o.view);
  }

  const std::string& op_name = schema.name();
  auto map_result = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || !r.device().is_cpu()) {
      return r;
    }
    for (const auto& o : origins) {
      if (r.unsafeGetTensorImpl() == o.view.unsafeGetTensorImpl()) {
        apply_dtype_policy(o.neuron, op_name.c_str());
        return o.neuron;
      }
    }
    if (r.layout() != c10::kStrided) {
      if (warn_first_time("layout:" + op_name)) {
        TORCH_WARN(op_name, " returned a ", r.layout(), " tensor: Neuron has no kernels for non-strided layouts, "
                   "so on Trainium this runs on the CPU. The result stays on the CPU here too.");
      }
      return r;
    }
    for (const auto& o : origins) {
      if (r.storage().is_alias_of(o.view.storage())) {
        return make_neuron_alias(o.neuron, r);
      }
    }
    at::Tensor n = adopt(r, device);
    apply_dtype_policy(n, op_name.c_str());
    return n;
  };

  const size_t num_returns = schema.returns().size();
  const size_t rbegin = stack->size() - num_returns;
  for (size_t j = 0; j < num_returns; ++j) {
    auto& iv = (*stack)[rbegin + j];
    if (iv.isTensor()) {
      iv = map_result(iv.toTensor());
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      c10::List<at::Tensor> mapped;
      mapped.reserve(list.size());
      for (const at::Tensor& t : list) {
        mapped.push_back(map_result(t));
      }
      iv = mapped;
    }
  }
}

// ---- native kernels ----
at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_memory_format(memory_format);
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_dtype_supported(scalar_type);
  c10::DeviceGuard guard(c10::Device(kNeuron, resolve_index(device)));
  return at::detail::empty_generic(size, neuron_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   scalar_type, memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_dtype_supported(scalar_type);
  c10::DeviceGuard guard(c10::Device(kNeuron, resolve_index(device)));
  return at::detail::empty_strided_generic(size, stride, neuron_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), scalar_type);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, neuron_allocator(), true);
  self.set_(storage, 0, {0}, {});
  return self;
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  check_memory_format(memory_format);
  c10::DeviceGuard guard(self.device());
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, std::nullopt);
  return self;
}

// The conjugate / negative bits live on the neuron tensor; the CPU view must carry them so the
// CPU copy materialises them (the dispatcher lets _copy_from through with the bits set).
at::Tensor with_math_bits(at::Tensor view, const at::Tensor& of) {
  if (of.is_conj()) {
    view = view._conj();
  }
  if (of.is_neg()) {
    view = view._neg_view();
  }
  return view;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool src_neuron = self.device().type() == kNeuron;
  const bool dst_neuron = dst.device().type() == kNeuron;
  TORCH_CHECK(self.device().is_cpu() || src_neuron, "copy from ", self.device(), " to ", dst.device(),
              " is not supported by the simulated Neuron device");
  TORCH_CHECK(dst.device().is_cpu() || dst_neuron, "copy from ", self.device(), " to ", dst.device(),
              " is not supported by the simulated Neuron device");
  if (dst_neuron) {
    check_dtype_supported(dst.scalar_type());
  }
  at::Tensor src_view = src_neuron ? with_math_bits(cpu_view(self), self) : self;
  at::Tensor dst_view = dst_neuron ? with_math_bits(cpu_view(dst), dst) : dst;
  dst_view.copy_(src_view);
  if (dst_neuron && !src_neuron) {
    apply_dtype_policy(dst, "aten::copy_");
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

// histc on integer tensors: CPU kernels only take floating inputs, accelerators (CUDA) take
// integers too, and Transformers' MoE routing relies on that off the CPU. Counts of small integers
// are exact in float32, so this equals what an accelerator computes.
at::Tensor histc(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
  at::Tensor view = cpu_view(self);
  at::Tensor out = c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                       ? at::histc(view.to(at::kFloat), bins, min, max).to(self.scalar_type())
                       : at::histc(view, bins, min, max);
  return adopt(out, self.device().index());
}

// Convolutions reach accelerators through the *_overrideable ops; run CPU's convolution on views.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> bias_view;
  if (bias.has_value() && bias->defined()) {
    bias_view = cpu_view(*bias);
  }
  at::Tensor out = at::convolution(cpu_view(input), cpu_view(weight), bias_view, stride, padding, dilation, transposed,
                                   output_padding, groups);
  return adopt(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<int64_t> bias_sizes{out_channels};
  auto grads = at::convolution_backward(cpu_view(grad_output), cpu_view(input), cpu_view(weight),
                                        c10::IntArrayRef(bias_sizes), stride, padding, dilation, transposed,
                                        output_padding, groups, output_mask);
  const auto index = input.device().index();
  auto back = [index](const at::Tensor& t) { return t.defined() ? adopt(t, index) : t; };
  return {back(std::get<0>(grads)), back(std::get<1>(grads)), back(std::get<2>(grads))};
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(cpu_view(self));
}

void record_stream(at::Tensor& self, c10::Stream stream) {}

std::unordered_set<std::string>& native_op_names() {
  static std::unordered_set<std::string> names = {
      "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
      "aten::_reshape_alias", "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset",
      "aten::set_.source_Tensor", "aten::set_", "aten::resize_", "aten::_copy_from",
      "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::record_stream", "aten::histc",
      "aten::convolution_overrideable", "aten::convolution_backward_overrideable"};
  return names;
}

}  // namespace

at::Tensor cpu_view(const at::Tensor& t) {
  const c10::Storage& storage = t.storage();
  auto* keep_alive = new c10::Storage(storage);
  c10::DataPtr data(storage.mutable_data(), keep_alive, &delete_storage_ref, c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(data),
                           c10::GetCPUAllocator(), /*resizable=*/true);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(cpu_storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    impl->set_wrapped_number(true);
  }
  return at::Tensor(std::move(impl));
}

at::Tensor adopt(const at::Tensor& cpu, c10::DeviceIndex index) {
  auto* storage_impl = cpu.storage().unsafeGetStorageImpl();
  const size_t nbytes = storage_impl->nbytes();
  const bool sole_owner = cpu.use_count() == 1 && cpu.storage().use_count() == 1 &&
                          storage_impl->data_ptr().get_deleter() != &delete_storage_ref && storage_impl->resizable();
  if (!sole_owner) {
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    at::Tensor out = at::detail::empty_strided_generic(cpu.sizes(), cpu.strides(), neuron_allocator(),
                                                       c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                       cpu.scalar_type());
    cpu_view(out).copy_(cpu);
    return out;
  }
  c10::DataPtr taken = storage_impl->set_data_ptr(c10::DataPtr());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, adopt_data_ptr(std::move(taken), nbytes, index),
                       neuron_allocator(), /*resizable=*/true);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), cpu.dtype());
  impl->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
  return at::Tensor(std::move(impl));
}

void set_strict_dtypes(bool strict) {
  g_strict.store(strict);
}

bool strict_dtypes() {
  return g_strict.load();
}

void set_quiet(bool quiet) {
  tl_quiet = quiet;
}

void reset_warnings() {
  std::lock_guard<std::mutex> lock(g_warn_mutex);
  g_warned.clear();
}

// Ops with both a CPU kernel and a composite one would take the composite path on a backend with
// only a boxed fallback (e.g. layer norm), giving results that differ from CPU in the last bits.
// Registering the fallback for them explicitly makes neuron run exactly the CPU kernel.
int register_cpu_path(const std::vector<std::string>& names) {
  static torch::Library* lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static std::unordered_set<std::string> done;
  int count = 0;
  for (const auto& full_name : names) {
    if (native_op_names().count(full_name) || done.count(full_name)) {
      continue;
    }
    TORCH_CHECK(full_name.rfind("aten::", 0) == 0, "register_cpu_path takes aten ops, got ", full_name);
    lib->impl(full_name.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
    done.insert(full_name);
    ++count;
  }
  return count;
}

}  // namespace hf_neuron_sim

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hf_neuron_sim::neuron_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace hf_neuron_sim;
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("histc", TORCH_FN(histc));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

// Let _copy_from see conjugate/negative views as they are (copy_from applies the bits itself);
// the default fallbacks would resolve them through clone -> copy_ -> _copy_from, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
