// Encoded values against declarations. Input: [u16 n][n bytes TypeProto: the declaration]
// [u16 m][m bytes ModelProto: struct_types and shared_parameters the value may refer to]
// [rest: EncodedValueProto]. Runs ValueValidator::ValidatePersistent (CheckEncodedPayload,
// layouts, parameter references, byte sizes) and CheckEncodedReferences; a value that passes
// is deep-copied and compared.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/persistent_bindings.h"
#include "fuzz_util.h"
#include "state/value_validation.h"

using namespace fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Values built outside a run (feeds, caches) obey the same limit as the runs.
  const ScopedMaxTensorBytes limit(kMaxTensorBytes);
  Reader r(data, size);
  TypeProto declared;
  std::string_view type_bytes = r.Bytes(r.U16());
  if (!declared.ParseFromArray(type_bytes.data(), static_cast<int>(type_bytes.size()))) return 0;
  auto model = std::make_shared<ModelProto>();
  std::string_view model_bytes = r.Bytes(r.U16());
  if (!model->ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) return 0;
  auto encoded = std::make_shared<EncodedValueProto>();
  std::string_view rest = r.Rest();
  if (!encoded->ParseFromArray(rest.data(), static_cast<int>(rest.size()))) return 0;

  std::shared_ptr<const ParameterCatalogue> catalogue;
  Expect([&] { catalogue = ParameterCatalogue::FromModel(model); });
  std::unique_ptr<ValueValidator> validator;
  Expect([&] { validator = std::make_unique<ValueValidator>(*model); });
  if (!validator) return 0;
  const RuntimeValue value = RuntimeValue::Encoded(encoded, catalogue);
  Expect([&] { onnx_light::core::CheckPersistentType(declared, model.get(), "v"); });
  Expect([&] { validator->CheckEncodedReferences("v", value); });
  bool valid = false;
  Expect([&] {
    validator->ValidatePersistent("v", value, declared);
    valid = true;
  });
  if (valid) {
    RuntimeValue copy = value.DeepCopy();
    if (!copy.ContentEquals(value)) {
      std::fprintf(stderr, "DeepCopy changed an encoded value\n");
      std::abort();
    }
    // The same value inside a struct and a sequence.
    TypeProto seq;
    *seq.mutable_sequence_type()->mutable_elem_type() = declared;
    RuntimeValue in_seq = RuntimeValue::Sequence(RuntimeSequence::FromValues({value, value}));
    Expect([&] { validator->ValidatePersistent("s", in_seq, seq); });
  }
  return 0;
}
