# Sourced by .ci/main and .ci/test: installs the Debian packages barato's build needs, if missing
# (libclang-rt-14-dev: the libFuzzer and sanitizer runtimes of clang 14; libomp-14-dev: OpenMP for
# clang, so the sanitizer build runs the same threaded code as the g++ build; lld: the linker of
# barato's own programs, twice as fast as GNU ld here -- cmake/BaratoDev.cmake, BARATO_USE_LLD).
barato_packages=(cmake ninja-build g++ clang lld libclang-rt-14-dev libomp-14-dev libeigen3-dev libxsimd-dev xtl-dev doctest-dev libbenchmark-dev)

barato_ensure_packages() {
  local missing=()
  for p in "${barato_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  echo "barato: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
