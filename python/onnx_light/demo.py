"""The README's main command: the project's current best demo."""
import sys


def main() -> int:
    from onnx_light.onnx_py import _onnxpykernels  # noqa: F401  (proves the build imports)
    print("onnx-light: native module loaded; the generation demo arrives with the executor.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
