# Sourced by the benchmarks (from the repository's root): what a release build in build-bench/
# needs in a fresh clone, made the way scripts/test and scripts/run make theirs. Every package of
# scripts/deps that is missing is installed, the patched libh2o-evloop is built when the patch
# series has no build yet (scripts/h2o, about a minute the first time), and build-bench/ is set
# up once. Prints what failed and returns 1 when something did.
mg_bench_prepare() {
    # shellcheck source=../../../scripts/deps
    source scripts/deps # sourced, it sets no shell option
    mg_install_missing "${MG_PACKAGES[@]}" || { echo "bench: installing the build's packages failed" >&2; return 1; }
    bash scripts/h2o >/dev/null || { echo "bench: building the patched libh2o-evloop failed (scripts/h2o)" >&2; return 1; }
    [ -f build-bench/build.ninja ] && return 0
    rm -rf build-bench # a failed setup leaves a directory meson will not reuse
    meson setup build-bench --buildtype=release >/dev/null || { echo "bench: meson setup build-bench failed" >&2; return 1; }
}
