# Sourced by benchmarks: where a proxy spends its CPU while a load runs.
#
# mg_profile LABEL PID SECONDS DIR [TOP]: samples process PID (all its threads) with perf at
# 2,000 Hz for SECONDS while the caller's load runs, then prints the share of CPU by binary or
# library (the kernel is [kernel.kallsyms]) and the TOP [15] symbols. Needs perf and root;
# prints why and returns 1 when perf is missing.
mg_profile() {
    local label=$1 pid=$2 secs=$3 dir=$4 top=${5:-15} data
    command -v perf >/dev/null || { echo "profile: perf is not installed (apt-get install linux-perf)"; return 1; }
    data="$dir/profile-${label//[^A-Za-z0-9_.-]/_}.data"
    perf record -q -F 2000 -p "$pid" -o "$data" -- sleep "$secs" >/dev/null 2>&1
    echo
    echo "profile: $label"
    echo "  CPU by binary or library:"
    perf report -i "$data" --stdio --sort dso 2>/dev/null | grep -E '^ +[0-9]' | head -8 | sed 's/^/  /'
    echo "  top symbols:"
    perf report -i "$data" --stdio --sort dso,sym 2>/dev/null | grep -E '^ +[0-9]' | head -"$top" | sed 's/^/  /'
}
