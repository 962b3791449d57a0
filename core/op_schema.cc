#include "core/op_schema.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/proto_desc.h"
#include "core/type_compat.h"

namespace onnx_light::core {

namespace {

std::string NormalDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

std::string KindName(const TypeProto& type) {
  switch (type.value_case()) {
    case TypeProto::kTensorType:
      return "a tensor";
    case TypeProto::kSequenceType:
      return "a sequence";
    case TypeProto::kMapType:
      return "a map";
    case TypeProto::kOptionalType:
      return "an optional";
    case TypeProto::kSparseTensorType:
      return "a sparse tensor";
    case TypeProto::kOpaqueType:
      return "an opaque value";
    case TypeProto::kStructType:
      return "a struct";
    case TypeProto::VALUE_NOT_SET:
      break;
  }
  return "no type";
}

std::string TypeList(const std::vector<DataType>& types) {
  std::string s;
  for (DataType t : types) s += (s.empty() ? "" : ", ") + DataTypeName(t);
  return s;
}

std::string AttributeTypeName(AttributeProto::AttributeType type) {
  return AttributeProto::AttributeType_IsValid(type) ? AttributeProto::AttributeType_Name(type)
                                                     : "UNKNOWN";
}

// "input 3 'past_cache' (past)": the position, the node's value name and the schema's name.
std::string ParamDesc(const char* what, int index, const std::string& value,
                      const FormalParameter& param) {
  return std::string(what) + " " + std::to_string(index) + " " + Quote(value) + " (" + param.name +
         ")";
}

void VerifyCount(const InferenceContext& ctx, const char* what,
                 const google::protobuf::RepeatedPtrField<std::string>& names,
                 const std::vector<FormalParameter>& params) {
  std::string list;
  for (const auto& p : params) list += (list.empty() ? "" : ", ") + p.name;
  if (names.size() > static_cast<int>(params.size()))
    ctx.Fail("takes at most " + std::to_string(params.size()) + " " + what + "s (" + list +
             "), got " + std::to_string(names.size()));
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (params[i].optional) continue;
    if (i >= names.size())
      ctx.Fail("required " + std::string(what) + " " + std::to_string(i) + " (" + params[i].name +
               ") is missing (" + what + "s: " + list + ")");
    if (names[i].empty())
      ctx.Fail("required " + std::string(what) + " " + std::to_string(i) + " (" + params[i].name +
               ") has an empty name");
  }
}

}  // namespace

// ---- LightOpSchema ---------------------------------------------------------------------

LightOpSchema::LightOpSchema(std::string domain, std::string op_type, int since_version)
    : domain_(NormalDomain(domain)), op_type_(std::move(op_type)), since_version_(since_version) {}

LightOpSchema& LightOpSchema::Input(FormalParameter input) {
  inputs_.push_back(std::move(input));
  return *this;
}

LightOpSchema& LightOpSchema::Output(FormalParameter output) {
  outputs_.push_back(std::move(output));
  return *this;
}

LightOpSchema& LightOpSchema::Attribute(AttributeSpec attribute) {
  attributes_.push_back(std::move(attribute));
  return *this;
}

LightOpSchema& LightOpSchema::Inference(InferenceFunction fn) {
  inference_ = std::move(fn);
  return *this;
}

const AttributeSpec* LightOpSchema::FindAttribute(const std::string& name) const {
  for (const auto& a : attributes_)
    if (a.name == name) return &a;
  return nullptr;
}

std::string LightOpSchema::Label() const {
  return (domain_.empty() ? std::string("ai.onnx") : domain_) + "::" + op_type_ + " (opset " +
         std::to_string(since_version_) + ")";
}

void LightOpSchema::Verify(InferenceContext& ctx) const {
  ctx.set_schema(this);
  VerifyArity(ctx);
  VerifyAttributes(ctx);
  VerifyInputTypes(ctx);
  if (inference_) inference_(ctx);
}

void LightOpSchema::VerifyArity(InferenceContext& ctx) const {
  VerifyCount(ctx, "input", ctx.node().input(), inputs_);
  VerifyCount(ctx, "output", ctx.node().output(), outputs_);
}

void LightOpSchema::VerifyAttributes(InferenceContext& ctx) const {
  for (const auto& attr : ctx.node().attribute()) {
    const std::string what = "attribute " + Quote(attr.name());
    const AttributeSpec* spec = FindAttribute(attr.name());
    if (spec == nullptr) {
      std::string known;
      for (const auto& a : attributes_) known += (known.empty() ? "" : ", ") + a.name;
      ctx.Fail(what + " is not an attribute of " + Label() +
               (known.empty() ? " (it takes none)" : " (attributes: " + known + ")"));
    }
    if (attr.type() != AttributeProto::UNDEFINED && attr.type() != spec->type)
      ctx.Fail(what + " must be " + AttributeTypeName(spec->type) + ", got " +
               AttributeTypeName(attr.type()));
    if (!attr.ref_attr_name().empty()) continue;  // a function's attribute: value unknown here
    if (spec->check) {
      const std::string why = spec->check(attr);
      if (!why.empty()) ctx.Fail(what + " " + why);
    }
  }
  for (const auto& spec : attributes_) {
    if (!spec.required) continue;
    bool present = false;
    for (const auto& attr : ctx.node().attribute()) present |= attr.name() == spec.name;
    if (!present) ctx.Fail("required attribute " + Quote(spec.name) + " is missing");
  }
}

void LightOpSchema::VerifyInputTypes(InferenceContext& ctx) const {
  for (int i = 0; i < ctx.num_inputs() && i < static_cast<int>(inputs_.size()); ++i) {
    const TypeProto* type = ctx.input_type(i);
    if (type == nullptr) continue;
    VerifyType(ctx, inputs_[i], *type, ParamDesc("input", i, ctx.node().input(i), inputs_[i]));
  }
}

void LightOpSchema::VerifyOutputDeclaration(const InferenceContext& ctx, int k,
                                            const TypeProto& type) const {
  if (k >= static_cast<int>(outputs_.size())) return;
  VerifyType(ctx, outputs_[k], type,
             ParamDesc("declared output", k, ctx.node().output(k), outputs_[k]));
}

void LightOpSchema::VerifyType(const InferenceContext& ctx, const FormalParameter& param,
                               const TypeProto& type, const std::string& what) const {
  if (param.kind == FormalParameter::Kind::kPagedCache) {
    if (param.batch_rows && type.has_sequence_type()) {  // one paged cache per batch row
      const std::string rows =
          " must be declared as a sequence of paged cache structs (one per "
          "batch row): ";
      if (!type.sequence_type().has_elem_type()) ctx.Fail(what + rows + "no element type");
      const std::string why = PagedCacheDeclarationError(type.sequence_type().elem_type(),
                                                         ctx.model(), ctx.desc() + ": " + what);
      if (!why.empty()) ctx.Fail(what + rows + why);
      return;
    }
    const std::string why = PagedCacheDeclarationError(type, ctx.model(), ctx.desc() + ": " + what);
    if (!why.empty()) ctx.Fail(what + " must be declared as a paged cache struct: " + why);
    return;
  }
  if (!type.has_tensor_type()) ctx.Fail(what + " must be a tensor, got " + KindName(type));
  const auto& t = type.tensor_type();
  const auto elem = static_cast<DataType>(t.elem_type());
  if (t.elem_type() != 0 && !param.types.empty() &&
      std::find(param.types.begin(), param.types.end(), elem) == param.types.end())
    ctx.Fail(what + " has element type " + DataTypeName(elem) + ", expected one of " +
             TypeList(param.types));
  if (param.rank && t.has_shape() && t.shape().dim_size() != *param.rank)
    ctx.Fail(what + " must have rank " + std::to_string(*param.rank) + ", got rank " +
             std::to_string(t.shape().dim_size()));
}

// ---- InferenceContext ------------------------------------------------------------------

InferenceContext::InferenceContext(const NodeProto& node, std::vector<const TypeProto*> input_types,
                                   const ModelProto* model, std::string desc)
    : node_(node), input_types_(std::move(input_types)), model_(model), desc_(std::move(desc)) {}

const TypeProto* InferenceContext::input_type(int i) const {
  return i >= 0 && i < num_inputs() ? input_types_[static_cast<size_t>(i)] : nullptr;
}

const AttributeProto* InferenceContext::attribute(const std::string& name) const {
  for (const auto& attr : node_.attribute())
    if (attr.name() == name) return &attr;
  const AttributeSpec* spec = schema_ ? schema_->FindAttribute(name) : nullptr;
  return spec && spec->default_value ? &*spec->default_value : nullptr;
}

TypeProto& InferenceContext::output_type(int i) { return output_types_[i]; }

void InferenceContext::Fail(const std::string& message) const {
  Throw(ErrorCode::kInvalidModel, desc_ + ": " + message);
}

// ---- LightSchemaRegistry ---------------------------------------------------------------

LightSchemaRegistry::LightSchemaRegistry() { RegisterAiRtSchemas(*this); }

LightSchemaRegistry& LightSchemaRegistry::Instance() {
  static LightSchemaRegistry* registry = new LightSchemaRegistry();  // never destroyed
  return *registry;
}

const LightOpSchema* LightSchemaRegistry::Get(const std::string& domain, const std::string& op_type,
                                              int64_t opset_version) {
  return Instance().Find(domain, op_type, opset_version);
}

void LightSchemaRegistry::Register(LightOpSchema schema) {
  std::unique_lock lock(mutex_);
  auto& versions = schemas_[{schema.domain(), schema.op_type()}];
  const int since = schema.since_version();
  OL_CHECK(versions.count(since) == 0, ErrorCode::kInvalidArgument,
           "a schema for " + schema.Label() + " is already registered");
  versions.emplace(since, std::make_unique<const LightOpSchema>(std::move(schema)));
}

const LightOpSchema* LightSchemaRegistry::Find(const std::string& domain,
                                               const std::string& op_type,
                                               int64_t opset_version) const {
  std::shared_lock lock(mutex_);
  auto it = schemas_.find({NormalDomain(domain), op_type});
  if (it == schemas_.end()) return nullptr;
  // The newest schema introduced at or before the imported version.
  auto v = it->second.upper_bound(static_cast<int>(std::min<int64_t>(opset_version, 1 << 30)));
  if (v == it->second.begin()) return nullptr;
  return std::prev(v)->second.get();
}

AttributeProto IntAttribute(const std::string& name, int64_t value) {
  AttributeProto attr;
  attr.set_name(name);
  attr.set_type(AttributeProto::INT);
  attr.set_i(value);
  return attr;
}

}  // namespace onnx_light::core
