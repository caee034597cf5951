//! The embedder's parts on the benchmark corpus: tokenization, pooling, one small
//! end-to-end batch, and the scheduler (one call against 16 concurrent callers). Needs the default model: `cargo xtask fetch`, then `cargo bench -p nornir-embed`.

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nornir_embed::internals::pool_tokens;
use nornir_embed::{Embedder, EmbedderOptions, Pooling};
use nornir_ep_select::Device;

fn model_dir() -> PathBuf {
    let home = std::env::var_os("NORNIR_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/nornir"));
    let dir = home.join("models/all-MiniLM-L6-v2-int8");
    assert!(dir.join("model.onnx").is_file(), "no default model at {}: run `cargo xtask fetch`", dir.display());
    dir
}

fn corpus() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/corpus.txt");
    std::fs::read_to_string(path).expect("testdata/corpus.txt").lines().map(str::to_owned).collect()
}

fn bench(c: &mut Criterion) {
    let texts = corpus();
    let sample: Vec<&str> = texts.iter().step_by(42).map(String::as_str).collect(); // 256 mixed texts

    let mut tokenizer = tokenizers::Tokenizer::from_file(model_dir().join("tokenizer.json")).expect("tokenizer");
    tokenizer.with_padding(None);
    let mut g = c.benchmark_group("tokenize");
    g.throughput(Throughput::Elements(sample.len() as u64));
    g.bench_function("encode_batch 256 texts", |b| {
        b.iter(|| tokenizer.encode_batch(sample.clone(), true).expect("encode"))
    });
    g.finish();

    let (len, dim) = (128, 384);
    let hidden: Vec<f32> = (0..len * dim).map(|i| (i % 97) as f32 * 0.01).collect();
    let mut out = vec![0f32; dim];
    let mut g = c.benchmark_group("pool");
    for pooling in Pooling::ALL {
        g.bench_with_input(BenchmarkId::new(pooling.to_string(), "128x384"), &pooling, |b, &p| {
            b.iter(|| pool_tokens(&hidden, len, dim, p, 0, &mut out))
        });
    }
    g.finish();

    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(2);
    let embedder = Embedder::new(&model_dir(), &options).expect("load the default model");
    let batch: Vec<&str> = sample.iter().take(32).copied().collect();
    let mut g = c.benchmark_group("end_to_end");
    g.sample_size(10);
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("embed 32 mixed texts", |b| b.iter(|| embedder.embed(&batch).expect("embed")));
    g.finish();

    // The scheduler: the same 64 texts as one call, and as 16 threads making one-text calls,
    // which the queue gathers into shared batches.
    let sixty_four: Vec<&str> = sample.iter().take(64).copied().collect();
    let mut g = c.benchmark_group("scheduler");
    g.sample_size(10);
    g.throughput(Throughput::Elements(sixty_four.len() as u64));
    g.bench_function("one call of 64 texts", |b| b.iter(|| embedder.embed(&sixty_four).expect("embed")));
    g.bench_function("16 threads x 4 one-text calls", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for part in sixty_four.chunks(4) {
                    s.spawn(|| part.iter().for_each(|t| drop(embedder.embed(&[t]).expect("embed"))));
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
