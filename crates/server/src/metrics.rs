//! The counters behind `/metrics`, and their Prometheus text exposition (api.rs serves it).

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use nornir_vector::BATCH_SIZE_BOUNDS;

use crate::models::Entry;

/// Request latency histogram bounds, in seconds.
const LATENCY_BOUNDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// (endpoint, status) -> requests.
    requests: Mutex<std::collections::BTreeMap<(&'static str, u16), u64>>,
    /// Per bucket of [`LATENCY_BOUNDS`] (not cumulative), then the count and the sum in microseconds.
    latency: [AtomicU64; LATENCY_BOUNDS.len()],
    latency_count: AtomicU64,
    latency_micros: AtomicU64,
}

impl Metrics {
    pub(crate) fn record(&self, endpoint: &'static str, status: StatusCode, elapsed: Duration) {
        *self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((endpoint, status.as_u16()))
            .or_default() += 1;
        let s = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BOUNDS.iter().position(|&b| s <= b) {
            self.latency[i].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_micros.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_texts(&self, entry: &Entry, texts: usize, tokens: usize, truncated: usize) {
        entry.texts.fetch_add(texts as u64, Ordering::Relaxed);
        entry.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        entry.truncated.fetch_add(truncated as u64, Ordering::Relaxed);
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The Prometheus text exposition of the server's counters, then each model's, labelled
/// `model="name"`.
pub(crate) fn render(m: &Metrics, entries: &[Entry]) -> String {
    let mut out = String::new();
    let out = &mut out;
    family(out, "nornir_requests_total", "counter", "HTTP requests by endpoint and status.");
    for ((endpoint, status), n) in m.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
        let _ = writeln!(out, "nornir_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
    }
    family(out, "nornir_request_duration_seconds", "histogram", "Request latency.");
    let mut cumulative = 0;
    for (bound, n) in LATENCY_BOUNDS.iter().zip(&m.latency) {
        cumulative += n.load(Ordering::Relaxed);
        let _ = writeln!(out, "nornir_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let count = m.latency_count.load(Ordering::Relaxed);
    let _ = writeln!(out, "nornir_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
    let _ =
        writeln!(out, "nornir_request_duration_seconds_sum {}", m.latency_micros.load(Ordering::Relaxed) as f64 * 1e-6);
    let _ = writeln!(out, "nornir_request_duration_seconds_count {count}");
    let loaded: Vec<(&str, _)> = entries.iter().filter_map(|e| Some((e.name.as_str(), e.embedder.get()?))).collect();

    family(out, "nornir_texts_total", "counter", "Texts embedded for requests.");
    for e in entries {
        let _ = writeln!(out, "nornir_texts_total{{model=\"{}\"}} {}", label(&e.name), e.texts.load(Ordering::Relaxed));
    }
    family(out, "nornir_tokens_total", "counter", "Tokens the model read for requests.");
    for e in entries {
        let _ =
            writeln!(out, "nornir_tokens_total{{model=\"{}\"}} {}", label(&e.name), e.tokens.load(Ordering::Relaxed));
    }
    family(
        out,
        "nornir_truncated_inputs_total",
        "counter",
        "Texts cut to the model's length (--long truncate or \"truncate\": true).",
    );
    for e in entries {
        let n = e.truncated.load(Ordering::Relaxed);
        let _ = writeln!(out, "nornir_truncated_inputs_total{{model=\"{}\"}} {n}", label(&e.name));
    }
    let reports: Vec<_> = loaded.iter().map(|(name, e)| (label(name), e.report(), e.stats())).collect();
    if let Some(rss) = reports.first().and_then(|(_, r, _)| r.memory.resident_bytes) {
        family(out, "nornir_resident_memory_bytes", "gauge", "The process's resident memory.");
        let _ = writeln!(out, "nornir_resident_memory_bytes {rss}");
    }
    if let Some(peak) = reports.first().and_then(|(_, r, _)| r.memory.peak_resident_bytes) {
        family(out, "nornir_peak_resident_memory_bytes", "gauge", "The most resident memory the process has held.");
        let _ = writeln!(out, "nornir_peak_resident_memory_bytes {peak}");
    }
    family(
        out,
        "nornir_workers_per_session",
        "gauge",
        "Workers running each session at once (all of them on the CPU).",
    );
    for (name, r, _) in &reports {
        let _ = writeln!(out, "nornir_workers_per_session{{model=\"{name}\"}} {}", r.memory.workers_per_session);
    }
    family(
        out,
        "nornir_session_memory_bytes",
        "gauge",
        "Resident memory each session added when it was built (weights, pre-packed kernels, graph).",
    );
    for (name, r, _) in &reports {
        for (k, grew) in r.memory.session_growth_bytes.iter().enumerate() {
            let _ = writeln!(out, "nornir_session_memory_bytes{{model=\"{name}\",session=\"{k}\"}} {grew}");
        }
    }
    family(out, "nornir_batch_size", "histogram", "Texts per batch run by the model.");
    for (name, _, s) in &reports {
        for (bound, n) in BATCH_SIZE_BOUNDS.iter().zip(s.batch_sizes) {
            let _ = writeln!(out, "nornir_batch_size_bucket{{model=\"{name}\",le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "nornir_batch_size_bucket{{model=\"{name}\",le=\"+Inf\"}} {}", s.batches);
        let _ = writeln!(out, "nornir_batch_size_sum{{model=\"{name}\"}} {}", s.batched_texts);
        let _ = writeln!(out, "nornir_batch_size_count{{model=\"{name}\"}} {}", s.batches);
    }
    type Read = fn(&nornir_vector::EmbedStats) -> String;
    let per_model: [(&str, &str, &str, Read); 5] = [
        ("nornir_queue_texts", "gauge", "Texts waiting for a batch.", |s| s.queued_texts.to_string()),
        ("nornir_running_texts", "gauge", "Texts in the batches running now.", |s| s.running_texts.to_string()),
        (
            "nornir_cancelled_texts_total",
            "counter",
            "Texts dropped before they ran: their client went away or their request timed out.",
            |s| s.cancelled_texts.to_string(),
        ),
        ("nornir_model_tokens_total", "counter", "Tokens fed to the model, padding included.", |s| {
            s.padded_tokens.to_string()
        }),
        ("nornir_ort_seconds_total", "counter", "Seconds inside ONNX Runtime, all sessions.", |s| {
            s.ort_seconds.to_string()
        }),
    ];
    for (metric, kind, help, read) in per_model {
        family(out, metric, kind, help);
        for (name, _, s) in &reports {
            let _ = writeln!(out, "{metric}{{model=\"{name}\"}} {}", read(s));
        }
    }
    family(out, "nornir_active_provider", "gauge", "The execution provider really running the model.");
    for (name, r, _) in &reports {
        let _ = writeln!(
            out,
            "nornir_active_provider{{model=\"{name}\",provider=\"{}\",vendor=\"{}\"}} 1",
            label(&r.active_provider),
            label(&r.gpu_vendor.to_string())
        );
    }
    std::mem::take(out)
}

/// `value` as a Prometheus label value: backslash, double quote and line feed escaped, so that no
/// model name can end a label, a sample or a line.
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label value of `line`'s `model` label, read as Prometheus reads it: up to the first
    /// unescaped quote, escapes undone.
    fn model_label(line: &str) -> String {
        let start = line.find("model=\"").expect("a model label") + "model=\"".len();
        let mut value = String::new();
        let mut chars = line[start..].chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return value,
                '\\' => value.push(match chars.next() {
                    Some('n') => '\n',
                    Some(c) => c,
                    None => panic!("a label that ends in an escape: {line}"),
                }),
                c => value.push(c),
            }
        }
        panic!("an unterminated label: {line}")
    }

    #[test]
    fn a_hostile_name_stays_inside_its_label_value() {
        assert_eq!(label("all-MiniLM-L6-v2"), "all-MiniLM-L6-v2");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        // A name (or a plugin provider's name) that tries to close the label and add a sample.
        let hostile = "m\"} 1\nnornir_texts_total{model=\"x\\";
        let mut out = String::new();
        let _ = writeln!(out, "nornir_texts_total{{model=\"{}\"}} 7", label(hostile));
        assert_eq!(out.lines().count(), 1, "{out}");
        assert_eq!(model_label(&out), hostile);
        assert!(out.trim_end().ends_with("\"} 7"), "{out}");
        // The server refuses such a name before it could be served at all.
        assert!(crate::models::Models::new([hostile.to_owned()]).is_err());
    }
}
