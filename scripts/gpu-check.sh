#!/usr/bin/env bash
# The CUDA check on a real NVIDIA machine, in one call: `bash scripts/gpu-check.sh OUT`, run from
# the repository root. Everything it measures goes under OUT; summary.md and summary.json hold
# every figure.
#
# Needs the bundle from `cargo xtask gpu-bundle` (its MANIFEST and parts in $NORNIR_GPU_BUNDLE,
# default target/gpu-bundle), bash, coreutils, tar, gzip and Python 3 (standard library only;
# the sentence-transformers peer runs only where that package and torch are installed).
#
# Steps: reassemble and verify the bundle; the GPU and driver; the CUDA libraries of the pip
# wheels in Python's path (NORNIR_CUDA_LIBS, unless already set); doctor --expect cuda; the parity
# sample on CUDA and on CPU against the reference; bench on the corpus on CUDA (default and large
# batches) and CPU; the sentence-transformers peer; a Qwen3-0.6B-shaped decoder converted here,
# on CUDA against CPU, and its speed on both; the summary.
#
# Exit: 0 CUDA ran the model and matched the reference; 1 the check ran but CUDA did not run the
# model or did not match; 2 the check itself could not run; 3 the bundle is incomplete or damaged
# (summary.json names the parts to send again).
#
# Settings (environment): NORNIR_GPU_BUNDLE, NORNIR_GPU_CHECK_WORK (where the bundle is unpacked,
# default $NORNIR_GPU_BUNDLE/unpacked), NORNIR_GPU_CHECK_CORPUS (default testdata/corpus.txt),
# PYTHON (default python3). The dry run in crates/cli/tests/gpu_check.rs also sets
# NORNIR_PROBE_ROOT (a simulated machine's driver tree) and PYTHONPATH (its pip wheels).
set -uo pipefail

OUT=${1:?usage: scripts/gpu-check.sh OUT (a folder for the results)}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
BUNDLE=${NORNIR_GPU_BUNDLE:-target/gpu-bundle}
WORK=${NORNIR_GPU_CHECK_WORK:-$BUNDLE/unpacked}
CORPUS=${NORNIR_GPU_CHECK_CORPUS:-testdata/corpus.txt}
PYTHON=${PYTHON:-python3}
HELPER=scripts/gpu_check.py
STEPS="$OUT/steps.tsv"
: >"$STEPS"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$OUT/log.txt" >&2; }
fail() { log "error: $*"; exit 2; }

# step NAME STDOUT-FILE COMMAND...: runs COMMAND, its stdout to STDOUT-FILE (or nowhere for -),
# stderr to OUT/NAME.stderr, and records NAME, exit code and milliseconds in steps.tsv.
step() {
    local name=$1 stdout=$2 start rc
    shift 2
    log "step $name: $*"
    start=$(date +%s%N)
    if [[ $stdout == - ]]; then stdout=/dev/null; fi
    "$@" >"$stdout" 2>"$OUT/$name.stderr"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((($(date +%s%N) - start) / 1000000))" >>"$STEPS"
    log "step $name: exit $rc"
    return "$rc"
}

command -v "$PYTHON" >/dev/null || fail "$PYTHON not found: set PYTHON to a Python 3"
[[ -f $BUNDLE/MANIFEST ]] || {
    "$PYTHON" "$HELPER" incomplete "$OUT" "no MANIFEST in $BUNDLE: send it with the first part (cargo xtask gpu-bundle prints the calls)"
    exit 3
}

# 1. Reassemble and verify the bundle (skipped on a rerun once verified).
ARCHIVE_SHA=$(awk '$1 == "archive" { print $3 }' "$BUNDLE/MANIFEST")
if [[ $(cat "$WORK/.verified" 2>/dev/null) != "$ARCHIVE_SHA" ]]; then
    log "checking the bundle's parts"
    missing=()
    while read -r kind name sha size; do
        [[ $kind == part ]] || continue
        if [[ ! -f $BUNDLE/$name ]]; then
            missing+=("$name (missing)")
        elif [[ $(stat -c %s "$BUNDLE/$name") != "$size" || $(sha256sum "$BUNDLE/$name" | cut -d' ' -f1) != "$sha" ]]; then
            missing+=("$name (damaged: size or sha256 differs from MANIFEST)")
        fi
    done <"$BUNDLE/MANIFEST"
    if ((${#missing[@]})); then
        "$PYTHON" "$HELPER" incomplete "$OUT" "send these parts again: ${missing[*]}"
        log "bundle incomplete: ${missing[*]}"
        exit 3
    fi
    rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
    awk '$1 == "part" { print $2 }' "$BUNDLE/MANIFEST" | while read -r name; do cat "$BUNDLE/$name"; done >"$WORK/archive.tar.gz"
    [[ $(sha256sum "$WORK/archive.tar.gz" | cut -d' ' -f1) == "$ARCHIVE_SHA" ]] || {
        "$PYTHON" "$HELPER" incomplete "$OUT" "the joined parts do not match the archive's sha256 in MANIFEST: rebuild with cargo xtask gpu-bundle and send every part"
        exit 3
    }
    mkdir -p "$WORK/bundle" && tar -xzf "$WORK/archive.tar.gz" -C "$WORK/bundle" || fail "cannot unpack the bundle into $WORK"
    (cd "$WORK/bundle" && sha256sum --quiet -c SHA256SUMS) || {
        "$PYTHON" "$HELPER" incomplete "$OUT" "a file in the bundle does not match SHA256SUMS: rebuild it with cargo xtask gpu-bundle"
        exit 3
    }
    rm -f "$WORK/archive.tar.gz"
    echo "$ARCHIVE_SHA" >"$WORK/.verified"
fi
B=$(cd "$WORK/bundle" && pwd)
NORNIR=$B/bin/nornir
ORT=$B/ort/libonnxruntime.so.1.31.1
MODEL=$B/model
log "bundle verified: $B"

# 2. The machine.
{
    echo "nornir_version=$("$NORNIR" --version 2>&1 | head -n1)"
    driver=${NORNIR_PROBE_ROOT:-}/proc/driver/nvidia/version
    echo "driver_file=$(head -n1 "$driver" 2>/dev/null || echo "absent (no $driver)")"
    if command -v nvidia-smi >/dev/null; then
        echo "nvidia_smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n1)"
    else
        echo "nvidia_smi=unknown (nvidia-smi not found)"
    fi
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "cpu_cores=$(nproc)"
    echo "cpu_vector_extensions=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx_vnni|amx_tile|amx_int8)$' | tr '\n' ' ')"
    echo "corpus=$CORPUS"
} >"$OUT/machine.txt"
"$NORNIR" --version >/dev/null 2>&1 || fail "the bundled nornir does not start here: $("$NORNIR" --version 2>&1 | head -n1)"

# 3. The CUDA libraries of the pip wheels in Python's path.
step cuda-libs "$OUT/cuda-libs.json" "$PYTHON" "$HELPER" cuda-libs || fail "could not look for the CUDA libraries with $PYTHON"
if [[ -n ${NORNIR_CUDA_LIBS:-} ]]; then
    log "NORNIR_CUDA_LIBS was already set; kept: $NORNIR_CUDA_LIBS"
    echo "cuda_libs_source=NORNIR_CUDA_LIBS as given" >>"$OUT/machine.txt"
else
    NORNIR_CUDA_LIBS=$("$PYTHON" "$HELPER" field "$OUT/cuda-libs.json" path)
    echo "cuda_libs_source=found with $PYTHON" >>"$OUT/machine.txt"
fi
export NORNIR_CUDA_LIBS
echo "nornir_cuda_libs=$NORNIR_CUDA_LIBS" >>"$OUT/machine.txt"
COMMON=(--model "$MODEL" --ort-lib "$ORT")

# 4. Does CUDA really run the model? The report lists the libraries the provider opens by name at
# run time (cuDNN, cuFFT, NVRTC: in no NEEDED list), which nornir preloads from the same folders;
# the summary says where each was loaded from. If CUDA did not run, once more with the folders on
# LD_LIBRARY_PATH, to tell whether something the preload does not cover is still missing.
if ! step doctor "$OUT/doctor.json" "$NORNIR" vector doctor --json --expect cuda "${COMMON[@]}"; then
    export LD_LIBRARY_PATH="$NORNIR_CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if step doctor-ld-library-path "$OUT/doctor-ld-library-path.json" "$NORNIR" vector doctor --json --expect cuda "${COMMON[@]}"; then
        echo "ld_library_path=needed: CUDA ran only with NORNIR_CUDA_LIBS also on LD_LIBRARY_PATH" >>"$OUT/machine.txt"
    else
        unset LD_LIBRARY_PATH
        echo "ld_library_path=no help" >>"$OUT/machine.txt"
    fi
fi

# 5. The parity sample against the reference, on CUDA and on CPU.
for device in cuda cpu; do
    step "embed-$device" - "$NORNIR" vector embed --quiet --device "$device" --format f32 "${COMMON[@]}" \
        --input testdata/parity-sample.txt --output "$OUT/parity-$device.f32" &&
        "$PYTHON" "$HELPER" parity "$OUT/parity-$device.f32" testdata/parity-sample.f32 >"$OUT/parity-$device.json"
done

# 6. Throughput on the corpus: CUDA at the default budget and with large batches, then CPU.
step bench-cuda "$OUT/bench-cuda.json" "$NORNIR" vector bench --json --quiet --device cuda "${COMMON[@]}" --input "$CORPUS"
step bench-cuda-8192 "$OUT/bench-cuda-8192.json" "$NORNIR" vector bench --json --quiet --device cuda "${COMMON[@]}" \
    --input "$CORPUS" --batch-tokens 8192
step bench-cpu "$OUT/bench-cpu.json" "$NORNIR" vector bench --json --quiet --device cpu "${COMMON[@]}" --input "$CORPUS"

# 7. The peer: sentence-transformers on the same GPU, fp32 weights of the same model.
# Offline: the machine reaches no hub, and a library that tries would wait for a time-out.
step st-peer - env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PYTHON" "$HELPER" st-peer --model "$B/st-model" --corpus "$CORPUS" \
    --parity-input testdata/parity-sample.txt --parity-reference testdata/parity-sample.f32 --out "$OUT/st-peer.json"

# 8. A decoder: Qwen3-Embedding-0.6B's shape with random float16 weights written here (no hub),
# converted by the bundled nornir (float16 weights), its last-token vectors on CUDA against CPU's,
# and texts/s on both. NORNIR_GPU_CHECK_DECODER=tiny makes it small (the dry run).
DECODER_SHAPE=${NORNIR_GPU_CHECK_DECODER:-qwen3-0.6b}
echo "decoder_shape=$DECODER_SHAPE" >>"$OUT/machine.txt"
if step decoder-checkpoint "$OUT/decoder-width.txt" "$PYTHON" "$HELPER" decoder-checkpoint "$WORK/decoder-src" "$DECODER_SHAPE" &&
    step decoder-convert - env ORT_DYLIB_PATH="$ORT" "$NORNIR" vector convert --model "$WORK/decoder-src" \
        --output "$WORK/decoder" --dtype float16 --force; then
    DECODER=(--model "$WORK/decoder" --ort-lib "$ORT")
    for device in cpu cuda; do
        step "decoder-embed-$device" - "$NORNIR" vector embed --quiet --device "$device" --format f32 "${DECODER[@]}" \
            --input testdata/parity-sample.txt --output "$OUT/decoder-$device.f32"
    done
    [[ -f $OUT/decoder-cuda.f32 ]] && "$PYTHON" "$HELPER" parity "$OUT/decoder-cuda.f32" "$OUT/decoder-cpu.f32" \
        "$(cat "$OUT/decoder-width.txt")" >"$OUT/decoder-parity.json"
    for device in cuda cpu; do
        step "bench-decoder-$device" "$OUT/bench-decoder-$device.json" "$NORNIR" vector bench --json --quiet \
            --device "$device" "${DECODER[@]}" --input testdata/parity-sample.txt
    done
fi

# 9. Every figure in one place.
"$PYTHON" "$HELPER" summary "$OUT"
