//! Times `nornir_kernels::attention` on random values: GFLOP/s of `4 x batch x sequence² x width`.
//!
//! `cargo run --release -p nornir-kernels --example attention_speed -- BATCH SEQUENCE HEADS HEAD_WIDTH THREADS`
//! (for example `1 8192 12 64 2`, one 8,192-token text of a base model's layer on 2 threads).

use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let [batch, sequence, heads, head, threads] = args[..] else {
        eprintln!("usage: attention_speed BATCH SEQUENCE HEADS HEAD_WIDTH THREADS (five positive numbers)");
        std::process::exit(2);
    };
    let values = batch * sequence * heads * head;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 2000) as f32 / 1000.0 - 1.0
    };
    let (q, k, v): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        (0..values).map(|_| noise()).collect(),
        (0..values).map(|_| noise()).collect(),
        (0..values).map(|_| noise()).collect(),
    );
    let mask = vec![1i64; batch * sequence];
    let inputs =
        nornir_kernels::AttentionInputs { query: &q, key: &k, value: &v, attention_mask: &mask, qkv_bias: None };
    let mut out = vec![0.0; values];
    let flops = 4.0 * batch as f64 * (sequence * sequence) as f64 * (heads * head) as f64;
    for round in 1..=3 {
        let start = Instant::now();
        if let Err(e) = nornir_kernels::attention(batch, sequence, heads, &inputs, &mut out, threads) {
            eprintln!("attention_speed: {e}");
            std::process::exit(2);
        }
        let seconds = start.elapsed().as_secs_f64();
        println!("round {round}: {seconds:.3} s, {:.1} GFLOP/s", flops / seconds / 1e9);
    }
}
