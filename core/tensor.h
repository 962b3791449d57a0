// Tensor: a name, a dtype, a shape and a view of bytes held alive by a shared owner.
//
// Ownership rules (spec "Persistent input/output feedback"):
//  - Copies and BorrowView() share the owner and the bytes; metadata (name, shape) is
//    independent. Neither a copy nor a view carries write permission.
//  - Only the tensor that allocated its storage (or was moved from it) is writable; kernels
//    write only outputs they allocated.
//  - A tensor without an owner (Unowned) cannot be retained: RetainStorage() throws rather
//    than copying.
//
// Layout: tensors are dense row-major, except read-only strided views (StridedView), which
// persistent append capacity produces for caches with several (batch, head) blocks (each
// block keeps spare rows after its valid ones). raw_data()/data() throw for a strided view,
// so code that assumes a dense layout fails loudly instead of misreading; stride-aware
// readers use strided_data() and strides(), others take Contiguous(). The executor hands
// kernels dense copies unless a kernel declares that it reads an input strided.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"

namespace onnx_light::core::runtime {

using core::DataType;
using Shape = std::vector<int64_t>;

int64_t ShapeNumel(const Shape& shape);  // throws on a negative dimension
// Row-major element strides of a dense tensor of `shape` (a 0 dimension counts as 1, so
// the strides stay distinct). The one copy: kernels and views use it.
Shape DenseStrides(const Shape& shape);
std::string ShapeToString(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Allocates uninitialised storage from `allocator` (strings: n empty strings).
  Tensor(std::string name, DataType dtype, Shape shape, Allocator& allocator = DefaultAllocator());

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept = default;
  Tensor& operator=(Tensor&& other) noexcept = default;

  // Adopt a vector's buffer as storage: no element is copied.
  static Tensor FromFloat(std::string name, Shape shape, std::vector<float> values);
  static Tensor FromInt64(std::string name, Shape shape, std::vector<int64_t> values);
  static Tensor FromInt32(std::string name, Shape shape, std::vector<int32_t> values);
  static Tensor FromDouble(std::string name, Shape shape, std::vector<double> values);
  static Tensor FromBool(std::string name, Shape shape, const std::vector<bool>& values);
  static Tensor FromStrings(std::string name, Shape shape, std::vector<std::string> values);
  template <typename T>
  static Tensor FromVector(std::string name, DataType dtype, Shape shape, std::vector<T> values);
  // A scalar of any numeric dtype from a double (rounded/converted as the dtype requires).
  static Tensor Scalar(std::string name, DataType dtype, double value);

  // Bytes someone else owns, kept alive by `owner` (NumPy array, DLPack capsule, mmap,
  // model initializer). Never writable.
  static Tensor Borrow(std::string name, DataType dtype, Shape shape, const void* data,
                       std::shared_ptr<const void> owner);
  // Bytes with no owner: the caller guarantees their lifetime. Cannot be retained.
  static Tensor Unowned(std::string name, DataType dtype, Shape shape, const void* data);
  // A read-only view with element `strides` (one per dimension, >= 0) over `data`, kept
  // alive by `owner`. Byte-addressable types only. Dense strides give an ordinary tensor.
  static Tensor StridedView(std::string name, DataType dtype, Shape shape, Shape strides,
                            const void* data, std::shared_ptr<const void> owner);

  bool defined() const { return dtype_ != DataType::kUndefined; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const;  // packed for sub-byte types; 0 for strings

  // The dense bytes; throws kFailedPrecondition for a strided view (see Layout above).
  const void* raw_data() const {
    if (!strides_.empty()) ThrowNotContiguous();
    return data_;
  }
  void* mutable_raw_data();  // throws kFailedPrecondition unless writable()
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw_data());
  }
  // Layout queries for stride-aware readers. strides() are in elements, dense ones for an
  // ordinary tensor; strided_data() is the first element whatever the layout.
  bool contiguous() const { return strides_.empty(); }
  Shape strides() const;
  const void* strided_data() const { return data_; }
  // True when every block of the dims from `axis` on is dense (rows may be apart).
  bool DenseFrom(int64_t axis) const;
  // Element offset of block `block` (row-major over the dims before `axis`).
  int64_t BlockOffset(int64_t axis, int64_t block) const;
  // A dense tensor with the same values: this one (shared) when already dense, else a copy.
  Tensor Contiguous(Allocator& allocator = DefaultAllocator()) const;
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(mutable_raw_data());
  }
  std::span<const std::string> strings() const;

  bool writable() const { return writable_; }
  bool has_owner() const { return owner_ != nullptr; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  // How many handles share the owner (1 = this tensor alone): used to decide whether a
  // buffer may be reused in place.
  long owner_use_count() const { return owner_.use_count(); }

  // Returns an owner-backed tensor (this one, moved). Throws for ownerless storage.
  Tensor RetainStorage() &&;
  // Shares owner and bytes with independent metadata; never writable.
  Tensor BorrowView() const;
  // Same bytes viewed with another shape of the same element count. A strided view keeps
  // its bytes when the new shape only splits, merges or adds/removes size-1 dimensions
  // within its dense runs; otherwise this throws (take Contiguous() first).
  Tensor Reshaped(Shape shape) const;
  // Whether Reshaped(shape) can view this tensor without a copy.
  bool CanViewAs(const Shape& shape) const;
  // Reshaped(shape) when possible, else a dense copy with that shape.
  Tensor ReshapedOrCopy(Shape shape, Allocator& allocator = DefaultAllocator()) const;
  // Drops write permission (after a producer finished writing).
  void Seal() { writable_ = false; }

  // Elementwise float view for tests and small utilities (converts FLOAT16/BFLOAT16/ints).
  std::vector<float> ToFloatVector() const;
  std::vector<int64_t> ToInt64Vector() const;
  std::string DebugString() const;  // name, dtype, shape

 private:
  [[noreturn]] void ThrowNotContiguous() const;
  void CheckAllocation(size_t bytes) const;  // against max_tensor_bytes (core/checked_math.h)

  std::string name_;
  DataType dtype_ = DataType::kUndefined;
  Shape shape_;
  Shape strides_;  // empty for a dense tensor; element strides of a strided view
  int64_t numel_ = 0;
  const void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
  bool writable_ = false;
};

template <typename T>
Tensor Tensor::FromVector(std::string name, DataType dtype, Shape shape, std::vector<T> values) {
  auto holder = std::make_shared<std::vector<T>>(std::move(values));
  Tensor t = Borrow(std::move(name), dtype, std::move(shape), holder->data(), holder);
  t.writable_ = true;
  return t;
}

}  // namespace onnx_light::core::runtime
