//! The counters behind `/metrics` and their exposition in Prometheus' text format (0.0.4), through
//! `prometheus-client`: the request counts and latency as its own metrics, each model's figures
//! read from its embedder at every scrape by a collector. api.rs serves it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use nornir_vector::BATCH_SIZE_BOUNDS;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::models::{Entry, Models};

/// Request latency histogram bounds, in seconds.
const LATENCY_BOUNDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The labels of a request count: its endpoint and its status.
type RequestLabels = [(&'static str, String); 2];

#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Histogram,
}

impl Metrics {
    pub(crate) fn new(models: Arc<Models>) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("nornir_requests", "HTTP requests by endpoint and status", requests.clone());
        let latency = Histogram::new(LATENCY_BOUNDS);
        registry.register("nornir_request_duration_seconds", "Request latency", latency.clone());
        registry.register_collector(Box::new(PerModel(models)));
        Self { registry, requests, latency }
    }

    pub(crate) fn record(&self, endpoint: &'static str, status: StatusCode, elapsed: Duration) {
        self.requests
            .get_or_create(&[("endpoint", endpoint.to_owned()), ("status", status.as_u16().to_string())])
            .inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn count_texts(&self, entry: &Entry, texts: usize, tokens: usize, truncated: usize) {
        entry.texts.fetch_add(texts as u64, Ordering::Relaxed);
        entry.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        entry.truncated.fetch_add(truncated as u64, Ordering::Relaxed);
    }

    /// The text exposition of every metric, the server's then each model's (labelled `model`).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail, and every name and label set here is well formed.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Each model's figures, read at scrape time: the server's own counts of its texts, and what its
/// embedder reports (memory, batches, queue, provider). Models still loading have only the first.
#[derive(Debug)]
struct PerModel(Arc<Models>);

/// One metric family: a value per label set.
fn family<V>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, V)>,
) -> Result<(), std::fmt::Error>
where
    V: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn model(name: &str) -> Vec<(&'static str, String)> {
    vec![("model", name.to_owned())]
}

/// The server's own counts of each model's texts, tokens and truncated inputs.
fn request_counts(e: &mut DescriptorEncoder, entries: &[Entry]) -> Result<(), std::fmt::Error> {
    let counter = |read: fn(&Entry) -> u64| {
        entries.iter().map(move |m| (model(&m.name), ConstCounter::new(read(m)))).collect::<Vec<_>>()
    };
    family(
        e,
        "nornir_texts",
        "Texts embedded for requests.",
        MetricType::Counter,
        counter(|m| m.texts.load(Ordering::Relaxed)),
    )?;
    family(
        e,
        "nornir_tokens",
        "Tokens the model read for requests.",
        MetricType::Counter,
        counter(|m| m.tokens.load(Ordering::Relaxed)),
    )?;
    family(
        e,
        "nornir_truncated_inputs",
        "Texts cut to the model's length (--long truncate or \"truncate\": true).",
        MetricType::Counter,
        counter(|m| m.truncated.load(Ordering::Relaxed)),
    )?;
    Ok(())
}

impl Collector for PerModel {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let entries = &self.0.entries;
        request_counts(&mut e, entries)?;
        let loaded: Vec<(&str, _, _)> =
            entries.iter().filter_map(|m| m.embedder.get().map(|e| (m.name.as_str(), e.report(), e.stats()))).collect();
        if let Some(rss) = loaded.first().and_then(|(_, r, _)| r.memory.resident_bytes) {
            let gauge = [(Vec::new(), ConstGauge::new(rss))];
            family(&mut e, "nornir_resident_memory_bytes", "The process's resident memory.", MetricType::Gauge, gauge)?;
        }
        if let Some(peak) = loaded.first().and_then(|(_, r, _)| r.memory.peak_resident_bytes) {
            let gauge = [(Vec::new(), ConstGauge::new(peak))];
            let help = "The most resident memory the process has held.";
            family(&mut e, "nornir_peak_resident_memory_bytes", help, MetricType::Gauge, gauge)?;
        }
        family(
            &mut e,
            "nornir_workers_per_session",
            "Workers running each session at once (all of them on the CPU).",
            MetricType::Gauge,
            loaded.iter().map(|(n, r, _)| (model(n), ConstGauge::new(r.memory.workers_per_session as u64))),
        )?;
        let sessions =
            loaded.iter().flat_map(|(n, r, _)| {
                r.memory.session_growth_bytes.iter().enumerate().map(|(k, grew)| {
                    (vec![("model", (*n).to_owned()), ("session", k.to_string())], ConstGauge::new(*grew))
                })
            });
        let help = "Resident memory each session added when it was built (weights, pre-packed kernels, graph).";
        family(&mut e, "nornir_session_memory_bytes", help, MetricType::Gauge, sessions)?;
        let mut batches =
            e.encode_descriptor("nornir_batch_size", "Texts per batch run by the model.", None, MetricType::Histogram)?;
        for (n, _, s) in &loaded {
            // The stats count cumulatively, as Prometheus' buckets do; the encoder adds them up itself.
            let mut below = 0;
            let buckets: Vec<(f64, u64)> = BATCH_SIZE_BOUNDS
                .iter()
                .zip(s.batch_sizes)
                .map(|(bound, cumulative)| (*bound as f64, cumulative - std::mem::replace(&mut below, cumulative)))
                .collect();
            batches.encode_family(&model(n))?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                s.batched_texts as f64,
                s.batches,
                &buckets,
                None,
            )?;
        }
        let gauge = |read: fn(&nornir_vector::EmbedStats) -> u64| {
            loaded.iter().map(move |(n, _, s)| (model(n), ConstGauge::new(read(s)))).collect::<Vec<_>>()
        };
        family(
            &mut e,
            "nornir_queue_texts",
            "Texts waiting for a batch.",
            MetricType::Gauge,
            gauge(|s| s.queued_texts),
        )?;
        let help = "Texts in the batches running now.";
        family(&mut e, "nornir_running_texts", help, MetricType::Gauge, gauge(|s| s.running_texts))?;
        let stat = |read: fn(&nornir_vector::EmbedStats) -> u64| {
            loaded.iter().map(move |(n, _, s)| (model(n), ConstCounter::new(read(s)))).collect::<Vec<_>>()
        };
        let help = "Texts dropped before they ran: their client went away or their request timed out.";
        family(&mut e, "nornir_cancelled_texts", help, MetricType::Counter, stat(|s| s.cancelled_texts))?;
        let help = "Tokens fed to the model, padding included.";
        family(&mut e, "nornir_model_tokens", help, MetricType::Counter, stat(|s| s.padded_tokens))?;
        let seconds = loaded.iter().map(|(n, _, s)| (model(n), ConstCounter::new(s.ort_seconds)));
        let help = "Seconds inside ONNX Runtime, all sessions.";
        family(&mut e, "nornir_ort_seconds", help, MetricType::Counter, seconds)?;
        let providers = loaded.iter().map(|(n, r, _)| {
            let labels = vec![
                ("model", (*n).to_owned()),
                ("provider", r.active_provider.clone()),
                ("vendor", r.gpu_vendor.to_string()),
            ];
            (labels, ConstGauge::new(1u64))
        });
        let help = "The execution provider really running the model.";
        family(&mut e, "nornir_active_provider", help, MetricType::Gauge, providers)
    }
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

    /// A name (or a plugin provider's name) that tries to close the label and add a sample.
    #[derive(Debug)]
    struct Hostile(&'static str);

    impl Collector for Hostile {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            family(&mut e, "nornir_texts", "Texts.", MetricType::Counter, [(model(self.0), ConstCounter::new(7u64))])
        }
    }

    #[test]
    fn a_hostile_name_stays_inside_its_label_value() {
        let hostile = "m\"} 1\nnornir_texts_total{model=\"x\\";
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Hostile(hostile)));
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).expect("encode");
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples.len(), 1, "{out}");
        assert_eq!(model_label(samples[0]), hostile);
        assert!(samples[0].starts_with("nornir_texts_total{") && samples[0].ends_with("\"} 7"), "{out}");
        // The server refuses such a name before it could be served at all.
        assert!(Models::new([hostile.to_owned()]).is_err());
    }

    #[test]
    fn requests_and_models_keep_their_exposed_names() {
        let models = Arc::new(Models::new(["minilm".to_owned()]).expect("names"));
        let m = Metrics::new(models);
        m.record("/v1/embeddings", StatusCode::OK, Duration::from_millis(30));
        let text = m.render();
        for line in [
            "nornir_requests_total{endpoint=\"/v1/embeddings\",status=\"200\"} 1",
            "nornir_request_duration_seconds_bucket{le=\"0.05\"} 1",
            "nornir_request_duration_seconds_bucket{le=\"+Inf\"} 1",
            "nornir_request_duration_seconds_count 1",
            "nornir_texts_total{model=\"minilm\"} 0",
            "# TYPE nornir_truncated_inputs_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
