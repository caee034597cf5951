//! Times `nornir_kernels::attention` (or, with `alibi`, `alibi_attention` with JinaBERT's slopes)
//! on random values: GFLOP/s of `4 x batch x sequence² x width`, whether or not every tile runs.
//!
//! `cargo run --release -p nornir-kernels --example attention_speed -- BATCH SEQUENCE HEADS HEAD_WIDTH THREADS [alibi]`
//! (for example `1 8192 12 64 2`, one 8,192-token text of a base model's layer on 2 threads).

use std::time::Instant;

/// ALiBi's slopes for `heads` heads as JinaBERT makes them (`_get_alibi_head_slopes`): the
/// geometric series of the nearest power of two below, then every other slope of twice that.
fn alibi_slopes(heads: usize) -> Vec<f32> {
    let series = |n: usize| -> Vec<f32> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (1..=n).map(|i| start.powi(i as i32) as f32).collect()
    };
    let power = 1 << heads.ilog2();
    let mut slopes = series(power);
    slopes.extend(series(2 * power).into_iter().step_by(2).take(heads - power));
    slopes
}

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let alibi = words.last().is_some_and(|w| w == "alibi");
    let args: Vec<usize> = words.iter().filter_map(|a| a.parse().ok()).collect();
    let [batch, sequence, heads, head, threads] = args[..] else {
        eprintln!("usage: attention_speed BATCH SEQUENCE HEADS HEAD_WIDTH THREADS [alibi] (five positive numbers)");
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
    let negative_slopes: Vec<f32> = alibi_slopes(heads.max(1)).iter().map(|s| -s).collect();
    let with_slopes = nornir_kernels::AlibiInputs { attention: inputs, negative_slopes: &negative_slopes };
    let mut out = vec![0.0; values];
    let flops = 4.0 * batch as f64 * (sequence * sequence) as f64 * (heads * head) as f64;
    for round in 1..=3 {
        let start = Instant::now();
        let done = match alibi {
            true => nornir_kernels::alibi_attention(batch, sequence, &with_slopes, &mut out, threads),
            false => nornir_kernels::attention(batch, sequence, heads, &inputs, &mut out, threads),
        };
        if let Err(e) = done {
            eprintln!("attention_speed: {e}");
            std::process::exit(2);
        }
        let seconds = start.elapsed().as_secs_f64();
        println!("round {round}: {seconds:.3} s, {:.1} GFLOP/s", flops / seconds / 1e9);
    }
}
