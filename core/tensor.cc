#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/checked_math.h"
#include "core/error.h"

namespace onnx_light::core::runtime {

int64_t ShapeNumel(const Shape& shape) { return CheckedNumel(shape, "tensor shape"); }

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor::Tensor(std::string name, DataType dtype, Shape shape, Allocator& allocator)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {
  numel_ = ShapeNumel(shape_);
  if (dtype_ == DataType::kString) {
    CheckAllocation(CheckedStorageBytes(DataType::kInt64, numel_, "string tensor") / 8 *
                    sizeof(std::string));
    auto holder = std::make_shared<std::vector<std::string>>(static_cast<size_t>(numel_));
    data_ = holder->data();
    owner_ = std::move(holder);
  } else {
    OL_CHECK(ElementBits(dtype_) > 0, ErrorCode::kNotImplemented,
             "cannot allocate a tensor of type " + DataTypeName(dtype_) + " for '" + name_ + "'");
    const size_t bytes = CheckedStorageBytes(dtype_, numel_, "tensor");
    CheckAllocation(bytes);
    auto storage = allocator.Allocate(bytes);
    data_ = storage.get();
    owner_ = std::move(storage);
  }
  writable_ = true;
}

void Tensor::CheckAllocation(size_t bytes) const {
  if (bytes <= MaxTensorBytes()) return;  // the message is built only on failure
  CheckTensorBytes(bytes, "tensor '" + name_ + "' of shape " + ShapeToString(shape_) + " (" +
                              DataTypeName(dtype_) + ")");
}

Tensor::Tensor(const Tensor& other)
    : name_(other.name_),
      dtype_(other.dtype_),
      shape_(other.shape_),
      strides_(other.strides_),
      numel_(other.numel_),
      data_(other.data_),
      owner_(other.owner_),
      writable_(false) {}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    name_ = other.name_;
    dtype_ = other.dtype_;
    shape_ = other.shape_;
    strides_ = other.strides_;
    numel_ = other.numel_;
    data_ = other.data_;
    owner_ = other.owner_;
    writable_ = false;
  }
  return *this;
}

Tensor Tensor::FromFloat(std::string name, Shape shape, std::vector<float> values) {
  return FromVector(std::move(name), DataType::kFloat, std::move(shape), std::move(values));
}
Tensor Tensor::FromInt64(std::string name, Shape shape, std::vector<int64_t> values) {
  return FromVector(std::move(name), DataType::kInt64, std::move(shape), std::move(values));
}
Tensor Tensor::FromInt32(std::string name, Shape shape, std::vector<int32_t> values) {
  return FromVector(std::move(name), DataType::kInt32, std::move(shape), std::move(values));
}
Tensor Tensor::FromDouble(std::string name, Shape shape, std::vector<double> values) {
  return FromVector(std::move(name), DataType::kDouble, std::move(shape), std::move(values));
}
Tensor Tensor::FromBool(std::string name, Shape shape, const std::vector<bool>& values) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return FromVector(std::move(name), DataType::kBool, std::move(shape), std::move(bytes));
}
Tensor Tensor::FromStrings(std::string name, Shape shape, std::vector<std::string> values) {
  return FromVector(std::move(name), DataType::kString, std::move(shape), std::move(values));
}

Tensor Tensor::Scalar(std::string name, DataType dtype, double value) {
  Tensor t(std::move(name), dtype, {});
  void* p = t.mutable_raw_data();
  switch (dtype) {
    case DataType::kFloat:
      *static_cast<float*>(p) = static_cast<float>(value);
      break;
    case DataType::kDouble:
      *static_cast<double*>(p) = value;
      break;
    case DataType::kFloat16:
      *static_cast<uint16_t*>(p) = FloatToHalf(static_cast<float>(value));
      break;
    case DataType::kBFloat16:
      *static_cast<uint16_t*>(p) = FloatToBFloat16(static_cast<float>(value));
      break;
    case DataType::kInt64:
      *static_cast<int64_t*>(p) = static_cast<int64_t>(value);
      break;
    case DataType::kInt32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(value);
      break;
    case DataType::kInt16:
      *static_cast<int16_t*>(p) = static_cast<int16_t>(value);
      break;
    case DataType::kInt8:
      *static_cast<int8_t*>(p) = static_cast<int8_t>(value);
      break;
    case DataType::kUint8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(value);
      break;
    case DataType::kUint16:
      *static_cast<uint16_t*>(p) = static_cast<uint16_t>(value);
      break;
    case DataType::kUint32:
      *static_cast<uint32_t*>(p) = static_cast<uint32_t>(value);
      break;
    case DataType::kUint64:
      *static_cast<uint64_t*>(p) = static_cast<uint64_t>(value);
      break;
    case DataType::kBool:
      *static_cast<uint8_t*>(p) = value != 0;
      break;
    case DataType::kInt4:
    case DataType::kUint4:
    case DataType::kInt2:
    case DataType::kUint2:
      *static_cast<uint8_t*>(p) = 0;
      PackedSet(dtype, p, 0, static_cast<int32_t>(value));
      break;
    default:
      Throw(ErrorCode::kNotImplemented, "Tensor::Scalar does not support " + DataTypeName(dtype));
  }
  return t;
}

Tensor Tensor::Borrow(std::string name, DataType dtype, Shape shape, const void* data,
                      std::shared_ptr<const void> owner) {
  Tensor t = Unowned(std::move(name), dtype, std::move(shape), data);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::Unowned(std::string name, DataType dtype, Shape shape, const void* data) {
  Tensor t;
  t.name_ = std::move(name);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = ShapeNumel(t.shape_);
  t.data_ = data;
  return t;
}

namespace {

// Whether `strides` address `shape` densely in row-major order (size-1 dims and empty
// tensors accept any stride).
bool IsDenseLayout(const Shape& shape, const Shape& strides, int64_t from = 0) {
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= from; --d) {
    const auto i = static_cast<size_t>(d);
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

// numpy's no-copy reshape: groups of old and new dimensions with equal products map onto
// each other when each old group is one dense run. False when a copy would be needed.
bool ViewStrides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape,
                 Shape* new_strides) {
  Shape od, os;
  for (size_t i = 0; i < old_shape.size(); ++i)
    if (old_shape[i] != 1) {
      od.push_back(old_shape[i]);
      os.push_back(old_strides[i]);
    }
  new_strides->assign(new_shape.size(), 1);
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < new_shape.size() && oi < od.size()) {
    int64_t np = new_shape[ni], op = od[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= new_shape.size()) return false;
        np *= new_shape[nj++];
      } else {
        if (oj >= od.size()) return false;
        op *= od[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (os[k] != os[k + 1] * od[k + 1]) return false;
    (*new_strides)[nj - 1] = os[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) (*new_strides)[k - 1] = (*new_strides)[k] * new_shape[k];
    ni = nj++;
    oi = oj++;
  }
  return oi >= od.size();  // the remaining new dimensions are all 1
}

}  // namespace

Tensor Tensor::StridedView(std::string name, DataType dtype, Shape shape, Shape strides,
                           const void* data, std::shared_ptr<const void> owner) {
  OL_CHECK(strides.size() == shape.size(), ErrorCode::kInvalidArgument,
           "strided view '" + name + "': " + std::to_string(strides.size()) +
               " strides for shape " + ShapeToString(shape));
  for (int64_t s : strides)
    OL_CHECK(s >= 0, ErrorCode::kInvalidArgument,
             "strided view '" + name + "': negative stride in " + ShapeToString(strides));
  const int bits = ElementBits(dtype);
  OL_CHECK(dtype != DataType::kString && bits > 0 && bits % 8 == 0, ErrorCode::kNotImplemented,
           "strided view '" + name + "': " + DataTypeName(dtype) + " is not byte-addressable");
  OL_CHECK(owner != nullptr, ErrorCode::kInvalidArgument,
           "strided view '" + name + "' needs an owner that keeps its bytes alive");
  Tensor t = Borrow(std::move(name), dtype, std::move(shape), data, std::move(owner));
  if (!IsDenseLayout(t.shape_, strides)) t.strides_ = std::move(strides);
  return t;
}

void Tensor::ThrowNotContiguous() const {
  Throw(ErrorCode::kFailedPrecondition,
        "tensor '" + name_ + "' of shape " + ShapeToString(shape_) +
            " is a strided view (strides " + ShapeToString(strides_) +
            "): read it with strided_data()/strides() or take a dense copy with Contiguous()");
}

Shape DenseStrides(const Shape& shape) {
  Shape dense(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) dense[i - 1] = dense[i] * std::max<int64_t>(shape[i], 1);
  return dense;
}

Shape Tensor::strides() const { return strides_.empty() ? DenseStrides(shape_) : strides_; }

bool Tensor::DenseFrom(int64_t axis) const {
  return strides_.empty() || IsDenseLayout(shape_, strides_, axis);
}

int64_t Tensor::BlockOffset(int64_t axis, int64_t block) const {
  if (strides_.empty()) {
    int64_t block_size = 1;
    for (size_t d = static_cast<size_t>(axis); d < shape_.size(); ++d) block_size *= shape_[d];
    return block * block_size;
  }
  int64_t offset = 0;
  for (int64_t d = axis - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    offset += (block % shape_[i]) * strides_[i];
    block /= shape_[i];
  }
  return offset;
}

Tensor Tensor::Contiguous(Allocator& allocator) const {
  if (strides_.empty()) return *this;
  Tensor out(name_, dtype_, shape_, allocator);
  if (out.nbytes() == 0) return out;
  // Copy the largest dense suffix as one run per block.
  int64_t axis = rank();
  while (axis > 0 && DenseFrom(axis - 1)) --axis;
  int64_t blocks = 1;
  for (int64_t d = 0; d < axis; ++d) blocks *= shape_[static_cast<size_t>(d)];
  const size_t elem = static_cast<size_t>(ElementBits(dtype_) / 8);
  const size_t block_bytes = blocks > 0 ? out.nbytes() / static_cast<size_t>(blocks) : 0;
  auto* dst = static_cast<std::byte*>(out.mutable_raw_data());
  const auto* src = static_cast<const std::byte*>(data_);
  for (int64_t b = 0; b < blocks; ++b)
    std::memcpy(dst + static_cast<size_t>(b) * block_bytes,
                src + static_cast<size_t>(BlockOffset(axis, b)) * elem, block_bytes);
  out.Seal();
  return out;
}

bool Tensor::CanViewAs(const Shape& shape) const {
  if (strides_.empty() || numel_ == 0) return true;
  Shape unused;
  return ViewStrides(shape_, strides_, shape, &unused);
}

Tensor Tensor::ReshapedOrCopy(Shape shape, Allocator& allocator) const {
  if (CanViewAs(shape)) return Reshaped(std::move(shape));
  return Contiguous(allocator).Reshaped(std::move(shape));
}

int64_t Tensor::dim(int64_t axis) const {
  const int64_t r = rank();
  if (axis < 0) axis += r;
  OL_CHECK(axis >= 0 && axis < r, ErrorCode::kInvalidArgument,
           "axis out of range for tensor '" + name_ + "' of shape " + ShapeToString(shape_));
  return shape_[static_cast<size_t>(axis)];
}

size_t Tensor::nbytes() const {
  if (dtype_ == DataType::kString) return 0;
  return StorageBytes(dtype_, numel_);
}

void* Tensor::mutable_raw_data() {
  OL_CHECK(writable_, ErrorCode::kFailedPrecondition,
           "tensor '" + name_ + "' is read-only (shared, borrowed or retained storage)");
  return const_cast<void*>(data_);
}

std::span<const std::string> Tensor::strings() const {
  OL_CHECK(dtype_ == DataType::kString, ErrorCode::kTypeError,
           "tensor '" + name_ + "' is " + DataTypeName(dtype_) + ", not STRING");
  return {static_cast<const std::string*>(data_), static_cast<size_t>(numel_)};
}

Tensor Tensor::RetainStorage() && {
  OL_CHECK(owner_ != nullptr, ErrorCode::kInvalidArgument,
           "tensor '" + name_ + "' has no storage owner and cannot be retained without a copy");
  return std::move(*this);
}

Tensor Tensor::BorrowView() const { return Tensor(*this); }

Tensor Tensor::Reshaped(Shape shape) const {
  Tensor t(*this);
  const int64_t n = ShapeNumel(shape);
  OL_CHECK(n == numel_, ErrorCode::kInvalidArgument,
           "cannot view tensor '" + name_ + "' of shape " + ShapeToString(shape_) + " as " +
               ShapeToString(shape));
  if (!strides_.empty()) {
    Shape strides;
    OL_CHECK(numel_ == 0 || ViewStrides(shape_, strides_, shape, &strides),
             ErrorCode::kFailedPrecondition,
             "cannot view strided tensor '" + name_ + "' of shape " + ShapeToString(shape_) +
                 " (strides " + ShapeToString(strides_) + ") as " + ShapeToString(shape) +
                 " without a copy; take Contiguous() first");
    t.strides_ = numel_ == 0 || IsDenseLayout(shape, strides) ? Shape{} : std::move(strides);
  }
  t.shape_ = std::move(shape);
  return t;
}

std::vector<float> Tensor::ToFloatVector() const {
  if (!strides_.empty()) return Contiguous().ToFloatVector();
  std::vector<float> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) {
    float v = 0;
    switch (dtype_) {
      case DataType::kFloat:
        v = data<float>()[i];
        break;
      case DataType::kDouble:
        v = static_cast<float>(data<double>()[i]);
        break;
      case DataType::kFloat16:
        v = HalfToFloat(data<uint16_t>()[i]);
        break;
      case DataType::kBFloat16:
        v = BFloat16ToFloat(data<uint16_t>()[i]);
        break;
      case DataType::kInt64:
        v = static_cast<float>(data<int64_t>()[i]);
        break;
      case DataType::kInt32:
        v = static_cast<float>(data<int32_t>()[i]);
        break;
      case DataType::kInt8:
        v = data<int8_t>()[i];
        break;
      case DataType::kUint8:
      case DataType::kBool:
        v = data<uint8_t>()[i];
        break;
      default:
        Throw(ErrorCode::kNotImplemented, "ToFloatVector: unsupported " + DataTypeName(dtype_));
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  if (!strides_.empty()) return Contiguous().ToInt64Vector();
  std::vector<int64_t> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) {
    int64_t v = 0;
    switch (dtype_) {
      case DataType::kInt64:
        v = data<int64_t>()[i];
        break;
      case DataType::kInt32:
        v = data<int32_t>()[i];
        break;
      case DataType::kInt8:
        v = data<int8_t>()[i];
        break;
      case DataType::kUint8:
      case DataType::kBool:
        v = data<uint8_t>()[i];
        break;
      default:
        Throw(ErrorCode::kNotImplemented, "ToInt64Vector: unsupported " + DataTypeName(dtype_));
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

std::string Tensor::DebugString() const {
  return "'" + name_ + "' " + DataTypeName(dtype_) + ShapeToString(shape_);
}

}  // namespace onnx_light::core::runtime
