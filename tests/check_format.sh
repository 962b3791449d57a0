#!/usr/bin/env bash
# Style check (.clang-format: Google base, 100 columns): every tracked C++ file must be
# exactly what clang-format makes of it. Lists the files that are not; `--fix` formats them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "clang-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format's style:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: bash tests/check_format.sh --fix"
  exit 1
fi
echo "clang-format: ${#files[@]} files match .clang-format"
