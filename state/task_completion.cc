// Placeholder until the state layer lands.
namespace onnx_light::state {
int StateLayerVersion() { return 0; }
}  // namespace onnx_light::state
