// Constant: the tensor given by exactly one of value, value_float(s), value_int(s) or
// value_string(s), built once when the node is configured; each call hands out a read-only
// handle on the same bytes.
#include "core/tensor_proto.h"
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::Tensor;

class Constant final : public core::runtime::KernelBase {
 public:
  explicit Constant(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    const std::string label = core::runtime::NodeLabel(node);
    int found = 0;
    for (const auto& a : node.attribute()) {
      const std::string& n = a.name();
      if (n == "value") {
        value_ = core::runtime::TensorFromProto(a.t());
      } else if (n == "value_float") {
        value_ = Tensor::FromFloat("", {}, {a.f()});
      } else if (n == "value_floats") {
        value_ = Tensor::FromFloat("", {a.floats_size()},
                                   std::vector<float>(a.floats().begin(), a.floats().end()));
      } else if (n == "value_int") {
        value_ = Tensor::FromInt64("", {}, {a.i()});
      } else if (n == "value_ints") {
        value_ = Tensor::FromInt64("", {a.ints_size()},
                                   std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      } else if (n == "value_string") {
        value_ = Tensor::FromStrings("", {}, {a.s()});
      } else if (n == "value_strings") {
        value_ =
            Tensor::FromStrings("", {a.strings_size()},
                                std::vector<std::string>(a.strings().begin(), a.strings().end()));
      } else if (n == "sparse_value") {
        core::Throw(core::ErrorCode::kNotImplemented, label + ": sparse_value is not supported");
      } else {
        continue;
      }
      CheckTag(a, label);
      if (!a.ref_attr_name().empty())
        core::Throw(core::ErrorCode::kInvalidModel,
                    label + ": attribute '" + n + "' is an unresolved reference");
      ++found;
    }
    OL_CHECK(found == 1, core::ErrorCode::kInvalidModel,
             label + ": needs exactly one value attribute, got " + std::to_string(found));
    value_.Seal();
  }

  void Compute(core::runtime::KernelCall& call) const override { call.SetOutput(0, value_); }

 private:
  // The payload read above is the field the attribute's name implies: a tag naming another
  // type means the field read is empty (value_floats tagged FLOAT would give no values).
  static void CheckTag(const AttributeProto& a, const std::string& label) {
    using A = AttributeProto;
    static const std::pair<const char*, A::AttributeType> kExpected[] = {
        {"value", A::TENSOR},         {"value_float", A::FLOAT}, {"value_floats", A::FLOATS},
        {"value_int", A::INT},        {"value_ints", A::INTS},   {"value_string", A::STRING},
        {"value_strings", A::STRINGS}};
    for (const auto& [name, type] : kExpected)
      if (a.name() == name && a.type() != type && a.type() != A::UNDEFINED)
        core::Throw(core::ErrorCode::kInvalidModel,
                    label + ": attribute '" + a.name() + "' is tagged " +
                        A::AttributeType_Name(a.type()) + ", expected " +
                        A::AttributeType_Name(type));
  }

  Tensor value_;
};

OL_KERNEL_FACTORY(Constant)

}  // namespace onnx_light::ops
