//! Cost of one uncached probe of this machine (target: under 10 ms without GPUs).

use criterion::{Criterion, criterion_group, criterion_main};
use nornir_gpu_probe::{ProbeContext, discover_ort, probe_with};

fn bench(c: &mut Criterion) {
    let ctx = ProbeContext::from_process();
    c.bench_function("probe_with(this machine)", |b| b.iter(|| probe_with(&ctx)));
    c.bench_function("discover_ort(this machine)", |b| b.iter(|| discover_ort(&ctx)));
}

criterion_group!(benches, bench);
criterion_main!(benches);
